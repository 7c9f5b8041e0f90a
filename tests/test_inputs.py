"""Bad input is one line naming the argument, before any model loads, whichever command gets it; values out of
numpy arrays read as numbers in those lines."""

from __future__ import annotations

import numpy as np
import pytest

from bench.report.compute import validate_floor
from calib.fit import command as fit_cmd
from tests import ROOT
from tests.calib.fit.conftest import make_traces, write
from tests.conftest import refused

TRACES = ROOT / "results/cpu-amd-epyc-2c/tiny-shapes/0.24.0/traces/traces.parquet"


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
    line = refused(command, argv, tmp_path, monkeypatch, capsys)
    assert expected in line, line


def test_messages_show_numpy_values_as_numbers(tmp_path, capsys):
    """Values that come out of numpy arrays read as numbers in a message, not as np.float64(0.05)."""
    frame = make_traces(branches=("cond",)).assign(x_rel_l1=0.05)
    assert fit_cmd.main([str(write(frame, tmp_path / "t.parquet")), "--out", str(tmp_path / "fit"), "--no-plots"]) == 2
    err = capsys.readouterr().err
    assert "every row holds 0.05;" in err and "np.float64" not in err
    with pytest.raises(Exception, match=r"--ssim-floor 1\.5: expected") as caught:
        validate_floor(np.float64(1.5))
    assert "np.float64" not in str(caught.value)
