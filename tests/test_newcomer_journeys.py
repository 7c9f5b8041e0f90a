"""What a new user meets when re-running the journeys (README.md, docs/): a campaign re-run resumes, provenance
says who recorded and who resumed, a folder of one command is refused by another, a campaign's fit passes the
rule the committed fits are held to.

The commands share the session's tiny-flux1 (tests/conftest.py's shared_model): seconds per command.
"""

from __future__ import annotations

import json
import math
import re
import shlex
import shutil

import pytest

from calib.run import fingerprint
from tests import ROOT, doc_pages
from tests.calib.fit.conftest import interaction_truth, loads_as_selected, make_traces, run_fit, write
from tests.conftest import one_line, record, sweep

# ------------------------------------------------------------------ computed settings, compared as numbers


def _nudged(values: list[float], relative: float) -> list[float]:
    return [v * (1 + relative) for v in values]


def test_refitted_coefficients_within_the_measured_tolerance_are_the_same_setting():
    stored = {"coefficients": {"coefficients": [-22.678674201592905, 16.086119049542994], "x_range": [0.01, 0.35]}}
    refit = {"coefficients": {"coefficients": _nudged([-22.678674201592905, 16.086119049542994], 3e-15),
                              "x_range": [0.01, 0.35]}}  # fmt: skip
    assert fingerprint.compare(stored, refit) == ([], {})
    other = {"coefficients": {"coefficients": _nudged([-22.678674201592905, 16.086119049542994], 1e-6),
                              "x_range": [0.01, 0.35]}}  # fmt: skip
    differences, _ = fingerprint.compare(stored, other)
    assert len(differences) == 1


def test_a_difference_is_shown_at_the_precision_at_which_the_values_differ():
    differences, _ = fingerprint.compare({"guidance": 3.5, "thresholds": [0.1, 0.2]},
                                         {"guidance": 3.5000001, "thresholds": [0.1, 0.2000000004]})  # fmt: skip
    text = "; ".join(differences)
    assert "guidance 3.5 (this run: 3.5000001)" in text
    assert "thresholds 0.1,0.2 (this run: 0.1,0.2000000004)" in text


def test_a_sweep_made_with_a_refit_of_the_same_traces_resumes(tmp_path, prompts, shared_model, capsys):
    """The campaign's sweep after a refit in another process: coefficients a few ulp apart resume, untouched."""
    out = tmp_path / "sweep"
    assert sweep(out, prompts) == 0
    data = json.loads((out / "fingerprint.json").read_text())
    stored = data["settings"]["coefficients"]
    stored["coefficients"] = _nudged(stored["coefficients"], 3e-15)
    assert any(a != b for a, b in zip(stored["coefficients"], _nudged(stored["coefficients"], -3e-15), strict=True))
    (out / "fingerprint.json").write_text(json.dumps(data))
    kept = {name: (out / name).read_bytes() for name in ("runs.parquet", "provenance.json", "fingerprint.json")}
    capsys.readouterr()
    assert sweep(out, prompts) == 0, capsys.readouterr().err
    assert "nothing to measure" in capsys.readouterr().out
    assert {name: (out / name).read_bytes() for name in kept} == kept


# ------------------------------------------------------------------------------ the campaign's fit stage


@pytest.fixture(scope="module")
def small_traces(tmp_path_factory):
    folder = tmp_path_factory.mktemp("traces")
    return write(make_traces(n_prompts=4, n_steps=10, seeds=(0,)), folder / "traces.parquet")


@pytest.fixture(scope="module")
def small_fit(tmp_path_factory, small_traces):
    """The campaign's fit stage on ``small_traces`` into a fresh folder, once: the tests change copies of it."""
    from bench.campaign import fit_stage

    out = tmp_path_factory.mktemp("fit") / "fit"
    fit_stage(small_traces, out, 1)
    return out


def _files(folder):
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def test_the_campaign_keeps_a_fit_the_refit_reproduces(tmp_path, small_traces, small_fit, capsys):
    from bench.campaign import fit_stage

    out = shutil.copytree(small_fit, tmp_path / "fit")
    fit = json.loads((out / "fit.json").read_text())
    fit["selected"]["coefficients"] = _nudged(fit["selected"]["coefficients"], 3e-15)  # another machine's refit
    (out / "fit.json").write_text(json.dumps(fit))
    before = _files(out)
    fit_stage(small_traces, out, 1, sweep=tmp_path / "sweep")
    assert "kept" in capsys.readouterr().out
    assert _files(out) == before


def test_the_campaign_refuses_another_fit_before_writing_it_while_the_sweep_holds_the_old(
    tmp_path, small_traces, small_fit
):
    from bench.campaign import fit_stage

    out, swept = shutil.copytree(small_fit, tmp_path / "fit"), tmp_path / "sweep"
    fit = json.loads((out / "fit.json").read_text())
    fit["selected"]["coefficients"] = _nudged(fit["selected"]["coefficients"], 1e-3)
    (out / "fit.json").write_text(json.dumps(fit))
    (swept / "pairs").mkdir(parents=True)
    (swept / "pairs" / "p-s0.runs.parquet").write_bytes(b"measured with the old fit")
    before = _files(out)
    with pytest.raises(ValueError, match="another fit.*--force-new"):
        fit_stage(small_traces, out, 1, sweep=swept)
    assert _files(out) == before
    fit_stage(small_traces, out, 1, sweep=swept, force_new=True)  # the sweep starts afresh: the fit is rewritten
    assert _files(out) != before


def test_a_campaign_whose_sweep_was_measured_with_another_fit_is_refused_before_any_stage_runs(tmp_path, capsys):
    """The sweep stage refuses such a folder anyway; the campaign says so before record and fit spend minutes."""
    import shutil

    from bench.campaign import main as campaign
    from bench.campaign import plan_campaign
    from calib.run import fingerprint
    from teacache.provenance import hardware_slug

    out = tmp_path / "campaign"
    for stage in ("traces", "fit", "sweep"):
        shutil.copytree(ROOT / "results/cpu-amd-epyc-2c/tiny-open-flux1/0.24.0" / stage, out / stage)
    recorded = json.loads((out / "sweep" / "fingerprint.json").read_text())
    recorded["settings"]["hardware"] = hardware_slug()  # as if measured here: the hardware is a setting,
    recorded["settings"]["versions"] = fingerprint.versions()  # and so are the installed MLX and mflux
    (out / "sweep" / "fingerprint.json").write_text(json.dumps(recorded))

    plan_campaign("tiny-open-flux1", out)  # the committed campaign: its sweep was measured with its fit
    fit = json.loads((out / "fit" / "fit.json").read_text())
    fit["selected"]["coefficients"] = _nudged(fit["selected"]["coefficients"], 1e-3)
    (out / "fit" / "fit.json").write_text(json.dumps(fit))
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    assert campaign(["--model", "tiny-open-flux1", "--out", str(out)]) == 2
    printed = capsys.readouterr()
    line = one_line(printed.err)
    assert "sweep: --out" in line and "coefficients.coefficients" in line and "--force-new" in line
    assert "== record" not in printed.out
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before
    plan_campaign("tiny-open-flux1", out, force_new=True)  # --force-new measures the sweep afresh: accepted


# --------------------------------------------------------------------- who recorded, who resumed (item 3)


def test_provenance_says_who_recorded_the_runs_and_who_resumed_them(tmp_path, prompts, shared_model, capsys):
    out = tmp_path / "traces"
    assert record(out, prompts) == 0
    prov = json.loads((out / "provenance.json").read_text())
    assert prov["recorded_by"]["units"] == 2 and prov["resumed_by"] == []
    earlier = {"command": "teacache-calib record (an earlier one)", "date_utc": "2026-01-01T00:00:00Z",
               "git": {"commit": "0" * 40, "dirty": True}}  # fmt: skip
    prov["recorded_by"].update(earlier)
    (out / "provenance.json").write_text(json.dumps(prov))
    kept = {name: (out / name).read_bytes() for name in ("traces.parquet", "provenance.json")}
    assert record(out, prompts) == 0  # nothing to do: the files describe the runs that made them
    assert {name: (out / name).read_bytes() for name in kept} == kept
    assert record(out, prompts, "--seeds", "0,1") == 0  # extends: the new runs are this command's
    prov = json.loads((out / "provenance.json").read_text())
    assert {k: prov["recorded_by"][k] for k in earlier} == earlier
    assert [r["units"] for r in prov["resumed_by"]] == [2] and prov["resumed_by"][0]["command"] == prov["command"]


def test_a_folder_written_by_one_command_is_refused_by_another(tmp_path, prompts, shared_model, capsys):
    out = tmp_path / "sweep"
    assert sweep(out, prompts) == 0
    kept = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}
    capsys.readouterr()
    assert record(out, prompts) == 2
    line = one_line(capsys.readouterr().err)
    assert "teacache-bench sweep" in line and "--out" in line
    assert {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()} == kept
    traces = tmp_path / "traces"
    assert record(traces, prompts) == 0
    capsys.readouterr()
    assert sweep(traces, prompts) == 2
    assert "teacache-calib record" in one_line(capsys.readouterr().err)


# ----------------------------------------------------------------------- the tolerance journey (item 1)


def test_a_campaign_fit_with_interaction_terms_passes_the_rule_committed_fits_are_held_to(tmp_path, capsys):
    """The campaign's fit may select x*u terms (tiny-flux1's does); make test holds every results/**/fit.json to
    loading as the function it selected, which such a fit does."""
    frame = make_traces(truth=interaction_truth, noise=0.002, branches=("cond",)).drop(columns="sigma")
    args = [write(frame, tmp_path / "t.parquet"), "--out", tmp_path / "results/x/fit", "--form", "poly+step",
            "--degree", 1, "--time-degree", 3, "--interaction-degree", 1, "--mode", "free", "--no-plots"]  # fmt: skip
    assert run_fit(args, capsys)[0] == 0
    path = tmp_path / "results/x/fit/fit.json"
    assert json.loads(path.read_text())["selected"]["interaction_coefficients"]
    loads_as_selected(path)
    assert math.isfinite(json.loads(path.read_text())["selected"]["cv_r2"])


# -------------------------------------------------------------------------- the README and docs/ (item 14)

CAMPAIGN = ROOT / "results/cpu-amd-epyc-2c/tiny-shapes/0.24.0"
FIT_JSON, TINY_SHAPES_TRACES = CAMPAIGN / "fit" / "fit.json", CAMPAIGN / "traces" / "traces.parquet"
PAGES = doc_pages.PAGES
INPUT_SUFFIXES = (".json", ".parquet", ".csv", ".jsonl", ".py")


def _shell_blocks(text: str) -> list[tuple[str, list[str]]]:
    """(the heading above it, its command lines) for every ```sh block."""
    return [(block.heading, block.lines) for block in doc_pages.blocks({"page": text})]


@pytest.mark.parametrize("page", PAGES)
def test_each_page_activates_the_environment_before_its_first_command(page):
    lines = [line for _, block in _shell_blocks(PAGES[page]) for line in block]
    first = next((i for i, line in enumerate(lines) if re.match(r"(teacache-calib|teacache-bench) ", line)), None)
    if first is not None:
        assert any(". .venv/bin/activate" in line for line in lines[:first]), (page, lines[: first + 1])


@pytest.mark.parametrize("page", PAGES)
def test_journeys_read_only_files_that_ship_or_an_earlier_step_writes(page):
    """Every input path a journey names exists in the repository or is under an --out of an earlier step."""
    missing = []
    for heading, lines in _shell_blocks(PAGES[page]):
        written: list[str] = []
        for line in lines:
            words = shlex.split(line)
            outs = [words[i + 1] for i, w in enumerate(words[:-1]) if w in ("--out", ">")]  # --out, a redirection
            for path in (part for word in words if not word.startswith("-") for part in word.split(",")):
                path = path.split("#", 1)[0]  # a comma-separated list names one path per item
                if "$" in path or not path.endswith(INPUT_SUFFIXES) or path in outs:
                    continue
                earlier = any(path == o or path.startswith(o.rstrip("/") + "/") for o in written)
                if not (ROOT / path).exists() and not earlier:
                    missing.append(f"{heading}: {path}")
            written += outs
    assert not missing, missing


def test_runs_is_ignored_and_the_lock_names_this_distribution():
    import subprocess

    ignored = subprocess.run(["git", "check-ignore", "-q", "runs/sweep/runs.parquet"], cwd=ROOT)
    assert ignored.returncode == 0
    for name in ("cpu.txt", "cuda.txt"):
        assert "mflux-teacache" not in (ROOT / "requirements" / name).read_text()


def test_emit_for_a_variant_without_a_module_says_how_to_name_one(tmp_path, capsys):
    from calib import emit

    assert emit.main([str(FIT_JSON), "--variant", "flux2-klein-base-9b", "--out", str(tmp_path / "m.py")]) == 2
    err = capsys.readouterr().err
    assert 'coefficients="flux2_klein_base_9b"' in err and "teacache/variants/flux2.py" in err
    assert not (tmp_path / "m.py").exists()


def test_emit_writes_the_module_a_new_variants_spec_names(tmp_path, capsys, monkeypatch):
    """docs/api.md's new-variant journey: a spec that names its module, then emit."""
    import dataclasses

    from calib import emit
    from teacache import variants

    real_find = variants.find

    def find(name):
        spec = real_find(name)
        if spec is not None and spec.name == "flux2-klein-base-9b":
            return dataclasses.replace(spec, coefficients="flux2_klein_base_9b")
        return spec

    monkeypatch.setattr(variants, "find", find)
    frame = make_traces(variant="flux2-klein-base-9b", branches=("cond",))
    assert run_fit([write(frame, tmp_path / "t.parquet"), "--out", tmp_path / "fit", "--no-plots"], capsys)[0] == 0
    out = tmp_path / "flux2_klein_base_9b.py"
    assert emit.main([str(tmp_path / "fit"), "--variant", "flux2-klein-base-9b", "--out", str(out)]) == 0
    assert "RESCALE = RescaleFunction(" in out.read_text()


def test_the_sample_calibration_is_this_projects_own_and_reads_as_traces_and_coefficients(tmp_path):
    import numpy as np

    from calib.fit.coefficient_sources import resolve_coefficients
    from calib.traces.reader import load_traces
    from calib.traces.sample_calibration import main as write_sample

    sample = ROOT / "samples" / "_calibration_tiny_shapes.json"
    assert write_sample([str(TINY_SHAPES_TRACES), "--out", str(tmp_path / "s.json"), "--table",
                         str(tmp_path / "t.csv")]) == 0  # fmt: skip
    rebuilt, committed = (json.loads(path.read_text()) for path in (tmp_path / "s.json", sample))
    fitted = ("coefficients_c4_to_c0", "fit_r_squared", "heldout_r_squared")
    assert {k: v for k, v in rebuilt.items() if k not in fitted} == {
        k: v for k, v in committed.items() if k not in fitted
    }  # the data, recipe and note: exactly the committed ones
    # The fitted numbers are a least-squares solution, whose last digits follow the BLAS's summation order
    # (they differ between CPUs). Bound: a backward-stable solver moves the solution by about cond(V)^2 * eps
    # relative to its norm, V the degree-4 Vandermonde matrix of the pairs' x.
    x = np.asarray(committed["x_values"])
    bound = np.linalg.cond(np.vander(x, 5)) ** 2 * np.finfo(np.float64).eps
    coefficients = [np.asarray(d["coefficients_c4_to_c0"]) for d in (rebuilt, committed)]
    assert np.linalg.norm(coefficients[0] - coefficients[1]) <= bound * np.linalg.norm(coefficients[1])
    for key in fitted[1:]:
        assert abs(rebuilt[key] - committed[key]) <= bound
    assert (tmp_path / "t.csv").read_bytes() == (ROOT / "samples" / "traces.csv").read_bytes()
    traces = load_traces([str(sample)])
    assert traces.variants == ["tiny-shapes"] and len(traces.frame) == 8 * 27
    rescale = resolve_coefficients(str(sample), None, None)[0]
    assert len(rescale.coefficients) == 5


# ---------------------------------------------------------------------- ranks in the report (item 12)


def test_the_report_says_which_ranks_measured_and_that_rows_were_contended(tmp_path):
    import shutil

    import pandas as pd

    from bench.report.command import build_report

    sweep_dir = tmp_path / "sweep"
    sweep_dir.mkdir()
    for name in ("runs.parquet", "decisions.parquet", "noop.parquet", "provenance.json"):
        shutil.copy(CAMPAIGN / "sweep" / name, sweep_dir / name)
    runs = pd.read_parquet(sweep_dir / "runs.parquet")
    runs["rank"] = [i % 2 for i in range(len(runs))]
    runs["contended"] = True
    runs["hardware"] = "cpu-amd-epyc-2c"
    runs.to_parquet(sweep_dir / "runs.parquet", index=False)
    build_report(sweep_dir, tmp_path / "report")
    text = (tmp_path / "report" / "report.md").read_text()
    assert "Measured by: ranks 0, 1" in text
    assert f"{len(runs)} of {len(runs)} rows contended" in text and "**Contended timing**" in text


def test_a_resume_in_one_process_keeps_the_ranks_its_rows_name():
    import pandas as pd

    from calib.run import ranks

    one = ranks.connect()
    rows = pd.DataFrame({"rank": [0, 1, 1], "contended": [True, True, False]})
    found = ranks.sharding_provenance(one, rows)["distributed"]
    assert found["ranks_in_rows"] == [0, 1] and found["contended_rows"] and found["resumed_in_one_process"]
    assert ranks.sharding_provenance(one, pd.DataFrame({"rank": [0, 0]})) == {}


@pytest.mark.parametrize(
    ("argv", "command"),
    [
        (["/somewhere/bench/cli.py", "sweep", "--out", "x"], "teacache-bench sweep --out x"),
        (["/somewhere/.venv/bin/teacache-calib", "record"], "teacache-calib record"),
    ],
)
def test_provenance_names_the_command_as_a_user_types_it(argv, command, monkeypatch):
    import sys

    from teacache.provenance import collect

    monkeypatch.setattr(sys, "argv", argv)
    assert collect()["command"] == command


def test_the_report_names_who_recorded_the_rows_and_who_resumed_them(tmp_path):
    import shutil

    from bench.report.command import build_report

    sweep_dir = tmp_path / "sweep"
    sweep_dir.mkdir()
    for name in ("runs.parquet", "decisions.parquet", "noop.parquet", "provenance.json"):
        shutil.copy(CAMPAIGN / "sweep" / name, sweep_dir / name)
    prov = json.loads((sweep_dir / "provenance.json").read_text())
    prov["recorded_by"] = {"command": "teacache-bench sweep (first)", "date_utc": "2026-01-01T00:00:00Z",
                           "git": {"commit": "a" * 40, "dirty": True}, "units": 5, "of": 8}  # fmt: skip
    prov["resumed_by"] = [{"command": "teacache-bench sweep (later)", "date_utc": "2026-01-02T00:00:00Z",
                           "git": {"commit": "b" * 40, "dirty": False}, "units": 3, "of": 8}]  # fmt: skip
    (sweep_dir / "provenance.json").write_text(json.dumps(prov))
    build_report(sweep_dir, tmp_path / "report")
    text = (tmp_path / "report" / "report.md").read_text()
    assert "Rows recorded by: `teacache-bench sweep (first)` (2026-01-01T00:00:00Z, commit " + "a" * 40 in text
    assert "resumed by `teacache-bench sweep (later)`" in text and "3 pairs" in text
