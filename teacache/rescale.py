"""Rescale functions: map the rel-L1 change of block 0's modulated input (x) to a predicted rel-L1
change of the transformer output. Pure numpy: no MLX, no mflux.

Coefficients are stored highest power first, like ``np.polyfit`` and every published TeaCache tuple.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from teacache import splines
from teacache.errors import InputError, InputTypeError

FORM_POLY = "poly"
FORM_POLY_STEP = "poly+step"
FORM_POLY_SIGMA = "poly+sigma"
FORM_MONO_STEP = "mono+step"  # monotone ramps in x times hats in the step fraction (teacache.splines)
FORMS = (FORM_POLY, FORM_POLY_STEP, FORM_POLY_SIGMA, FORM_MONO_STEP)
POLYNOMIAL_FORMS = (FORM_POLY, FORM_POLY_STEP, FORM_POLY_SIGMA)
# Parts of the schedule a fitted time-aware function keeps an x range for. Measured on the committed traces
# (results/comparisons/safety-costs/costs.md), against one x range over the recorded steps: 3 parts change the
# default pick's decision score on held-out prompts by -0.002..+0.002, 10 parts cost +0.004..+0.030 on 7 of
# 8 tables (held-out x leaves narrow parts and is computed).
REGION_BINS = 3


@dataclass(frozen=True)
class Region:
    """Where the calibration data was, per part of the schedule: one x range per bin of the time input.

    A single x interval over the whole schedule can hold x values that only occur early (the first
    steps change a lot) and so admit, mid-schedule, x values the fit never saw. ``time_edges`` cut the
    time input (step fraction or sigma) into bins, ``[e_i, e_i+1)`` with the last one closed; bin i
    saw x in ``x_ranges[i]``. A time input outside ``time_edges[0]..time_edges[-1]`` is outside the region.
    """

    time_edges: tuple[float, ...]
    x_ranges: tuple[tuple[float, float], ...]

    def __post_init__(self) -> None:
        edges = tuple(float(e) for e in self.time_edges)
        increasing = all(b > a for a, b in zip(edges, edges[1:], strict=False))
        if len(edges) < 2 or not all(math.isfinite(e) for e in edges) or not increasing:
            raise InputError(
                f"region time_edges: expected at least 2 increasing finite numbers, got {self.time_edges!r}"
            )
        ranges = tuple((float(lo), float(hi)) for lo, hi in self.x_ranges)
        if len(ranges) != len(edges) - 1:
            raise InputError(f"region x_ranges: expected one per bin ({len(edges) - 1}), got {len(ranges)}")
        for lo, hi in ranges:
            if not (0 <= lo <= hi and math.isfinite(hi)):
                raise InputError(f"region x_ranges: expected 0 <= low <= high (finite), got {(lo, hi)!r}")
        object.__setattr__(self, "time_edges", edges)
        object.__setattr__(self, "x_ranges", ranges)

    @classmethod
    def from_data(cls, x, u, bins: int = REGION_BINS) -> Region:
        """Equal-width bins over the data's range of ``u``; an empty bin joins the one before it."""
        x = np.asarray(x, dtype=float)
        u = np.asarray(u, dtype=float)
        ulo, uhi = float(np.min(u)), float(np.max(u))
        if not uhi > ulo:  # one time input: one bin around it (the gate looks up exactly this value)
            return cls((ulo, ulo + max(abs(ulo), 1.0) * 1e-9), ((float(x.min()), float(x.max())),))
        edges = list(np.linspace(ulo, uhi, bins + 1))
        edges[-1] = uhi  # the last edge is the data's maximum, exactly
        which = _bin_index(u, np.asarray(edges))
        kept, ranges = [edges[0]], []
        for b in range(bins):
            inside = x[which == b]
            if inside.size:
                kept.append(edges[b + 1])
                ranges.append((float(inside.min()), float(inside.max())))
            else:  # an empty bin (a gap in the data) widens the one before (bin 0 holds u's minimum)
                kept[-1] = edges[b + 1]
        return cls(tuple(kept), tuple(ranges))

    def bounds(self, u) -> tuple[np.ndarray, np.ndarray]:
        """(low, high) x of the bin holding each ``u``; NaN where ``u`` is outside the region."""
        edges = np.asarray(self.time_edges)
        which = _bin_index(np.asarray(u, dtype=float), edges)
        table = np.asarray((*self.x_ranges, (math.nan, math.nan)))  # index -1: outside
        return table[which, 0], table[which, 1]

    def to_dict(self) -> dict:
        return {"time_edges": list(self.time_edges), "x_ranges": [list(r) for r in self.x_ranges]}

    @classmethod
    def from_dict(cls, data: dict) -> Region:
        try:
            return cls(tuple(data["time_edges"]), tuple(tuple(r) for r in data["x_ranges"]))
        except (KeyError, TypeError) as exc:
            raise InputError(f"region: expected time_edges and x_ranges, got {data!r} ({exc})") from None


def _bin_index(u: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """Bin of each u: ``edges[i] <= u < edges[i+1]``, the last edge inclusive; -1 outside (or NaN)."""
    which = np.searchsorted(edges, u, side="right") - 1
    which = np.where(u == edges[-1], len(edges) - 2, which)
    with np.errstate(invalid="ignore"):
        outside = ~((u >= edges[0]) & (u <= edges[-1]))
    return np.where(outside, -1, which)


@dataclass(frozen=True)
class RescaleFunction:
    """A calibrated rescale function with the x range it was fitted on and where it came from.

    ``form="poly"``: ``y = polyval(coefficients, x)``, the TeaCache polynomial.
    ``form="poly+step"`` / ``"poly+sigma"``: ``y = polyval(coefficients, x) + polyval(time_coefficients, u)``
    with ``u`` the step fraction ``step / (num_steps - 1)`` or the scheduler's sigma; ``time_coefficients``
    are highest power first and carry no constant term (the constant lives in ``coefficients``).
    ``interaction_coefficients`` (time-aware forms only, highest power first, no constant) add
    ``x * polyval((*interaction_coefficients, 0), u)``: a slope in x that changes over the schedule.
    ``region`` (time-aware forms only): the x range per part of the schedule where the data was; the
    gate computes outside it. Without one, ``x_range`` holds at every time input (files from before).
    ``form="mono+step"``: ``y = sum w[k, l] ramp_k(x) hat_l(u)`` (:mod:`teacache.splines`) with ``knots`` in x,
    ``time_knots`` in the step fraction and ``coefficients`` the weights ``w``, k-major (row k = 0: the value
    at ``knots[0]`` per hat; row k: the rise over ``knots[k-1]..knots[k]``). Non-negative rises make it
    non-decreasing in x, rows 0 above zero make it positive: safe by construction.
    """

    coefficients: tuple[float, ...]
    x_range: tuple[float, float] = (0.0, math.inf)
    form: str = FORM_POLY
    time_coefficients: tuple[float, ...] = ()
    provenance: dict = field(default_factory=dict, compare=False, hash=False)
    interaction_coefficients: tuple[float, ...] = ()
    region: Region | None = None
    knots: tuple[float, ...] = ()
    time_knots: tuple[float, ...] = ()

    def __post_init__(self) -> None:
        for name in ("coefficients", "time_coefficients", "interaction_coefficients", "knots", "time_knots"):
            _check_numbers(getattr(self, name), name)
        coeffs = tuple(float(c) for c in self.coefficients)
        if not coeffs or not all(math.isfinite(c) for c in coeffs):
            raise InputError(
                f"coefficients: expected a non-empty sequence of finite numbers, got {self.coefficients!r}"
            )
        lo, hi = (float(v) for v in self.x_range)
        if not (lo >= 0 and hi > lo) or math.isnan(hi):
            raise InputError(f"x_range: expected 0 <= low < high, got {self.x_range!r}")
        if self.form not in FORMS:
            raise InputError(f"form: expected one of {', '.join(FORMS)}, got {self.form!r}")
        tcoeffs = tuple(float(c) for c in self.time_coefficients)
        if self.form == FORM_POLY and tcoeffs:
            raise InputError("time_coefficients: only the time-aware forms take them")
        self._check_knots()
        if self.form in (FORM_POLY_STEP, FORM_POLY_SIGMA) and not tcoeffs:
            raise InputError(f"time_coefficients: form {self.form!r} needs at least one")
        if not all(math.isfinite(c) for c in tcoeffs):
            raise InputError(f"time_coefficients: expected finite numbers, got {self.time_coefficients!r}")
        icoeffs = tuple(float(c) for c in self.interaction_coefficients)
        if icoeffs and self.form not in (FORM_POLY_STEP, FORM_POLY_SIGMA):
            raise InputError("interaction_coefficients: only the time-aware forms take them")
        if not all(math.isfinite(c) for c in icoeffs):
            raise InputError(f"interaction_coefficients: expected finite numbers, got {icoeffs!r}")
        object.__setattr__(self, "interaction_coefficients", icoeffs)
        if self.region is not None:
            if self.form == FORM_POLY:
                raise InputError("region: only the time-aware forms take one (the x range is the plain form's region)")
            if not isinstance(self.region, Region):
                object.__setattr__(self, "region", Region.from_dict(self.region))
            low = min(r[0] for r in self.region.x_ranges)
            high = max(r[1] for r in self.region.x_ranges)
            if low < lo or high > hi:
                raise InputError(f"region: its x ranges ({low!r}..{high!r}) leave x_range {(lo, hi)!r}")
        object.__setattr__(self, "coefficients", coeffs)
        object.__setattr__(self, "time_coefficients", tcoeffs)
        object.__setattr__(self, "x_range", (lo, hi))
        self._check_values()

    def _check_knots(self) -> None:
        """The spline form has increasing finite knots and one weight per (x knot, time knot); others none."""
        knots = tuple(float(k) for k in self.knots)
        tknots = tuple(float(k) for k in self.time_knots)
        if self.form != FORM_MONO_STEP:
            if knots or tknots:
                raise InputError(f"knots/time_knots: only form {FORM_MONO_STEP!r} takes them")
            return
        for name, values, least in (("knots", knots, 2), ("time_knots", tknots, 1)):
            increasing = all(b > a for a, b in zip(values, values[1:], strict=False))
            if len(values) < least or not all(math.isfinite(v) for v in values) or not increasing:
                raise InputError(f"{name}: expected at least {least} increasing finite numbers, got {values!r}")
        if len(self.coefficients) != len(knots) * len(tknots):
            raise InputError(
                f"coefficients: form {FORM_MONO_STEP!r} takes one weight per knot and time knot "
                f"({len(knots)} x {len(tknots)}), got {len(self.coefficients)}"
            )
        if self.time_coefficients:
            raise InputError(f"time_coefficients: form {FORM_MONO_STEP!r} takes none (its weights are coefficients)")
        object.__setattr__(self, "knots", knots)
        object.__setattr__(self, "time_knots", tknots)

    def _check_values(self) -> None:
        """Finite values where the gate evaluates it: finite coefficients can still overflow float64."""
        hi = self.x_range[1] if math.isfinite(self.x_range[1]) else max(2.0, self.x_range[0])  # rel-L1 is below 2
        xs = np.repeat(np.linspace(self.x_range[0], hi, 5), 2)  # each x at u = 0 and u = 1, in one call
        with np.errstate(over="ignore", invalid="ignore"):
            values = self(xs, np.tile([0.0, 1.0], 5))
        if not np.all(np.isfinite(values)):
            raise InputError(
                f"coefficients: the rescale function overflows float64 on x {self.x_range[0]:g}..{hi:g}; expected "
                f"coefficients of a rescale function, got {self.coefficients!r}"
            )

    @property
    def is_time_aware(self) -> bool:
        return self.form != FORM_POLY

    def x_bounds(self, u) -> tuple[np.ndarray, np.ndarray]:
        """(low, high) x where the gate evaluates the function at time input ``u`` (arrays shaped like u);
        NaN where ``u`` is outside the region. Above high the gate computes; below low it uses low."""
        u = np.asarray(u, dtype=float)
        if self.region is None:
            return np.full(u.shape, self.x_range[0]), np.full(u.shape, self.x_range[1])
        return self.region.bounds(u)

    def time_input(self, step: int, num_steps: int, sigma: float | None) -> float:
        """The time variable this form uses at a step (0.0 for the plain polynomial)."""
        if self.form in (FORM_POLY_STEP, FORM_MONO_STEP):
            return step / max(num_steps - 1, 1)
        if self.form == FORM_POLY_SIGMA:
            if sigma is None or not math.isfinite(sigma):
                raise InputError("sigma: form 'poly+sigma' needs the scheduler's sigma at every step")
            return float(sigma)
        return 0.0

    def __call__(self, x, u=0.0):
        """Evaluate at x (scalar or array); ``u`` is the time input of the time-aware forms."""
        if self.form == FORM_MONO_STEP:
            return splines.evaluate(self.coefficients, self.knots, self.time_knots, x, u)
        y = np.polyval(self.coefficients, x)
        if self.time_coefficients:
            y = y + np.polyval((*self.time_coefficients, 0.0), u)
        if self.interaction_coefficients:
            y = y + np.asarray(x, dtype=float) * np.polyval((*self.interaction_coefficients, 0.0), u)
        return float(y) if np.ndim(y) == 0 else y

    def slope(self, x, u=0.0) -> np.ndarray:
        """d/dx at (x, u), an array shaped like x and u broadcast (the safety check reads it)."""
        if self.form == FORM_MONO_STEP:
            return splines.slope(self.coefficients, self.knots, self.time_knots, x, u)
        x = np.asarray(x, dtype=float)
        d = np.polyval(np.polyder(np.asarray(self.coefficients)), x) if len(self.coefficients) > 1 else 0.0 * x
        if self.interaction_coefficients:
            d = d + np.polyval((*self.interaction_coefficients, 0.0), u)
        return np.asarray(d, dtype=float) + 0.0 * x

    def floor(self, u: float | Sequence[float] = 0.0, grid: int = 4001) -> tuple[float, float]:
        """(minimum of max(0, f) over the calibrated range, x where it is reached).

        Each gated step adds at least this much to the accumulator, so a threshold at or below it
        can never skip. For time-aware forms pass every ``u`` the schedule visits.
        """
        us = np.atleast_1d(np.asarray(u, dtype=float))
        los, his = self.x_bounds(us)
        best = (math.inf, self.x_range[0])  # no time input inside the region: the gate computes every step
        for v, lo, hi in zip(us, los, his, strict=True):
            if math.isnan(hi):
                continue
            hi = hi if math.isfinite(hi) else max(lo * 10, 1.0)
            xs = np.linspace(lo, hi, grid)
            values = np.maximum(0.0, np.asarray(self(xs, v), dtype=float))
            i = int(np.argmin(values))
            if values[i] < best[0]:
                best = (float(values[i]), float(xs[i]))
        return best

    def to_dict(self) -> dict:
        data = {
            "form": self.form,
            "coefficients": list(self.coefficients),
            "time_coefficients": list(self.time_coefficients),
            "x_range": list(self.x_range),
            "provenance": self.provenance,
        }
        if self.interaction_coefficients:  # only when used, so earlier files keep their bytes
            data["interaction_coefficients"] = list(self.interaction_coefficients)
        if self.region is not None:
            data["region"] = self.region.to_dict()
        if self.knots:
            data["knots"] = list(self.knots)
            data["time_knots"] = list(self.time_knots)
        return data

    @classmethod
    def from_dict(cls, data: dict) -> RescaleFunction:
        try:
            return cls(
                coefficients=tuple(data["coefficients"]),
                x_range=tuple(data.get("x_range", (0.0, math.inf))),
                form=data.get("form", FORM_POLY),
                time_coefficients=tuple(data.get("time_coefficients", ())),
                provenance=dict(data.get("provenance", {})),
                interaction_coefficients=tuple(data.get("interaction_coefficients", ())),
                region=Region.from_dict(data["region"]) if data.get("region") else None,
                knots=tuple(data.get("knots", ())),
                time_knots=tuple(data.get("time_knots", ())),
            )
        except KeyError as exc:
            raise InputError(f"rescale function: missing field {exc.args[0]!r}") from None


def _check_numbers(values, name: str) -> None:
    if isinstance(values, str | bytes) or not isinstance(values, Sequence | np.ndarray):
        raise InputTypeError(f"{name}: expected a sequence of numbers, got {type(values).__name__}")
    for value in values:
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise InputTypeError(f"{name}: expected numbers, got {value!r} ({type(value).__name__})")


def as_rescale(coefficients: RescaleFunction | Sequence[float] | None, default: RescaleFunction) -> RescaleFunction:
    """Accept a RescaleFunction, a published tuple (highest power first, unbounded range) or None."""
    if coefficients is None:
        return default
    if isinstance(coefficients, RescaleFunction):
        return coefficients
    if isinstance(coefficients, str | bytes) or not isinstance(coefficients, Sequence | np.ndarray):
        raise InputTypeError(
            f"coefficients: expected a RescaleFunction or a sequence of numbers (highest power first), "
            f"got {type(coefficients).__name__}"
        )
    return RescaleFunction(coefficients=tuple(coefficients), provenance={"source": "user-supplied tuple"})
