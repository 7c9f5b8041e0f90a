"""Is a rescale function safe where the gate evaluates it: positive, and never decreasing in x?

The gate adds ``max(0, f(x, u))`` per step and skips while the sum stays below the threshold. Where f
decreases in x a larger change predicts less; where f <= 0 a change adds nothing at all. Either can
turn a large change into a skip. The check runs on a dense grid over the function's region: its x range
per part of the schedule (time-aware forms fitted with a region), else its x range at every time input
(step fraction or sigma, 0..1). It reports the fraction of grid points where f <= 0 (x > 0: no change
may predict none) and where d/dx f < 0, so a candidate's safety can sit beside its scores.
:func:`check_given` holds a rescale function a user gives (numbers, a fit, a module) to the same check:
refused when it is positive nowhere, a warning when it is unsafe somewhere.
Pure numpy: no MLX, no mflux.
"""

from __future__ import annotations

import math

import numpy as np

from teacache._warnings import warn
from teacache.errors import InputError
from teacache.rescale import RescaleFunction

GRID_X = 401  # x points per part of the schedule (or over the whole x range)
GRID_U = 9  # time inputs per part of the schedule, both ends included
TIME_RANGE = (0.0, 1.0)  # time inputs a function without a region is checked at (step fraction, sigma)
UNBOUNDED_TOP = 1.0  # an unbounded x range is checked up to this x (a rel-L1 change of 100 %)
# A slope counts as negative below -SLOPE_ROUNDING x (the function's largest |value| on the grid / the x width):
# what the constrained fit's solver leaves from rounding, far below any decrease the gate could act on.
SLOPE_ROUNDING = 1e-7


def region_grid(rescale: RescaleFunction) -> tuple[np.ndarray, np.ndarray, str]:
    """(x, u, what the grid covers): flat arrays of the points where the gate may evaluate ``rescale``."""
    lo, hi = rescale.x_range
    top = hi if math.isfinite(hi) else max(UNBOUNDED_TOP, lo * 10)
    if not rescale.is_time_aware:
        xs = np.linspace(lo, top, GRID_X)
        where = f"x {lo:.4g}..{top:.4g}" + ("" if math.isfinite(hi) else " (x range unbounded)")
        return xs, np.zeros_like(xs), where
    region = rescale.region
    if region is None:
        xs, us = np.meshgrid(np.linspace(lo, top, GRID_X), np.linspace(*TIME_RANGE, GRID_U * 10))
        return xs.ravel(), us.ravel(), f"x {lo:.4g}..{top:.4g} at every time input 0..1 (no region)"
    x_parts, u_parts = [], []
    edges = region.time_edges
    for (a, b), (x_lo, x_hi) in zip(zip(edges, edges[1:], strict=False), region.x_ranges, strict=True):
        xs, us = np.meshgrid(np.linspace(x_lo, x_hi, GRID_X), np.linspace(a, b, GRID_U))
        x_parts.append(xs.ravel())
        u_parts.append(us.ravel())
    return np.concatenate(x_parts), np.concatenate(u_parts), f"x range per part of the schedule ({len(edges) - 1})"


def slope(rescale: RescaleFunction, x, u) -> np.ndarray:
    """d/dx of ``rescale`` at (x, u)."""
    return rescale.slope(x, u)


def check(rescale: RescaleFunction) -> dict:
    """Safety of ``rescale`` on its region: JSON-ready, ``safe`` when f > 0 and d/dx f >= 0 at every grid point."""
    x, u, where = region_grid(rescale)
    with np.errstate(all="ignore"):
        values = np.asarray(rescale(x, u if rescale.is_time_aware else 0.0), dtype=float)
        slopes = slope(rescale, x, u)
    width = max(float(np.ptp(x)), 1e-12)
    rounding = SLOPE_ROUNDING * max(float(np.max(np.abs(values))), 1e-12) / width
    nonpositive = ~(values > 0) & (x > 0)  # at x = 0 (no change at all) a prediction of 0 is exact
    decreasing = slopes < -rounding
    return {
        "safe": not bool(nonpositive.any() or decreasing.any()),
        "nonpositive_fraction": float(np.mean(nonpositive)),
        "decreasing_fraction": float(np.mean(decreasing)),
        "min_value": float(np.min(values)),
        "min_slope": float(np.min(slopes)),
        "grid": where,
        "grid_points": int(x.size),
    }


def unsafe_intervals(rescale: RescaleFunction) -> dict[str, list[list[float]]]:
    """x intervals (on the grid, ends rounded to it) where f decreases or is <= 0 at some time input."""
    x, u, _ = region_grid(rescale)
    with np.errstate(all="ignore"):
        values = np.asarray(rescale(x, u if rescale.is_time_aware else 0.0), dtype=float)
        slopes = slope(rescale, x, u)
    rounding = SLOPE_ROUNDING * max(float(np.max(np.abs(values))), 1e-12) / max(float(np.ptp(x)), 1e-12)
    return {
        "decreasing": _intervals(x, slopes < -rounding),
        "nonpositive": _intervals(x, ~(values > 0) & (x > 0)),
    }


def flagged_intervals(rescale: RescaleFunction) -> dict[str, tuple[tuple[float, float], ...]] | None:
    """What a packaged module's ``UNSAFE_X`` holds: :func:`unsafe_intervals` to 4 significant digits,
    as tuples; None when the function is safe (the module then defines no ``UNSAFE_X``)."""
    if check(rescale)["safe"]:
        return None
    return {
        kind: tuple((float(f"{a:.4g}"), float(f"{b:.4g}")) for a, b in spans)
        for kind, spans in unsafe_intervals(rescale).items()
    }


def _intervals(x: np.ndarray, bad: np.ndarray) -> list[list[float]]:
    """Runs of consecutive distinct x (sorted) at which ``bad`` holds at some grid point."""
    xs, inverse = np.unique(x, return_inverse=True)
    flagged = np.zeros(xs.size, dtype=bool)
    np.logical_or.at(flagged, inverse, bad)
    out = []
    start = None
    for i, f in enumerate(flagged):
        if f and start is None:
            start = i
        if start is not None and (not f or i == xs.size - 1):
            end = i if f else i - 1
            out.append([float(xs[start]), float(xs[end])])
            start = None
    return out


def describe(safety: dict) -> str:
    """One short phrase: 'safe' or what is wrong, for tables and summaries."""
    if safety["safe"]:
        return "safe"
    parts = []
    if safety["nonpositive_fraction"] > 0:
        parts.append(f"<= 0 on {safety['nonpositive_fraction']:.1%}")
    if safety["decreasing_fraction"] > 0:
        parts.append(f"decreasing on {safety['decreasing_fraction']:.1%}")
    return "unsafe: " + ", ".join(parts)


def short(safety: dict) -> str:
    """'safe', or what is wrong in a few characters (table cells)."""
    if safety["safe"]:
        return "safe"

    def pct(v: float) -> str:
        return "<1%" if v < 0.01 else f"{v:.0%}"

    parts = []
    if safety["nonpositive_fraction"] > 0:
        parts.append(f"<=0 {pct(safety['nonpositive_fraction'])}")
    if safety["decreasing_fraction"] > 0:
        parts.append(f"decr {pct(safety['decreasing_fraction'])}")
    return ", ".join(parts)


def describe_intervals(intervals: dict[str, list[list[float]]]) -> str:
    """'decreases with x on 0.13..0.21; <= 0 on ...' (empty when neither)."""
    words = {"decreasing": "decreases with x on", "nonpositive": "is <= 0 on"}
    parts = [
        f"{words[k]} " + ", ".join(f"{a:.4g}..{b:.4g}" for a, b in spans) for k, spans in intervals.items() if spans
    ]
    return "; ".join(parts)


class UnsafeRescaleWarning(UserWarning):
    """A rescale function given to the gate is <= 0 or decreases in x somewhere on its region: a larger change
    can predict less or nothing there, so the gate may skip what it should compute."""


class UnsafeRescaleError(InputError):
    """A rescale function given to the gate is positive nowhere on its region: every change predicts nothing,
    so the gate skips as far as its consecutive-skip cap lets it, whatever the threshold."""


def positive_nowhere(rescale: RescaleFunction) -> bool:
    """Whether ``rescale`` is <= 0 (or not a number) at every grid point with x > 0 of its region."""
    x, u, _ = region_grid(rescale)
    with np.errstate(all="ignore"):
        values = np.asarray(rescale(x, u if rescale.is_time_aware else 0.0), dtype=float)
    return not bool((values[x > 0] > 0).any())


def check_given(
    rescale: RescaleFunction, arg: str = "coefficients", allow_unsafe: bool = False, insist: str = "allow_unsafe=True"
) -> str | None:
    """Hold a rescale function a user gives to the fit's safety check, before anything runs with it.

    Positive nowhere: :class:`UnsafeRescaleError` naming ``arg``, unless ``allow_unsafe``. Unsafe somewhere (or
    positive nowhere and allowed): an :class:`UnsafeRescaleWarning`; its text is returned. Safe: None.
    ``insist`` names what lifts the refusal where the caller is (a keyword, a command's flag).
    """
    checked = check(rescale)
    if checked["safe"]:
        return None
    if positive_nowhere(rescale):
        text = (
            f"{arg}: the rescale function is <= 0 everywhere on {checked['grid']} (min {checked['min_value']:.4g}), "
            "so every change predicts nothing and the gate skips up to its consecutive-skip cap whatever the "
            "threshold"
        )
        if not allow_unsafe:
            raise UnsafeRescaleError(f"{text}; expected a function positive for x > 0 (pass {insist} to insist)")
    else:
        where = describe_intervals(unsafe_intervals(rescale))
        text = (
            f"{arg}: the rescale function {where} (checked on {checked['grid']}), where a larger change predicts "
            "less or nothing, so the gate may skip what it should compute"
        )
    warn(text, UnsafeRescaleWarning)
    return text
