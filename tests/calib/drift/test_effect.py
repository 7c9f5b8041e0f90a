"""The effect of a change on a calibrated gate: replayed decisions, margins, fit, and the measured tolerance."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from calib.drift import effect
from teacache.gate_batch import replay_skip_masks
from teacache.rescale import RescaleFunction

STEPS = 20


def _frame(n_prompts: int = 4, seed: int = 0, scale: float = 1.0) -> pd.DataFrame:
    """Record-style rows of runs whose signal decays over the schedule, y about 1.5 x."""
    rng = np.random.default_rng(seed)
    rows = []
    for p in range(n_prompts):
        level = 0.05 * (1 + 0.3 * rng.random())
        for step in range(STEPS):
            x = np.nan if step == 0 else level * (1.2 - step / STEPS) * (1 + 0.05 * rng.standard_normal())
            y = np.nan if step == 0 else 1.5 * x * (1 + 0.1 * rng.standard_normal())
            rows.append({"run_id": f"p{p}-s0", "prompt_id": f"p{p}", "seed": 0, "step": step, "num_steps": STEPS,
                         "sigma": 1 - step / STEPS, "branch": "cond", "x_rel_l1": x * scale,
                         "y_rel_l1": y})  # fmt: skip
    return pd.DataFrame(rows)


GATE = effect.Gate.of(RescaleFunction((1.5, 0.0)), "a line through the origin", skip_first_n_steps=1)


def test_replay_decides_as_gate_batch_and_the_accumulator_explains_every_decision():
    signals = effect.Signals.from_frame(_frame())
    thresholds = [0.02, 0.05, 0.1, 3.0]
    decided = effect.replay(GATE, signals, thresholds)
    assert np.array_equal(decided.skipped, replay_skip_masks(signals.x, GATE.rescale, thresholds, STEPS))
    t = np.asarray(thresholds)[:, None, None]
    looked = decided.gated[None] & np.ones_like(decided.skipped)
    assert np.all(decided.accumulated[decided.skipped] < np.broadcast_to(t, decided.skipped.shape)[decided.skipped])
    computed = looked & ~decided.skipped & ~decided.forced
    assert np.all(decided.accumulated[computed] >= np.broadcast_to(t, computed.shape)[computed])
    assert decided.forced.any()  # the cap forces some computes at 3.0: they are not the threshold's calls


def test_thresholds_that_matter_skip_about_a_quarter_half_and_three_quarters():
    signals = effect.Signals.from_frame(_frame())
    chosen = effect.thresholds_that_matter(GATE, signals, default=0.05)
    assert chosen[0] == {"label": "default", "threshold": 0.05}
    fractions = effect.skip_fraction(effect.replay(GATE, signals, [c["threshold"] for c in chosen[1:]]))
    assert len(chosen) == 4 and np.all(np.abs(fractions - np.array(effect.SKIP_TARGETS)) < 0.125)


def test_the_same_traces_hold_and_a_signal_twice_as_large_does_not():
    frame = _frame()
    before = effect.Signals.from_frame(frame)
    thresholds = effect.thresholds_that_matter(GATE, before, default=0.05)
    tolerance = effect.measure_tolerance(GATE, before, thresholds, rerun=before.subset(np.arange(1)))
    assert all(t["rerun"] == 0 for t in tolerance["thresholds"])
    same = effect.judge(GATE, before, before, tolerance)
    assert same["verdict"] == effect.HOLDS and same["identical"]
    assert all(c["decisions_differ"] == 0 and c["schedules_differ"] == 0 for c in same["thresholds"])
    tiny = effect.judge(GATE, before, effect.Signals.from_frame(_frame(scale=1 + 1e-9)), tolerance)
    assert tiny["verdict"] == effect.HOLDS and not tiny["identical"]
    doubled = effect.judge(GATE, before, effect.Signals.from_frame(_frame(scale=2.0)), tolerance)
    assert doubled["verdict"] == effect.MOVED
    assert any(not c["within"] for c in doubled["thresholds"]) and not doubled["fit"]["within"]
    assert "decisions differing" in effect.describe(doubled) and "RMSE" in effect.describe(doubled)


def test_the_nearest_call_is_the_smallest_distance_of_an_unchanged_decision_to_its_threshold():
    before = effect.Signals.from_frame(_frame())
    (change,) = effect.decision_changes(GATE, before, before, [{"label": "t", "threshold": 0.05}])
    decided = effect.replay(GATE, before, [0.05])
    taken = decided.gated[None] & ~decided.forced
    expected = np.min(np.abs(decided.accumulated[taken] - 0.05) / 0.05)
    assert change["nearest_margin"] == pytest.approx(expected)


def test_other_runs_after_than_before_are_refused():
    before = effect.Signals.from_frame(_frame(4))
    with pytest.raises(ValueError, match="runs differ"):
        effect.decision_changes(GATE, before, effect.Signals.from_frame(_frame(3)), [{"label": "t", "threshold": 0.1}])


def test_a_gate_round_trips_through_its_dict():
    assert effect.Gate.from_dict(GATE.to_dict()) == GATE
