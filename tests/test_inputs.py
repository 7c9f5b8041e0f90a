"""Tables going into a report or a tolerance are checked like traces; bad values are one line, not a figure.

A duplicated row counts its pair twice in every percentile; a NaN SSIM or an infinite speedup is no
measurement. ``teacache-bench report`` and ``teacache-bench tolerances`` refuse both, as the trace reader
refuses duplicated steps and non-finite signals. A tolerance from fewer pairs than its rule is provisional.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from bench import report as report_cmd
from bench import tolerances as tolerances_cmd

ROOT = Path(__file__).resolve().parents[1]
SWEEP = ROOT / "results/cpu-amd-epyc-2c/tiny-shapes/0.24.0/sweep"
TRACES = SWEEP.parent / "traces" / "traces.parquet"


@pytest.fixture
def sweep_copy(tmp_path) -> Path:
    folder = tmp_path / "sweep"
    folder.mkdir()
    for name in ("runs.parquet", "decisions.parquet", "noop.parquet", "provenance.json"):
        shutil.copy(SWEEP / name, folder / name)
    return folder


def _spoil(folder: Path, how: str) -> None:
    runs = pd.read_parquet(folder / "runs.parquet")
    at = runs.index[(runs["kind"] == "teacache") & np.isclose(runs["threshold"].fillna(-1), 0.03)]
    if how == "duplicate":
        runs = pd.concat([runs, runs.loc[[at[0]]]], ignore_index=True)
    elif how == "nan-ssim":
        runs.loc[at[0], ["ssim", "psnr"]] = np.nan
    elif how == "inf-speedup":
        runs.loc[at[0], "speedup"] = np.inf
    runs.to_parquet(folder / "runs.parquet", index=False)


SPOILS = {"duplicate": "rows repeat a run", "nan-ssim": "'ssim'", "inf-speedup": "'speedup'"}


@pytest.mark.parametrize("how", sorted(SPOILS))
def test_report_refuses_a_table_with_duplicated_or_non_finite_rows(how, sweep_copy, tmp_path, capsys):
    _spoil(sweep_copy, how)
    assert report_cmd.main([str(sweep_copy), "--out", str(tmp_path / "report")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and SPOILS[how] in err
    assert not (tmp_path / "report").exists()


@pytest.mark.parametrize("how", sorted(SPOILS))
def test_tolerances_refuse_a_table_with_duplicated_or_non_finite_rows(how, sweep_copy, tmp_path, capsys):
    _spoil(sweep_copy, how)
    out = tmp_path / "tolerances.py"
    assert tolerances_cmd.main([str(sweep_copy), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and SPOILS[how] in err
    assert not out.exists()


def test_a_floor_from_fewer_pairs_than_the_rule_is_provisional(sweep_copy, monkeypatch):
    """PSNR leaves out identical images (+inf): a floor from the few pairs left is provisional, even when the
    sweep as a whole has enough pairs to be calibrated."""
    runs = pd.read_parquet(sweep_copy / "runs.parquet")
    at = (runs["kind"] == "teacache") & np.isclose(runs["threshold"].fillna(-1), 0.03)
    pairs = sorted(runs.loc[at, "pair_id"].unique())
    monkeypatch.setattr(tolerances_cmd, "CALIBRATED_MIN_PAIRS", len(pairs))
    identical = at & runs["pair_id"].isin(pairs[:2])
    runs.loc[identical, "psnr"] = np.inf
    runs.to_parquet(sweep_copy / "runs.parquet", index=False)
    derived = tolerances_cmd.derive(sweep_copy)
    assert derived["status"] == "calibrated"
    psnr_note = derived["constants"]["TINY_SHAPES_PSNR_FLOOR"][1]
    assert psnr_note[-1].startswith(f"provisional: from {len(pairs) - 2} pairs")
    assert derived["constants"]["TINY_SHAPES_SSIM_FLOOR"][1][-1] == "calibrated"


# ------------------------------------------------------------------- bad input: one line, before any load


def _one_line(command: str, argv: list[str], tmp_path, monkeypatch, capsys) -> str:
    from tests.test_refusals import _refused

    return _refused(command, argv, tmp_path, monkeypatch, capsys)


@pytest.mark.parametrize(
    ("command", "argv", "expected"),
    [
        ("teacache-bench gapcheck", ["--model", "tiny-shapes", "--max-prompts", "0"], "--max-prompts: expected"),
        ("teacache-bench gapcheck", ["--model", "tiny-shapes", "--max-prompts", "-1"], "--max-prompts"),
        ("teacache-bench gapcheck", ["--model", "{folder}"], "--base-model"),
        ("teacache-bench gapcheck", ["--model", "{folder}", "--base-model", "nonsense"], "--base-model: unknown"),
        ("teacache-calib record", ["--model", "tiny-shapes", "--steps", "2"], "--steps: expected at least 3"),
        ("teacache-bench sweep", ["--model", "tiny-shapes", "--thresholds", "0.1,,0.2"], "--thresholds: an empty item"),
        ("teacache-bench sweep", ["--model", "", "--thresholds", "0.1"], "--model: expected a model name"),
        ("teacache-bench campaign", ["--model", "tiny-shapes", "--sweep-seeds", "x"], "--sweep-seeds:"),
        ("teacache-bench overhead", ["--model", "tiny-shapes", "--size", "0x0"], "--size: expected positive"),
        ("teacache-bench overhead", ["--model", "tiny-shapes", "--size", "64x64"], "--size: tiny-shapes only makes"),
        ("teacache-calib fit", [str(TRACES), "--min-step", "99"], "--min-step: 99 is past"),
        ("teacache-bench sweep", ["--model", "tiny-flux1", "--thresholds", "0.1", "--steps", "28",
                                  "--traces", str(TRACES)], "holds traces of tiny-shapes, not of tiny-flux1"),
    ],
)  # fmt: skip
def test_bad_input_is_one_line_naming_the_argument(command, argv, expected, tmp_path, monkeypatch, capsys):
    folder = tmp_path / "weights"
    folder.mkdir()
    argv = [a.replace("{folder}", str(folder)) for a in argv]
    if command != "teacache-bench overhead":
        argv += ["--out", str(tmp_path / "out")]
    line = _one_line(command, argv, tmp_path, monkeypatch, capsys)
    assert expected in line, line


def test_gapcheck_without_weights_is_one_line(tmp_path, monkeypatch, capsys):
    """A model whose weights cannot be had (no network here) is one line about --model, as record and sweep say."""
    import calib.arguments

    def no_network(*_args, **_kwargs):
        raise ConnectionError("[Errno -3] Temporary failure in name resolution")

    monkeypatch.setattr("teacache.load_model", no_network)
    from bench import gapcheck

    tolerances = str(ROOT / "tests/tolerances/cpu_amd_epyc_2c.py")
    argv = ["--model", "dev", "--max-prompts", "1", "--tolerances", tolerances, "--out", str(tmp_path / "out")]
    assert gapcheck.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--model: cannot load dev (ConnectionError" in err
    assert calib.arguments.load_model  # the one loader every command shares
    assert not (tmp_path / "out").exists()


def test_gapcheck_render_only_names_a_missing_field(tmp_path, capsys):
    from bench import gapcheck

    (tmp_path / "gapcheck.json").write_text("{}")
    assert gapcheck.main(["--render-only", "--out", str(tmp_path)]) == 2
    assert "lacks the field 'summary'" in capsys.readouterr().err


def test_a_damaged_pair_file_names_the_way_out(tmp_path):
    from bench import records
    from bench.sweep import read_part

    path = tmp_path / "p-s0.runs.parquet"
    path.write_bytes(b"PAR1 truncated")
    with pytest.raises(records.RecordError, match="delete that file and run the same command again"):
        read_part(path, records.RUNS)


# --------------------------------------------------------------------------------------------- the API


def test_numpy_scalars_are_numbers_where_python_numbers_are():
    from teacache.gate import GateConfig
    from teacache.rescale import RescaleFunction

    config = GateConfig(np.float32(0.03), RescaleFunction((np.float64(1.0), 0)), skip_first_n_steps=np.int64(2))
    assert config.rel_l1_thresh == pytest.approx(0.03) and type(config.rel_l1_thresh) is float
    assert config.skip_first_n_steps == 2 and type(config.skip_first_n_steps) is int
    with pytest.raises(ValueError, match=r"got -0\.05\b") as caught:
        GateConfig(np.float64(-0.05), RescaleFunction((1.0, 0.0)))
    assert "np.float64" not in str(caught.value)


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: __import__("teacache").load_model(123), "model: expected a name"),
        (lambda: __import__("teacache.rescale").rescale.RescaleFunction(("a", "b")), "coefficients: expected numbers"),
        (lambda: __import__("teacache.gate").gate.check_threshold("0.1"), "rel_l1_thresh: expected a number"),
    ],
)
def test_wrong_types_are_type_errors_naming_the_argument(call, match):
    with pytest.raises(TypeError, match=match):
        call()


def test_coefficients_that_overflow_are_refused():
    from teacache.rescale import RescaleFunction

    with pytest.raises(ValueError, match="overflows"):
        RescaleFunction((1e308, 1e308))


def test_never_skips_names_the_coefficients_it_was_given():
    import warnings

    import teacache

    model = teacache.load_model("tiny-shapes")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with teacache.apply_teacache(model, rel_l1_thresh=0.001, coefficients=(1.0, 1.0)):
            pass
    messages = [str(w.message) for w in caught if issubclass(w.category, teacache.NeverSkipsWarning)]
    assert messages and "with the given coefficients" in messages[0] and "tiny-shapes" not in messages[0]


def test_messages_show_numpy_values_as_numbers(tmp_path, capsys):
    """Values that come out of numpy arrays read as numbers in a message, not as np.float64(0.05)."""
    from bench.report_compute import validate_floor
    from calib import fit as fit_cmd
    from tests.test_calib_fit import make_traces, write

    frame = make_traces(branches=("cond",)).assign(x_rel_l1=0.05)
    assert fit_cmd.main([str(write(frame, tmp_path / "t.parquet")), "--out", str(tmp_path / "fit"), "--no-plots"]) == 2
    err = capsys.readouterr().err
    assert "every row holds 0.05;" in err and "np.float64" not in err
    with pytest.raises(Exception, match=r"--ssim-floor 1\.5: expected") as caught:
        validate_floor(np.float64(1.5))
    assert "np.float64" not in str(caught.value)
