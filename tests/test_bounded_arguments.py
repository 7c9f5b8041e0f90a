"""Values that passed the argument checks and then failed late (a traceback, after the model loaded) or ran
something else than asked: each is refused in one line naming the argument, exit 2, before any model loads,
nothing written. Values at the edge of each bound are still accepted."""

from __future__ import annotations

import pytest

import teacache.models.shapes
from bench.sweep import replay as replay_cmd
from calib.fit.coefficient_sources import resolve_coefficients
from calib.run.prompts import parse_seeds
from tests import ROOT
from tests.conftest import refused

TRACES = str(ROOT / "results/cpu-amd-epyc-2c/tiny-shapes/0.24.0/traces/traces.parquet")  # 28 steps
FIT = str(ROOT / "results/cpu-amd-epyc-2c/tiny-shapes/0.24.0/fit/fit.json")
WEIGHTS = str(ROOT / "teacache/models/weights")  # tiny-shapes.safetensors and .json
LONG_NUMBERS = ",".join(["0.123456789012345"] * 20)  # 359 characters: longer than a file name may be
LONG_BAD = "0.1," * 80 + "x"
LONG_JSON = "f" * 300 + ".json"
SWEEP = ["--model", "tiny-shapes", "--thresholds", "0.1"]
ADHERENCE = ["--model-dir", WEIGHTS]

CASES = [
    # --coefficients over 255 characters: "File name too long" from the path checks
    ("teacache-bench replay", [TRACES, "--thresholds", "0.1", "--coefficients", LONG_BAD], "--coefficients: expected"),
    ("teacache-bench replay", [TRACES, "--thresholds", "0.1", "--coefficients", LONG_JSON], "--coefficients: "),
    ("teacache-bench sweep", [*SWEEP, "--coefficients", LONG_BAD, "--out", "{out}"], "--coefficients: "),
    ("teacache-bench sweep", [*SWEEP, "--coefficients", LONG_JSON, "--out", "{out}"], "--coefficients: "),
    ("teacache-bench replay", [TRACES, "--thresholds", "0.1", "--coefficients", LONG_JSON + "#A"], "--coefficients: "),
    ("teacache-calib fit", [TRACES, "--compare", LONG_BAD, "--out", "{out}"], "--compare: expected"),
    ("teacache-calib fit", [TRACES, "--compare", LONG_JSON, "--out", "{out}"], "--compare: "),
    # seeds beyond what a generator takes (0..2^32-1)
    ("teacache-bench sweep", [*SWEEP, "--seeds", "99999999999999999999", "--out", "{out}"], "--seeds: "),
    ("teacache-bench sweep", [*SWEEP, "--seeds", "4294967296", "--out", "{out}"], "--seeds: "),
    ("teacache-bench sweep", [*SWEEP, "--seeds", "0-99999999999999999999", "--out", "{out}"], "--seeds: "),
    ("teacache-calib record", ["--model", "tiny-shapes", "--seeds", "1,4294967296", "--out", "{out}"], "--seeds: "),
    # a step count whose warm-up alone would run for hours before the estimate
    ("teacache-calib record", ["--model", "tiny-shapes", "--steps", "100000", "--out", "{out}"],
     "--steps: expected at most 1000"),
    ("teacache-bench sweep", [*SWEEP, "--steps", "1001", "--out", "{out}"], "--steps: expected at most 1000"),
    # adherence: a model folder that is not one, a number of prompts there are not
    ("teacache-bench adherence", ["--model-dir", "/nope"], "--model-dir: /nope is not a folder"),
    ("teacache-bench adherence", ["--model-dir", "{file}"], "--model-dir: "),
    ("teacache-bench adherence", ["--model-dir", "{empty}"], "--model-dir: "),
    ("teacache-bench adherence", [*ADHERENCE, "--n", "0"], "--n: expected 1 to 93"),
    ("teacache-bench adherence", [*ADHERENCE, "--n", "-5"], "--n: expected 1 to 93"),
    ("teacache-bench adherence", [*ADHERENCE, "--n", "94"], "--n: expected 1 to 93"),
    ("teacache-bench adherence", [*ADHERENCE, "--steps", "0"], "--steps: expected at least 1"),
    ("teacache-bench adherence", [*ADHERENCE, "--guidance", "-3"], "--guidance: expected a finite number >= 0"),
    ("teacache-bench adherence", [*ADHERENCE, "--prompt-seed", "-1"], "--prompt-seed: "),
    # accepted but wrong
    ("teacache-calib fit", [TRACES, "--variant", "nope", "--out", "{out}"],
     "--variant: unknown variant 'nope'; known: flux1-dev, flux1-schnell"),
    ("teacache-calib emit", [FIT, "--format", "mlx-teacache", "--variant", "nope", "--out", "{out}.json"],
     "--variant: unknown variant 'nope'; known: "),
    ("teacache-bench replay", [TRACES, "--thresholds", "0.1", "--variant", "nope"], "--variant: unknown variant"),
    ("teacache-bench replay", [TRACES, "--thresholds", "0.1", "--skip-first", "1000"], "--skip-first 1000"),
    ("teacache-bench replay", [TRACES, "--thresholds", "0.1", "--skip-last", "27"], "--skip-last 27"),
    ("teacache-bench replay", [TRACES, "--thresholds", "0.1", "--skip-first", "14", "--skip-last", "14"],
     "leave no step the gate could skip in the traces' 28-step runs"),
    ("teacache-bench replay", [TRACES, "--thresholds", "0.1", "--skip-first", "-1"], "--skip-first: expected"),
    ("teacache-bench replay", [TRACES, "--thresholds", "0.1", "--max-consecutive-skips", "0"],
     "--max-consecutive-skips: expected"),
    ("teacache-calib record", ["--model", "tiny-shapes", "--guidance", "-3", "--out", "{out}"], "--guidance: "),
    ("teacache-bench sweep", [*SWEEP, "--guidance", "-3", "--out", "{out}"], "--guidance: "),
    ("teacache-bench fullsize", ["--models", "random-z-image", "--guidance", "-3", "--out", "{out}"], "--guidance"),
]  # fmt: skip


@pytest.fixture
def no_tiny_shapes(monkeypatch):
    """adherence loads tiny-shapes itself: a load means a check came too late."""

    def boom(*_args, **_kwargs):
        raise AssertionError("tiny-shapes loaded before the arguments were checked")

    monkeypatch.setattr(teacache.models.shapes, "load_tiny_shapes", boom)


@pytest.mark.parametrize(("command", "argv", "expected"), CASES, ids=[f"{c.split()[1]}-{i}" for i, (c, _a, _e) in
                                                                      enumerate(CASES)])  # fmt: skip
def test_a_value_out_of_bounds_is_one_line_before_any_work(command, argv, expected, tmp_path, monkeypatch, capsys,
                                                            no_tiny_shapes):  # fmt: skip
    (tmp_path / "a-file").write_text("not a folder")
    (tmp_path / "empty").mkdir()
    names = {"out": str(tmp_path / "out"), "file": str(tmp_path / "a-file"), "empty": str(tmp_path / "empty")}
    argv = [a.format(**names) for a in argv]
    line = refused(command, argv, tmp_path, monkeypatch, capsys)
    assert expected in line, line
    assert len(line) < 400, line  # a long value is shortened, not printed whole


def test_the_edges_of_each_bound_are_accepted(tmp_path, capsys):
    assert parse_seeds("0,4294967295") == [0, 4294967295]
    rescale, _ = resolve_coefficients(LONG_NUMBERS, None)
    assert len(rescale.coefficients) == 20
    out = tmp_path / "s.csv"
    argv = [TRACES, "--thresholds", "0.1", "--coefficients", LONG_NUMBERS, "--skip-first", "13", "--skip-last", "14"]
    assert replay_cmd.main([*argv, "--out", str(out)]) == 0, capsys.readouterr().err
    assert "skip first 13 / last 14" in capsys.readouterr().out and out.is_file()


@pytest.mark.parametrize("text", ["4294967296", "0-4294967296", "99999999999999999999", "0-2000000"])
def test_seeds_are_bounded_where_they_are_parsed(text):
    with pytest.raises(ValueError, match=r"^--seeds: "):
        parse_seeds(text)
