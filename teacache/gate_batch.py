"""The TeaCache skip rule replayed over many thresholds and recorded runs at once, in numpy.

Scoring rescale functions needs thousands of (threshold, run) schedules; driving
:class:`teacache.gate.Gate` once per pair costs about half a millisecond each. Everything in the rule
that does not depend on the threshold (forced first/last steps, non-finite or above-range signal, the
rescaled increment) is computed once per run; only the accumulator and the consecutive-skip counter
are stepped, for all thresholds and runs together.

The gate class stays the definition of the rule: this module follows it decision for decision, and
``tests/teacache/test_gate_batch.py`` checks that on random traces, settings and NaN/out-of-range signals. The
rescale function is evaluated through its own ``__call__`` and ``time_input``, so it has one definition.
Pure numpy: no MLX, no mflux.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from teacache.errors import InputError
from teacache.gate import DEFAULT_MAX_CONSECUTIVE_SKIPS, DEFAULT_SKIP_FIRST, DEFAULT_SKIP_LAST, GateConfig
from teacache.rescale import RescaleFunction


def replay_skip_masks(
    x: ArrayLike,
    rescale: RescaleFunction,
    thresholds: ArrayLike,
    num_steps: ArrayLike | int | None = None,
    sigmas: ArrayLike | None = None,
    *,
    skip_first_n_steps: int = DEFAULT_SKIP_FIRST,
    skip_last_n_steps: int = DEFAULT_SKIP_LAST,
    max_consecutive_skips: int = DEFAULT_MAX_CONSECUTIVE_SKIPS,
) -> np.ndarray:
    """Which steps the gate skips: bool ``[thresholds, runs, steps]``, True where a step is skipped.

    ``x[run, step]`` is the recorded signal placed by step; NaN/inf (or None) means no usable signal
    (no anchor at step 0, a missing row, a broken recording): the gate computes and re-seeds there.
    ``num_steps`` is the schedule length per run (one number for all runs; default: the width of
    ``x``). Pad ragged runs with NaN: nothing at or after a run's ``num_steps - skip_last_n_steps`` is
    read, and those steps are never skipped. ``sigmas[run, step]`` is needed only by the
    ``poly+sigma`` form. Each row equals ``teacache.gate.replay(GateConfig(t, rescale, ...), x[run],
    num_steps[run], sigmas[run])`` for that threshold ``t``.
    """
    # the gate's own validation of the settings, so both paths refuse the same values
    GateConfig(0.0, rescale, skip_first_n_steps, skip_last_n_steps, max_consecutive_skips)
    xs = np.asarray(x, dtype=float)
    if xs.ndim != 2:
        raise InputError(f"x: expected a 2-D array [runs, steps], got shape {xs.shape}")
    n_runs, width = xs.shape
    ts = _thresholds(thresholds)  # checked before any work
    ns = _num_steps(num_steps, n_runs, width)
    sig = None
    if sigmas is not None:
        sig = np.asarray(sigmas, dtype=float)
        if sig.shape != xs.shape:
            raise InputError(f"sigmas: expected the shape of x {xs.shape}, got {sig.shape}")

    increment, gated = rescaled_increments(xs, rescale, ns, sig, skip_first_n_steps, skip_last_n_steps)
    return skip_masks(increment, gated, ts, max_consecutive_skips)


def skip_masks(
    increment: np.ndarray, gated: np.ndarray, thresholds: ArrayLike, max_consecutive_skips: int
) -> np.ndarray:
    """The threshold-dependent half of the rule, from :func:`rescaled_increments`: bool ``[thresholds, runs, steps]``.

    Runs may come from different rescale functions (one per fold when scoring held-out prompts).
    """
    ts = _thresholds(thresholds)
    n_runs, width = increment.shape
    out = np.zeros((width, ts.size, n_runs), dtype=bool)
    if ts.size == 0 or n_runs == 0:
        return np.ascontiguousarray(out.transpose(1, 2, 0))
    limit = ts[:, None]
    accumulated = np.zeros((ts.size, n_runs))
    consecutive = np.zeros((ts.size, n_runs), dtype=np.int32)
    compute = np.empty((ts.size, n_runs), dtype=bool)
    for step in range(width):
        gate_open = gated[:, step]
        if not gate_open.any():  # every run computes: the state is re-seeded
            accumulated.fill(0.0)
            consecutive.fill(0)
            continue
        accumulated += increment[:, step]
        np.greater_equal(accumulated, limit, out=compute)
        compute |= consecutive >= max_consecutive_skips
        compute |= ~gate_open
        np.logical_not(compute, out=out[step])
        np.copyto(accumulated, 0.0, where=compute)
        consecutive += 1
        np.copyto(consecutive, 0, where=compute)
    # threshold 0 (disabled) needs no case of its own: every increment is >= 0, so it always computes
    return np.ascontiguousarray(out.transpose(1, 2, 0))


def rescaled_increments(
    x: np.ndarray,
    rescale: RescaleFunction,
    num_steps: np.ndarray,
    sigmas: np.ndarray | None,
    skip_first_n_steps: int,
    skip_last_n_steps: int,
) -> tuple[np.ndarray, np.ndarray]:
    """(what each step adds to the accumulator, whether the gate looks at the signal there), per run.

    The gate reads x only on steps that are neither forced first nor forced last, with a finite x at
    or below the calibrated range of that step's part of the schedule (the function's region); there
    it adds ``max(0, f(max(x, lo), u))``. Everywhere else it computes and re-seeds, whatever the threshold.
    """
    hi = rescale.x_range[1]
    steps = np.arange(x.shape[1])
    active = (steps >= skip_first_n_steps) & (steps < num_steps[:, None] - skip_last_n_steps)
    with np.errstate(invalid="ignore"):
        gated = active & np.isfinite(x) & ~(x > hi)
    increment = np.zeros(x.shape)
    rows, cols = np.nonzero(gated)
    if rows.size == 0:
        return increment, gated
    values = x[rows, cols]
    if rescale.is_time_aware:  # the function's own time_input, once per distinct (step, num_steps, sigma)
        sig = np.zeros(rows.size) if sigmas is None else sigmas[rows, cols]  # zeros: unused, and they dedupe
        points, inverse = np.unique(np.stack([cols, num_steps[rows], sig], axis=1), axis=0, return_inverse=True)
        times = [
            rescale.time_input(int(s), int(n), None if sigmas is None else float(sigma))
            for s, n, sigma in points.tolist()
        ]
        u = np.asarray(times, dtype=float)[inverse.reshape(-1)]
    else:
        u = np.zeros(rows.size)
    lo_u, hi_u = rescale.x_bounds(u)  # the x range of each step's part of the schedule (NaN: outside it)
    inside = ~(values > hi_u) & ~np.isnan(hi_u)
    gated[rows[~inside], cols[~inside]] = False
    rows, cols, values, u, lo_u = rows[inside], cols[inside], values[inside], u[inside], lo_u[inside]
    used = np.where(lo_u > values, lo_u, values)  # max(x, lo), as the gate writes it
    if not rescale.is_time_aware:
        u = 0.0
    with np.errstate(all="ignore"):
        raw = np.asarray(rescale(used, u), dtype=float)
    increment[rows, cols] = np.where(raw > 0.0, raw, 0.0)  # max(0.0, v): NaN and -0.0 give 0.0 too
    return increment, gated


def skipped_counts(masks: np.ndarray) -> np.ndarray:
    """Skipped steps per schedule: int ``[..., runs]`` from bool ``[..., runs, steps]``."""
    return np.count_nonzero(masks, axis=-1)


def longest_streaks(masks: np.ndarray) -> np.ndarray:
    """Longest run of consecutive skipped steps per schedule: int ``[...]`` from bool ``[..., steps]``."""
    masks = np.asarray(masks, dtype=bool)
    if masks.shape[-1] == 0:
        return np.zeros(masks.shape[:-1], dtype=np.int64)
    index = np.arange(masks.shape[-1])
    last_computed = np.maximum.accumulate(np.where(masks, -1, index), axis=-1)
    return np.max(np.where(masks, index - last_computed, 0), axis=-1)


def _thresholds(thresholds: ArrayLike) -> np.ndarray:
    try:
        ts = np.asarray(thresholds, dtype=float)
    except (TypeError, ValueError):
        raise InputError(f"thresholds: expected numbers, got {thresholds!r}") from None
    if ts.ndim != 1:
        raise InputError(f"thresholds: expected a 1-D sequence, got shape {ts.shape}")
    bad = ~np.isfinite(ts) | (ts < 0)
    if bad.any():
        raise InputError(
            f"thresholds: expected finite numbers >= 0 (0 disables skipping), got {ts[bad][0]!r} "
            f"at position {int(np.flatnonzero(bad)[0])}"
        )
    return ts


def _num_steps(num_steps: ArrayLike | int | None, n_runs: int, width: int) -> np.ndarray:
    if num_steps is None:
        return np.full(n_runs, width, dtype=np.int64)
    raw = np.asarray(num_steps)
    if raw.ndim == 0:
        raw = np.full(n_runs, raw)
    if raw.shape != (n_runs,):
        raise InputError(f"num_steps: expected one number or one per run ({n_runs}), got shape {raw.shape}")
    try:
        ns = raw.astype(float)
    except (TypeError, ValueError):
        raise InputError(f"num_steps: expected whole numbers >= 1, got {num_steps!r}") from None
    with np.errstate(invalid="ignore"):
        bad = ~(np.isfinite(ns) & (ns >= 1) & (ns == np.round(ns)))
    if bad.any():
        run = int(np.flatnonzero(bad)[0])
        raise InputError(f"num_steps: expected whole numbers >= 1, got {raw[bad][0]!r} for run {run}")
    return ns.astype(np.int64)
