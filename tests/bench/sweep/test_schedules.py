"""Thresholds of one sweep that give one schedule are named, with their cause: the consecutive-skip cap or every
step computed below a floor (bench.sweep.schedules), by teacache-bench sweep and teacache-bench report."""

from __future__ import annotations

import json

import pandas as pd

from bench.sweep.schedules import same_schedule_warnings
from tests import ROOT
from tests.conftest import SMALL

SWEEP = ROOT / "results/cpu-amd-epyc-2c/tiny-shapes/0.24.0/sweep"


def _runs(schedules: dict[float, list[int]], pairs=("a-s0", "b-s0"), steps: int = 28) -> pd.DataFrame:
    rows = []
    for pair in pairs:
        for threshold, skipped in schedules.items():
            streak = max((len(run) for run in _streaks(skipped)), default=0)
            rows.append({"pair_id": pair, "run_id": f"{pair}-t{threshold:g}", "kind": "teacache",
                         "threshold": threshold, "num_steps": steps, "skipped": len(skipped),
                         "skipped_steps": json.dumps(skipped), "longest_skip_streak": streak})  # fmt: skip
    return pd.DataFrame(rows)


def _streaks(steps: list[int]) -> list[list[int]]:
    runs: list[list[int]] = []
    for s in steps:
        if runs and runs[-1][-1] == s - 1:
            runs[-1].append(s)
        else:
            runs.append([s])
    return runs


def _decisions(runs: pd.DataFrame, reason: str) -> pd.DataFrame:
    rows = []
    for r in runs.itertuples():
        skipped = set(json.loads(r.skipped_steps))
        for step in range(r.num_steps):
            why = "first" if step < 2 else "last" if step == r.num_steps - 1 else reason
            rows.append({"run_id": r.run_id, "step": step, "compute": step not in skipped, "reason": why})
    return pd.DataFrame(rows)


CAPPED = [s for s in range(2, 27) if s not in (10, 19)]  # 8 skips, a forced compute, 8 skips, ...


def test_thresholds_the_consecutive_skip_cap_saturates_are_named_with_the_cap():
    runs = _runs({0.05: [3, 5, 7], 0.1: CAPPED, 0.2: CAPPED, 0.5: CAPPED})
    warnings = same_schedule_warnings(runs, _decisions(runs, "cap"), {"max_consecutive_skips": 8})
    assert len(warnings) == 1
    assert "thresholds 0.1, 0.2, 0.5 give the same schedule on every pair" in warnings[0]
    assert "max_consecutive_skips=8" in warnings[0] and "23 of 28 steps skipped" in warnings[0]


def test_the_cap_is_found_from_the_streaks_without_a_decision_log():
    runs = _runs({0.1: CAPPED, 0.3: CAPPED})
    assert "max_consecutive_skips=8" in same_schedule_warnings(runs, None, {})[0]


def test_thresholds_at_or_below_the_rescale_floor_are_named_with_the_floor():
    runs = _runs({0.0: [], 0.004: [], 0.01: [4, 8]})
    warnings = same_schedule_warnings(runs, None, {"rescale_floor": 0.0056})
    assert len(warnings) == 1 and "threshold 0.004 skips nothing on every pair, like 0 (TeaCache off)" in warnings[0]
    assert "every step computed" in warnings[0] and "rescale floor 0.0056" in warnings[0]


def test_distinct_schedules_give_no_warning():
    runs = _runs({0.0: [], 0.01: [4, 8], 0.02: [3, 5, 8]})
    assert same_schedule_warnings(runs, None, {"rescale_floor": 0.001}) == []


def test_a_pair_that_differs_keeps_the_thresholds_apart():
    runs = _runs({0.1: CAPPED, 0.2: CAPPED})
    runs.loc[(runs["pair_id"] == "b-s0") & (runs["threshold"] == 0.2), "skipped_steps"] = json.dumps(CAPPED[:-1])
    assert same_schedule_warnings(runs, None, {}) == []


def test_report_warns_about_the_committed_sweeps_thresholds_that_compute_every_step(tmp_path, capsys):
    from bench.report import command as report_cmd

    assert report_cmd.main([str(SWEEP), "--out", str(tmp_path / "report")]) == 0
    err = capsys.readouterr().err
    assert "teacache-bench report: warning: threshold 0.005 skips nothing on every pair, like 0 (TeaCache off)" in err
    assert "every step computed" in err


def test_sweep_warns_when_the_cap_makes_its_thresholds_one_schedule(tmp_path, prompts, shared_model, capsys):
    from bench.sweep import command as sweep_cmd

    argv = [*SMALL, "--steps", "14", "--prompts", str(prompts), "--seeds", "0", "--thresholds", "50,100",
            "--repeats", "1", "--out", str(tmp_path / "sweep")]  # fmt: skip
    assert sweep_cmd.main(argv) == 0
    err = capsys.readouterr().err
    assert "teacache-bench sweep: warning: thresholds 50, 100 give the same schedule" in err
    assert "max_consecutive_skips=8" in err
    prov = json.loads((tmp_path / "sweep" / "provenance.json").read_text())
    assert prov["max_consecutive_skips"] == 8
