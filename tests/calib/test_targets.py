"""Thresholds by target (calib.targets): the pure choices, and the replay on the committed calibration traces."""

from __future__ import annotations

import pytest

from calib import targets
from calib.targets import TargetError, choose_for_quality, choose_for_speedup, threshold_for


def test_speedup_picks_the_middle_of_the_plateau_nearest_n_over_s():
    ts = [0.0, 0.1, 0.2, 0.3, 0.4, 0.5]
    computed = [28, 20, 14, 14, 14, 8]
    assert choose_for_speedup(ts, computed, 28, 2.0) == (0.3, 14.0)


def test_speedup_within_one_step_is_reached_and_beyond_it_refused_naming_the_nearest():
    assert choose_for_speedup([0.0, 0.1], [28, 15], 28, 2.0) == (0.1, 15.0)
    with pytest.raises(TargetError, match=r"reaches 1\.87x at most.*nearest: --teacache-speedup 1\.87"):
        choose_for_speedup([0.0, 0.1], [28, 15], 28, 4.0)


@pytest.mark.parametrize("bad", [1.0, 0.5, float("nan"), float("inf"), True, "2"])
def test_a_speedup_that_is_no_speedup_is_refused(bad):
    with pytest.raises(TargetError, match="--teacache-speedup"):
        choose_for_speedup([0.0], [28], 28, bad)


ROWS = [
    {"threshold": 0.0, "skipped": 0, "ssim_p5": 1.0, "speedup": 1.0, "n": 4},
    {"threshold": 0.01, "skipped": 8, "ssim_p5": 0.99, "speedup": 1.3, "n": 4},
    {"threshold": 0.03, "skipped": 18, "ssim_p5": 0.96, "speedup": 2.6, "n": 4},
    {"threshold": 0.05, "skipped": 21, "ssim_p5": 0.94, "speedup": 3.6, "n": 4},
]


def test_quality_takes_the_fastest_threshold_that_keeps_the_floor_and_never_the_one_that_skips_nothing():
    assert choose_for_quality(ROWS, 0.95)["threshold"] == 0.03
    assert choose_for_quality(ROWS, 0.99)["threshold"] == 0.01
    with pytest.raises(TargetError, match=r"best is 0\.9900 at threshold 0\.01; nearest: --teacache-ssim 0\.99"):
        choose_for_quality(ROWS, 0.995)


def test_threshold_for_a_speedup_replays_the_committed_traces_and_says_so():
    choice = threshold_for("tiny-shapes", speedup=2.0)
    assert abs(choice.expected["skipped_steps"] - 14) <= 1
    assert "traces/traces.parquet" in choice.evidence and "packaged" in choice.evidence
    faster = threshold_for("tiny-shapes", speedup=3.0)
    assert faster.threshold > choice.threshold


def test_threshold_for_a_floor_reads_the_committed_report():
    choice = threshold_for("tiny-open-flux1", ssim=0.95)
    assert choice.expected["ssim_p5"] >= 0.95 and choice.expected["skipped_steps"] > 0
    assert "report/summary.json" in choice.evidence


def test_traces_of_another_step_count_are_refused_not_stretched():
    with pytest.raises(TargetError, match="--steps 20: .* hold runs of 28 steps"):
        threshold_for("tiny-shapes", speedup=2.0, num_steps=20)


def test_a_variant_without_committed_traces_says_what_to_pass(monkeypatch, tmp_path):
    monkeypatch.setattr(targets, "RESULTS", tmp_path)
    with pytest.raises(TargetError, match="--teacache-traces"):
        threshold_for("tiny-shapes", speedup=2.0)
