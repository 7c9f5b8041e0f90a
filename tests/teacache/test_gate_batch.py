"""The vectorized replay makes the gate class's decisions, on any trace, setting and threshold."""

from __future__ import annotations

import math
import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from teacache.gate import GateConfig, replay
from teacache.gate_batch import longest_streaks, replay_skip_masks, skipped_counts
from teacache.rescale import FORM_POLY, FORM_POLY_SIGMA, FORM_POLY_STEP, Region, RescaleFunction

UPSTREAM = RescaleFunction((498.651651244, -283.781631, 55.8554382, -3.82021401, 0.264230861), x_range=(0.0, 0.4))

# Signals: ordinary values, values on a coarse binary grid (so accumulated sums hit thresholds exactly),
# negatives and values below the range (clamped), above the range (forced compute), NaN and inf.
signal = st.one_of(
    st.floats(0.0, 1.0),
    st.sampled_from([0.0, 0.125, 0.25, 0.5, 0.75, 1.0, 2.0]),
    st.floats(-0.5, 5.0),
    st.sampled_from([math.nan, math.inf, -math.inf, 1e30, 1e80]),
)
coefficient = st.one_of(st.floats(-20.0, 20.0), st.sampled_from([0.0, 0.5, 1.0, -1.0]))
threshold = st.one_of(st.floats(0.0, 4.0), st.sampled_from([0.0, 0.125, 0.25, 0.5, 1.0, 1.5]))


@st.composite
def rescale_functions(draw) -> RescaleFunction:
    form = draw(st.sampled_from([FORM_POLY, FORM_POLY, FORM_POLY_STEP, FORM_POLY_SIGMA]))
    coefficients = tuple(draw(st.lists(coefficient, min_size=1, max_size=5)))
    time_coefficients = () if form == FORM_POLY else tuple(draw(st.lists(coefficient, min_size=1, max_size=3)))
    lo = draw(st.sampled_from([0.0, 0.0, 0.05, 0.25]))
    hi = draw(st.one_of(st.just(math.inf), st.floats(lo + 0.01, lo + 2.0)))
    extra = {}
    if form != FORM_POLY and "interaction_coefficients" in RescaleFunction.__dataclass_fields__:
        extra["interaction_coefficients"] = tuple(draw(st.lists(coefficient, max_size=2)))  # x*u terms
    if form != FORM_POLY and draw(st.booleans()):
        extra["region"] = draw(regions(lo, hi))
    return RescaleFunction(coefficients, (lo, hi), form, time_coefficients, **extra)


@st.composite
def regions(draw, lo: float, hi: float) -> Region:
    """x ranges per bin of the time input, inside (lo, hi); edges that may leave part of 0..1 outside,
    and edges on the step fractions k/(n-1) the cases produce (so a step lands exactly on an edge)."""
    on_grid = st.sampled_from([k / 12 for k in range(13)] + [0.0, 0.5, 1.0, 1 / 3])
    edges = sorted(set(draw(st.lists(st.one_of(st.floats(-0.1, 1.1), on_grid), min_size=2, max_size=6))))
    if len(edges) < 2:
        edges = [0.0, 1.0]
    top = hi if math.isfinite(hi) else lo + 3.0
    ranges = []
    for _ in edges[1:]:
        a, b = sorted(draw(st.lists(st.floats(lo, top), min_size=2, max_size=2)))
        ranges.append((a, b))
    return Region(tuple(edges), tuple(ranges))


@st.composite
def cases(draw):
    """Ragged runs: run r has num_steps n_r and a recorded prefix of length L_r (padding NaN, garbage past n_r)."""
    width = draw(st.integers(1, 24))
    n_runs = draw(st.integers(1, 5))
    runs = []
    for _ in range(n_runs):
        n = draw(st.integers(1, width + 2))
        length = draw(st.integers(0, width))
        xs = draw(st.lists(signal, min_size=length, max_size=length))
        sigmas = draw(st.lists(st.floats(0.0, 1.0), min_size=width, max_size=width))
        garbage = draw(st.lists(st.floats(0.0, 1.0), min_size=width, max_size=width))
        runs.append((n, xs, sigmas, garbage))
    return width, runs


def reference_masks(config: GateConfig, width: int, runs, time_aware_sigma: bool) -> np.ndarray:
    """teacache.gate.replay per run; steps it does not decide (past the recorded prefix) are not skipped."""
    out = np.zeros((len(runs), width), dtype=bool)
    for r, (n, xs, sigmas, _) in enumerate(runs):
        with np.errstate(over="ignore", invalid="ignore"):  # 1e80 ** 4 overflows in the gate too
            log = replay(config, xs, num_steps=n, sigmas=sigmas[: len(xs)] if time_aware_sigma else None)
        out[r, : len(log)] = [not d.compute for d in log]
    return out


def padded(width: int, runs) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    x = np.full((len(runs), width), np.nan)
    for r, (n, xs, _, garbage) in enumerate(runs):
        x[r, : len(xs)] = xs
        x[r, max(n, len(xs)) :] = garbage[max(n, len(xs)) :]  # past the schedule: must never matter
    ns = np.array([n for n, *_ in runs])
    sigmas = np.array([s for _, _, s, _ in runs])
    return x, ns, sigmas


@settings(max_examples=400, deadline=None)
@given(
    case=cases(),
    rescale=rescale_functions(),
    thresholds=st.lists(threshold, min_size=1, max_size=6),
    first=st.integers(0, 4),
    last=st.integers(0, 4),
    cap=st.integers(1, 6),
)
def test_same_decisions_as_the_gate_class(case, rescale, thresholds, first, last, cap):
    width, runs = case
    x, ns, sigmas = padded(width, runs)
    uses_sigma = rescale.form == FORM_POLY_SIGMA
    masks = replay_skip_masks(
        x,
        rescale,
        thresholds,
        ns,
        sigmas if uses_sigma else None,
        skip_first_n_steps=first,
        skip_last_n_steps=last,
        max_consecutive_skips=cap,
    )
    assert masks.shape == (len(thresholds), len(runs), width)
    assert masks.dtype == bool
    for i, t in enumerate(thresholds):
        config = GateConfig(t, rescale, first, last, cap)
        np.testing.assert_array_equal(masks[i], reference_masks(config, width, runs, uses_sigma), err_msg=f"t={t}")


@settings(max_examples=200, deadline=None)
@given(xs=st.lists(st.floats(0.0, 0.5), min_size=2, max_size=60), thresholds=st.lists(threshold, min_size=1))
def test_upstream_polynomial_on_plain_traces(xs, thresholds):
    """The published FLUX.1 tuple with a calibrated range, the default settings, num_steps from the width."""
    trace = [math.nan, *xs[1:]]
    masks = replay_skip_masks(np.array([trace]), UPSTREAM, thresholds)
    for i, t in enumerate(thresholds):
        expected = [not d.compute for d in replay(GateConfig(t, UPSTREAM), trace)]
        assert masks[i, 0].tolist() == expected


def test_sigma_form_without_a_sigma_where_the_gate_reads_it_fails_like_the_gate():
    fn = RescaleFunction((1.0, 0.0), (0.0, 1.0), FORM_POLY_SIGMA, (0.5,))
    xs = [math.nan, 0.1, 0.1, 0.1]
    sigmas = [1.0, math.nan, 0.5, 0.2]
    with pytest.raises(ValueError, match="sigma") as gate_error:
        replay(GateConfig(0.5, fn), xs, sigmas=sigmas)
    with pytest.raises(ValueError, match="sigma") as batch_error:
        replay_skip_masks(np.array([xs]), fn, [0.5], sigmas=np.array([sigmas]))
    assert str(batch_error.value) == str(gate_error.value)
    # a missing sigma where the gate never reads the signal (forced last step) is no error for either
    sigmas = [1.0, 0.8, 0.5, math.nan]
    expected = [not d.compute for d in replay(GateConfig(0.5, fn), xs, sigmas=sigmas)]
    assert replay_skip_masks(np.array([xs]), fn, [0.5], sigmas=np.array([sigmas]))[0, 0].tolist() == expected


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"thresholds": [0.1, -0.2]}, "thresholds: expected finite numbers >= 0"),
        ({"thresholds": [math.nan]}, "thresholds: expected finite numbers >= 0"),
        ({"thresholds": [[0.1]]}, "thresholds: expected a 1-D sequence"),
        ({"x": [0.1, 0.2]}, "x: expected a 2-D array"),
        ({"num_steps": [3, 3]}, r"num_steps: expected one number or one per run \(1\)"),
        ({"num_steps": 2.5}, "num_steps: expected whole numbers >= 1"),
        ({"num_steps": 0}, "num_steps: expected whole numbers >= 1"),
        ({"sigmas": [[0.1]]}, "sigmas: expected the shape of x"),
        ({"max_consecutive_skips": 0}, "max_consecutive_skips: expected an integer >= 1"),
        ({"skip_first_n_steps": -1}, "skip_first_n_steps: expected an integer >= 0"),
    ],
)
def test_bad_arguments_name_the_argument(kwargs, message):
    args = {"x": [[math.nan, 0.1, 0.2]], "rescale": UPSTREAM, "thresholds": [0.1], **kwargs}
    with pytest.raises(ValueError, match=message):
        replay_skip_masks(**args)


def test_counts_and_longest_streaks():
    masks = np.array([[[False, True, True, False, True, True, True, False]], [[False] * 8]])
    assert skipped_counts(masks).tolist() == [[5], [0]]
    assert longest_streaks(masks).tolist() == [[3], [0]]
    assert longest_streaks(np.zeros((2, 0), dtype=bool)).tolist() == [0, 0]


def synthetic_traces(n_runs: int, n_steps: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = rng.uniform(0.01, 0.35, (n_runs, n_steps))
    x[:, 0] = np.nan
    return x


@pytest.mark.slow  # a speed goal: a benchmark, not a unit test (CI machines are loaded)
def test_speed_goal_1000_thresholds_100_runs_50_steps():
    """The goal: 1000 thresholds x 100 runs of 50 steps in under 1 s on a 2-core machine (best of 3)."""
    x = synthetic_traces(100, 50)
    thresholds = np.linspace(0.0, 1.5, 1000)
    best = math.inf
    for _ in range(3):
        start = time.perf_counter()
        masks = replay_skip_masks(x, UPSTREAM, thresholds)
        best = min(best, time.perf_counter() - start)
    print(f"replay_skip_masks: 1000 thresholds x 100 runs x 50 steps in {best * 1000:.0f} ms (best of 3)")
    assert best < 1.0
    assert 0 < skipped_counts(masks).mean() < 48  # the grid spans skipping nothing to skipping a lot
    for t in (1, 500, 999):  # and it is the same computation as the reference
        expected = [not d.compute for d in replay(GateConfig(float(thresholds[t]), UPSTREAM), list(x[7]))]
        assert masks[t, 7].tolist() == expected
