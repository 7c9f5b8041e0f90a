"""The mono+step rescale form: its values, its safety by construction, the gate and gate_batch on it alike."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from calib.fit import safety
from calib.fit.candidates import MODE_MONOTONE, CandidateSpec, FittedModel
from calib.fit.monotone import prediction_floor
from teacache.gate import GateConfig
from teacache.gate_batch import replay_skip_masks
from teacache.rescale import FORM_MONO_STEP, Region, RescaleFunction
from tests.teacache.test_gate_batch import cases, padded, reference_masks, threshold

weight = st.one_of(st.floats(-2.0, 2.0), st.sampled_from([0.0, 0.125, 0.5, 1.0]))


@st.composite
def mono_functions(draw) -> RescaleFunction:
    """Any weights (negative ones too: the gate evaluates what it is given), knots inside an x range."""
    lo = draw(st.sampled_from([0.0, 0.05, 0.25]))
    hi = draw(st.floats(lo + 0.05, lo + 2.0))
    inner = draw(st.lists(st.floats(lo, hi), max_size=4))
    knots = tuple(sorted({lo, hi, *inner}))
    on_grid = st.sampled_from([k / 12 for k in range(13)])
    tknots = tuple(sorted(set(draw(st.lists(st.one_of(st.floats(0.0, 1.0), on_grid), min_size=1, max_size=5)))))
    weights = tuple(draw(st.lists(weight, min_size=len(knots) * len(tknots), max_size=len(knots) * len(tknots))))
    region = None
    if draw(st.booleans()):
        a, b = sorted(draw(st.lists(st.floats(lo, hi), min_size=2, max_size=2)))
        region = Region((0.0, 0.5, 1.0), ((lo, hi), (a, b)))
    return RescaleFunction(weights, (lo, hi), FORM_MONO_STEP, region=region, knots=knots, time_knots=tknots)


@settings(max_examples=300, deadline=None)
@given(
    case=cases(),
    rescale=mono_functions(),
    thresholds=st.lists(threshold, min_size=1, max_size=5),
    first=st.integers(0, 3),
    last=st.integers(0, 3),
    cap=st.integers(1, 6),
)
def test_gate_batch_makes_the_gate_classs_decisions(case, rescale, thresholds, first, last, cap):
    width, runs = case
    x, ns, _ = padded(width, runs)
    masks = replay_skip_masks(
        x, rescale, thresholds, ns, skip_first_n_steps=first, skip_last_n_steps=last, max_consecutive_skips=cap
    )
    for i, t in enumerate(thresholds):
        expected = reference_masks(GateConfig(t, rescale, first, last, cap), width, runs, False)
        np.testing.assert_array_equal(masks[i], expected, err_msg=f"t={t}")


@settings(max_examples=200, deadline=None)
@given(fn=mono_functions(), xs=st.lists(st.floats(-0.5, 3.0), min_size=1, max_size=30))
def test_one_time_knot_is_linear_interpolation_of_the_cumulated_rises(fn, xs):
    """The oracle: with one time knot, f is np.interp through (knots, cumsum(weights)), flat outside."""
    if len(fn.time_knots) != 1:
        fn = RescaleFunction(
            fn.coefficients[:: len(fn.time_knots)], fn.x_range, FORM_MONO_STEP, knots=fn.knots, time_knots=(0.5,)
        )
    expected = np.interp(xs, fn.knots, np.cumsum(fn.coefficients))
    np.testing.assert_allclose(fn(np.array(xs), 0.3), expected, rtol=1e-12, atol=1e-12)
    assert fn(xs[0], 0.9) == pytest.approx(expected[0], rel=1e-12, abs=1e-12)  # scalars give a float


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 2**31 - 1),
    pieces=st.sampled_from([1, 2, 4, 6]),
    step_pieces=st.sampled_from([0, 1, 3, 8]),
    sign=st.sampled_from([1.0, -1.0]),
)
def test_every_fit_is_safe_whatever_the_data(seed, pieces, step_pieces, sign):
    """Decreasing or noisy data too: the bounds make every fitted function non-decreasing and >= the floor."""
    rng = np.random.default_rng(seed)
    x = rng.uniform(0.01, 0.4, 120)
    u = rng.choice(np.linspace(0.0, 1.0, 12), 120)
    y = np.abs(0.3 + sign * x + 0.2 * np.sin(6 * u) + rng.normal(0, 0.05, 120))
    model = FittedModel.fit(CandidateSpec(FORM_MONO_STEP, pieces, MODE_MONOTONE, step_pieces), x, y, u)
    fn = model.function
    check = safety.check(fn)
    assert check["safe"], check
    grid_x, grid_u = np.meshgrid(np.linspace(x.min(), x.max(), 50), np.linspace(0, 1, 11))
    assert np.all(fn.slope(grid_x, grid_u) >= 0.0)
    assert np.min(fn(grid_x, grid_u)) >= prediction_floor(y) * (1 - 1e-9)
    np.testing.assert_allclose(model.predict(x, u), fn(x, u), rtol=1e-12, atol=1e-15)  # one function


def test_dict_round_trip_and_refusals():
    fn = RescaleFunction((0.1, 0.2, 0.3, 0.0), (0.0, 0.5), FORM_MONO_STEP, knots=(0.0, 0.5), time_knots=(0.0, 1.0))
    back = RescaleFunction.from_dict(fn.to_dict())
    assert back == fn and back.knots == (0.0, 0.5) and back.time_input(3, 7, None) == 0.5
    assert fn(0.25, 0.5) == pytest.approx(0.1 * 0.5 + 0.2 * 0.5 + 0.5 * (0.3 * 0.5 + 0.0))
    with pytest.raises(ValueError, match=r"one weight per knot and time knot \(2 x 2\), got 3"):
        RescaleFunction((0.1, 0.2, 0.3), (0.0, 0.5), FORM_MONO_STEP, knots=(0.0, 0.5), time_knots=(0.0, 1.0))
    with pytest.raises(ValueError, match="knots: expected at least 2 increasing"):
        RescaleFunction((0.1, 0.2), (0.0, 0.5), FORM_MONO_STEP, knots=(0.5, 0.0), time_knots=(0.0,))
    with pytest.raises(ValueError, match="only form 'mono\\+step' takes them"):
        RescaleFunction((0.1, 0.2), (0.0, 0.5), knots=(0.0, 0.5))
    decreasing = RescaleFunction((0.1, -0.05), (0.0, 0.5), FORM_MONO_STEP, knots=(0.0, 0.5), time_knots=(0.0,))
    assert not safety.check(decreasing)["safe"] and safety.check(decreasing)["decreasing_fraction"] > 0.9
    assert math.isclose(decreasing.floor([0.0, 1.0])[0], 0.05)
