"""teacache-bench replay through the vectorized replay: the reference gate's schedules, on recorded traces."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from bench.sweep import replay as replay_cmd
from calib.fit.coefficient_sources import resolve_coefficients
from calib.traces.reader import load_traces
from teacache.core import TeaCacheStats
from teacache.gate import GateConfig, replay
from teacache.rescale import RescaleFunction
from tests import ROOT

TRACES = ROOT / "results/cpu-amd-epyc-2c/tiny-shapes/0.24.0/traces/traces.parquet"
THRESHOLDS = (0.0, 0.004, 0.01, 0.017, 0.03, 0.05, 0.08, 0.2, 1.5)


def reference_rows(traces, configs: dict[float, GateConfig]) -> list[tuple]:
    """(run_id, threshold, skipped steps, longest streak) by the gate class, one replay per run and threshold."""
    rows = []
    for run in traces.runs():
        for threshold, config in configs.items():
            stats = TeaCacheStats(log=replay(config, run.x, num_steps=run.num_steps, sigmas=run.sigma))
            rows.append((run.run_id, threshold, stats.skipped_steps, stats.longest_skip_streak))
    return rows


def cli_rows(schedules: pd.DataFrame) -> list[tuple]:
    return [
        (r.run_id, float(r.threshold), json.loads(r.predicted_skipped_steps), int(r.longest_streak))
        for r in schedules.itertuples()
    ]


@pytest.mark.parametrize(
    "coefficients",
    ["packaged", "0,0,0,1.2,0.0005"],  # the time-aware packaged fit; a line whose x range cuts off high signals
)
def test_replay_cli_gives_the_reference_gates_schedules_on_recorded_traces(tmp_path, capsys, coefficients):
    extra = ["--x-range", "0.02,0.12"] if "," in coefficients else []
    out = tmp_path / "s.csv"
    argv = [str(TRACES), "--thresholds", ",".join(map(str, THRESHOLDS)), "--coefficients", coefficients]
    assert replay_cmd.main([*argv, *extra, "--out", str(out)]) == 0, capsys.readouterr().err
    schedules = pd.read_csv(out)
    traces = load_traces([TRACES])
    rescale, _ = resolve_coefficients(coefficients, "tiny-shapes", (0.02, 0.12) if extra else None)
    configs = {t: GateConfig(t, rescale, 2, 1, 8) for t in THRESHOLDS}  # tiny-shapes: skip first 2, last 1
    expected = reference_rows(traces, configs)
    assert cli_rows(schedules) == expected
    assert (schedules["predicted_skipped"] == [len(r[2]) for r in expected]).all()
    skipped = schedules.groupby("threshold")["predicted_skipped"].sum()
    assert skipped[0.0] == 0 and 0 < skipped[0.03] < skipped[1.5]  # the thresholds span real schedules


def test_predict_schedules_replays_configs_that_differ_beyond_the_threshold(tmp_path):
    """Each threshold keeps its own rescale function and step rules; sigmas reach the poly+sigma form."""
    traces = load_traces([TRACES])
    line = RescaleFunction((1.0, 0.0), x_range=(0.0, 1.0))
    steep = RescaleFunction((3.0, 0.0), x_range=(0.0, 1.0))
    by_sigma = RescaleFunction((1.0, 0.0), x_range=(0.0, 1.0), form="poly+sigma", time_coefficients=(0.5, -0.4))
    configs = {
        0.05: GateConfig(0.05, line, 2, 1, 8),
        0.1: GateConfig(0.1, steep, 4, 3, 2),
        0.2: GateConfig(0.2, line, 1, 1, 8),
        0.3: GateConfig(0.3, steep, 4, 3, 2),
        0.04: GateConfig(0.04, by_sigma, 2, 1, 8),  # reads the recorded sigmas
    }
    schedules = replay_cmd.predict_schedules(traces, configs)
    assert cli_rows(schedules) == reference_rows(traces, configs)
    assert list(schedules.columns) == replay_cmd.SCHEDULE_COLUMNS


def test_replay_says_once_where_its_coefficients_and_num_steps_come_from(capsys):
    argv = [str(ROOT / "samples" / "traces.csv"), "--coefficients", "0.5,1.2,0.01", "--x-range", "0.02,0.4",
            "--thresholds", "0.1"]  # fmt: skip
    assert replay_cmd.main(argv) == 0
    line = capsys.readouterr().out.splitlines()[0]
    assert "coefficients coefficients" not in line and "from inferred" not in line, line
    assert "num_steps inferred as max(step) + 1" in line and "coefficients 0.5,1.2,0.01" in line, line
    assert replay_cmd.main([str(TRACES), "--thresholds", "0.1"]) == 0
    line = capsys.readouterr().out.splitlines()[0]
    assert "num_steps from the table" in line and "coefficients from packaged" in line, line
