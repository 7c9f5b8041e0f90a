"""The skip rule as a pure function: properties over arbitrary traces, plus the edge cases."""

from __future__ import annotations

import math
import warnings

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from teacache.gate import (
    REASON_ABOVE_RANGE,
    REASON_CAP,
    REASON_NON_FINITE,
    REASON_OUTSIDE_REGION,
    Gate,
    GateConfig,
    NeverSkipsWarning,
    replay,
    warn_if_never_skips,
)
from teacache.gate_batch import replay_skip_masks
from teacache.rescale import Region, RescaleFunction

UPSTREAM = RescaleFunction((498.651651244, -283.781631, 55.8554382, -3.82021401, 0.264230861))
LINEAR = RescaleFunction((1.0, 0.0), x_range=(0.0, 1.0))

signals = st.floats(min_value=0.0, max_value=1.0, allow_nan=False)
traces = st.lists(signals, min_size=2, max_size=60)


def config(thresh, **kw):
    return GateConfig(rel_l1_thresh=thresh, rescale=kw.pop("rescale", LINEAR), **kw)


def skipped(log):
    return [d.step for d in log if not d.compute]


@settings(max_examples=300, deadline=None)
@given(xs=traces, thresh=st.floats(0.0, 5.0), first=st.integers(0, 3), last=st.integers(0, 3))
def test_first_and_last_steps_are_never_skipped(xs, thresh, first, last):
    log = replay(config(thresh, skip_first_n_steps=first, skip_last_n_steps=last), [None, *xs[1:]])
    n = len(xs)
    for d in log:
        if d.step < first or d.step >= n - last:
            assert d.compute


@settings(max_examples=300, deadline=None)
@given(
    xs=traces,
    thresh=st.floats(0.0, 5.0),
    first=st.integers(0, 3),
    last=st.integers(0, 3),
    junk=st.sampled_from([None, math.nan, 1e300]),
)
def test_a_step_that_reads_no_signal_decides_the_same_whatever_the_signal(xs, thresh, first, last, junk):
    """What lets the controller read a forced step's signal after the step: the signal cannot change its decision."""
    cfg = config(thresh, skip_first_n_steps=first, skip_last_n_steps=last)
    n, probe = len(xs), Gate(cfg)
    forced = [not probe.reads_signal(step, n) for step in range(n)]
    assert forced == [thresh <= 0 or step < first or step >= n - last for step in range(n)]
    given_xs = [None, *xs[1:]]
    blinded = [junk if f and step else x for step, (f, x) in enumerate(zip(forced, given_xs, strict=True))]
    a, b = replay(cfg, given_xs), replay(cfg, blinded)
    assert [(d.compute, d.reason, d.accumulated) for d in a] == [(d.compute, d.reason, d.accumulated) for d in b]


@settings(max_examples=300, deadline=None)
@given(xs=traces, thresh=st.floats(0.0, 50.0), cap=st.integers(1, 10))
def test_consecutive_skips_never_exceed_the_cap(xs, thresh, cap):
    log = replay(config(thresh, max_consecutive_skips=cap), [None, *xs[1:]])
    streak = 0
    for d in log:
        streak = 0 if d.compute else streak + 1
        assert streak <= cap


@settings(max_examples=200, deadline=None)
@given(xs=traces)
def test_threshold_zero_never_skips(xs):
    assert skipped(replay(config(0.0), [None, *xs[1:]])) == []


@settings(max_examples=300, deadline=None)
@given(xs=traces, t1=st.floats(0.0, 3.0), t2=st.floats(0.0, 3.0), cap=st.integers(1, 10))
def test_higher_threshold_never_computes_more_steps(xs, t1, t2, cap):
    low, high = sorted((t1, t2))
    trace = [None, *xs[1:]]
    computed_low = sum(d.compute for d in replay(config(low, max_consecutive_skips=cap), trace))
    computed_high = sum(d.compute for d in replay(config(high, max_consecutive_skips=cap), trace))
    assert computed_high <= computed_low


def test_accumulates_and_resets_on_compute():
    log = replay(config(0.25), [None, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1])
    # 1: 0.1 skip; 2: 0.2 skip; 3: 0.3 compute (reset); 4: 0.1 skip; 5: 0.2 skip; 6: last, computed
    assert [d.compute for d in log] == [True, False, False, True, False, False, True]
    assert log[3].accumulated == pytest.approx(0.3)
    assert log[4].accumulated == pytest.approx(0.1)


def test_non_finite_signal_computes_and_reseeds():
    log = replay(config(10.0), [None, 0.1, math.nan, 0.1, math.inf, 0.1, 0.1])
    assert [d.reason for d in log][2] == REASON_NON_FINITE
    assert log[2].compute and log[4].compute
    assert log[3].accumulated == pytest.approx(0.1)  # accumulation restarted after the non-finite step


def test_above_range_computes_and_below_range_is_clamped():
    fn = RescaleFunction((1.0, 0.0), x_range=(0.05, 0.2))
    log = replay(config(10.0, rescale=fn), [None, 0.01, 0.5, 0.1, 0.1])
    assert log[1].x_used == pytest.approx(0.05) and not log[1].compute
    assert log[2].reason == REASON_ABOVE_RANGE and log[2].compute


def test_cap_forces_a_compute():
    log = replay(config(100.0, max_consecutive_skips=2), [None] + [0.01] * 8)
    assert [d.reason for d in log][3] == REASON_CAP


def test_threshold_below_the_rescale_floor_warns_and_names_the_smallest_useful_threshold():
    cfg = GateConfig(rel_l1_thresh=0.1, rescale=UPSTREAM)
    with pytest.warns(NeverSkipsWarning, match=r"above 0\.180"):
        assert warn_if_never_skips(cfg) is False
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert warn_if_never_skips(GateConfig(rel_l1_thresh=0.3, rescale=UPSTREAM)) is True
    # and the floor is real: on any trace this threshold never skips
    assert skipped(replay(cfg, [None] + [0.053] * 20)) == []


def test_time_aware_form_uses_the_step_fraction():
    fn = RescaleFunction((1.0, 0.0), form="poly+step", time_coefficients=(1.0,))
    gate = Gate(GateConfig(rel_l1_thresh=10.0, rescale=fn))
    d = gate.decide(step=5, num_steps=11, x=0.2)
    assert d.rescaled == pytest.approx(0.2 + 0.5)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"rel_l1_thresh": -0.1}, "rel_l1_thresh"),
        ({"rel_l1_thresh": math.nan}, "rel_l1_thresh"),
        ({"rel_l1_thresh": "0.2"}, "rel_l1_thresh"),
        ({"rel_l1_thresh": 0.2, "skip_first_n_steps": -1}, "skip_first_n_steps"),
        ({"rel_l1_thresh": 0.2, "skip_last_n_steps": 1.5}, "skip_last_n_steps"),
        ({"rel_l1_thresh": 0.2, "max_consecutive_skips": 0}, "max_consecutive_skips"),
    ],
)
def test_bad_gate_settings_name_the_argument(kwargs, match):
    with pytest.raises((ValueError, TypeError), match=match):  # TypeError for a wrong type ("0.2", 1.5)
        GateConfig(rescale=LINEAR, **kwargs)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"coefficients": ()}, "coefficients"),
        ({"coefficients": (1.0, math.inf)}, "coefficients"),
        ({"coefficients": (1.0,), "x_range": (0.3, 0.1)}, "x_range"),
        ({"coefficients": (1.0,), "form": "spline"}, "form"),
        ({"coefficients": (1.0,), "form": "poly+step"}, "time_coefficients"),
    ],
)
def test_bad_rescale_functions_name_the_argument(kwargs, match):
    with pytest.raises(ValueError, match=match):
        RescaleFunction(**kwargs)


def test_rescale_round_trips_through_dict():
    fn = RescaleFunction((1.0, -2.0, 0.5), x_range=(0.01, 0.3), form="poly+sigma", time_coefficients=(0.2, 0.1))
    assert RescaleFunction.from_dict(fn.to_dict()) == fn


# Early steps saw x up to 0.6, later ones only up to 0.1; nothing was recorded before step fraction 0.2.
EARLY_WIDE = Region((0.2, 0.5, 0.9), ((0.05, 0.6), (0.05, 0.1)))
WITH_REGION = RescaleFunction(
    (1.0, 0.0), x_range=(0.05, 0.6), form="poly+step", time_coefficients=(0.0,), region=EARLY_WIDE
)


def test_time_aware_function_computes_outside_its_region():
    gate = Gate(GateConfig(rel_l1_thresh=10.0, rescale=WITH_REGION))
    # step fraction 0.1: before the first recorded part of the schedule
    assert gate.decide(step=1, num_steps=11, x=0.06).reason == REASON_OUTSIDE_REGION
    # step fraction 0.3: x 0.3 is inside the early part's range, so it accumulates and skips
    early = gate.decide(step=3, num_steps=11, x=0.3)
    assert not early.compute and early.rescaled == pytest.approx(0.3)
    # step fraction 0.7: the same x is above what that part of the schedule saw, though inside x_range
    late = gate.decide(step=7, num_steps=11, x=0.3)
    assert late.compute and late.reason == REASON_ABOVE_RANGE and late.rescaled is None
    # below a part's range the gate uses its low end, as below the 1-D range
    assert gate.decide(step=8, num_steps=11, x=0.01).x_used == pytest.approx(0.05)
    # step fraction 10/11 = 0.909 lies beyond the last edge (0.9)
    assert gate.decide(step=10, num_steps=12, x=0.06).reason == REASON_OUTSIDE_REGION


def test_without_a_region_the_one_x_range_holds_at_every_step():
    fn = RescaleFunction((1.0, 0.0), x_range=(0.05, 0.6), form="poly+step", time_coefficients=(0.0,))
    trace = [None, 0.06, 0.3, 0.3, 0.3, 0.3, 0.3, 0.3, 0.06, 0.06, 0.06]
    log = replay(GateConfig(rel_l1_thresh=10.0, rescale=fn, max_consecutive_skips=20), trace)
    assert all(not d.compute for d in log[1:10])  # the region's computes at 0.1 and 0.7 are gone


def test_region_schedules_match_the_batch_replay():
    trace = [math.nan, 0.06, 0.3, 0.3, 0.2, 0.09, 0.3, 0.08, 0.01, 0.5, 0.06]
    for t in (0.05, 0.2, 1.0):
        expected = [not d.compute for d in replay(GateConfig(t, WITH_REGION), trace)]
        assert replay_skip_masks([trace], WITH_REGION, [t])[0, 0].tolist() == expected


def test_rescale_floor_is_taken_over_the_region():
    fn = RescaleFunction((1.0, 0.0), x_range=(0.05, 0.6), form="poly+step", time_coefficients=(0.0,),
                         region=Region((0.0, 0.5, 1.0), ((0.2, 0.6), (0.1, 0.3))))  # fmt: skip
    assert fn.floor([0.1, 0.2])[0] == pytest.approx(0.2)  # the first part starts at x 0.2
    assert fn.floor([0.1, 0.7])[0] == pytest.approx(0.1)
    assert fn.floor([1.5]) == (math.inf, 0.05)  # outside the region the gate computes: no floor


def test_region_round_trips_and_is_checked():
    assert RescaleFunction.from_dict(WITH_REGION.to_dict()) == WITH_REGION
    with pytest.raises(ValueError, match="region"):
        RescaleFunction((1.0, 0.0), x_range=(0.05, 0.2), form="poly+step", time_coefficients=(0.0,), region=EARLY_WIDE)
    with pytest.raises(ValueError, match="region"):
        RescaleFunction((1.0, 0.0), x_range=(0.05, 0.6), region=EARLY_WIDE)  # the plain form has its x range
    with pytest.raises(ValueError, match="time_edges"):
        Region((0.5, 0.2), ((0.0, 1.0),))


def test_region_from_data_bins_the_time_input():
    import numpy as np

    u = np.repeat(np.arange(1, 10) / 9, 3)
    x = np.where(u < 0.2, 0.5, 0.05) + np.tile([0.0, 0.01, 0.02], 9)
    region = Region.from_data(x, u, bins=4)
    assert region.time_edges[0] == u.min() and region.time_edges[-1] == u.max()
    lo, hi = region.bounds(u)
    assert np.all((lo <= x) & (x <= hi))  # every recorded pair is inside its own part's range
    assert hi[-1] == pytest.approx(0.07) and hi[0] == pytest.approx(0.52)
