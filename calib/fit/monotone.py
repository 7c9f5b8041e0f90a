"""Least squares under linear inequality constraints: rescale functions that never decrease in x and stay
positive where the gate evaluates them.

A rescale function that predicts a smaller output change for a larger input change would let the gate
skip more where the model changes more; one that predicts zero or less adds nothing, whatever the
change. The solver is exact for a finite set of constraint points (a least-distance problem solved by
NNLS, Lawson & Hanson ch. 23); wherever the derivative still dips below zero, or the function below its
floor, between points, those points join the set and the problem is solved again. A non-decreasing
function is smallest at the low end of its x range, so positivity is checked there only: at ``lo``
for a polynomial, along each part of the schedule's low x for a time-aware form with a region.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from calib.fit.errors import FitError
from teacache.rescale import Region

GRID = 129  # constraint points in x on the first round
# Time-aware forms: a coarser first grid (x by u); the refinement rounds add the exact worst points.
TIME_AWARE_GRID = (17, 5)
VALUE_SLACK = 1e-3  # a constrained value may end this fraction below its floor (rounding; still positive)
MAX_ROUNDS = 20
# The least prediction a safe fit makes, as a fraction of the mean recorded |y|: positive with room to
# spare for rounding, and small enough to leave the fit as it was wherever it was positive already.
FLOOR_FRACTION = 0.01


def prediction_floor(y: np.ndarray) -> float:
    """The least value a safe fit may predict on the rows' region (FLOOR_FRACTION of the mean |y|)."""
    return FLOOR_FRACTION * max(float(np.mean(np.abs(y))), 1e-12)


def power_columns(x: np.ndarray, degree: int, constant: bool = True) -> np.ndarray:
    """Columns x^degree .. x^1 (x^0 when ``constant``): highest power first, like np.polyfit."""
    powers = np.arange(degree, -1 if constant else 0, -1)
    return np.asarray(x, dtype=float)[:, None] ** powers


def derivative_columns(x: np.ndarray, degree: int) -> np.ndarray:
    """d/dx of :func:`power_columns` (with the constant) at each x."""
    powers = np.arange(degree, -1, -1)
    x = np.asarray(x, dtype=float)
    return np.where(powers > 0, powers * x[:, None] ** np.maximum(powers - 1, 0), 0.0)


def min_derivative(coef: np.ndarray, lo: float, hi: float) -> tuple[float, np.ndarray]:
    """Smallest derivative of a polynomial (highest power first) on [lo, hi] and where it is negative."""
    d1 = np.polyder(coef)
    points = [lo, hi]
    if len(d1) > 1:
        roots = _roots(np.polyder(d1)) if len(d1) > 2 else np.array([])
        points += [float(t.real) for t in roots if abs(t.imag) < 1e-12 and lo <= t.real <= hi]
    points = np.asarray(points)
    values = np.polyval(d1, points)
    return float(values.min()), points[values < 0]


def _roots(p: np.ndarray) -> np.ndarray:
    """``np.roots(p)``, with a first-degree polynomial solved directly: the one eigenvalue of its 1x1 companion
    matrix is the matrix's entry ``-p[1] / p[0]``, exactly as LAPACK returns it, unless LAPACK scales the
    matrix first (an entry outside about 1e-138..1e138), so roots outside 1e-100..1e100 go to np.roots, as do
    zero, infinite and NaN ones and every other degree."""
    if len(p) == 2 and p[0] != 0 and p[1] != 0:
        root = -p[1] / p[0]
        if 1e-100 < abs(root) < 1e100:
            return np.array([root])
    return np.roots(p)


def _stationary(coef: np.ndarray) -> np.ndarray:
    """The roots of the polynomial's derivative (complex ones included); empty below degree 2."""
    return _roots(np.polyder(coef)) if len(coef) > 2 else np.array([])


def _critical_values(
    coef: np.ndarray, lo: float, hi: float, stationary: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """The ends of [lo, hi] and the real stationary points inside it, and the polynomial's values there:
    its minimum on [lo, hi] is among them. ``stationary``: :func:`_stationary` of ``coef``, when known."""
    roots = _stationary(coef) if stationary is None else stationary
    points = [lo, hi] + [float(t.real) for t in roots if abs(t.imag) < 1e-12 and lo <= t.real <= hi]
    points = np.asarray(points)
    return points, np.polyval(coef, points)


def lstsq_with_inequalities(
    design: np.ndarray,
    y: np.ndarray,
    rows: Callable[[Any], tuple[np.ndarray, np.ndarray]],
    points: Any,
    refine: Callable[[np.ndarray, Any], tuple[bool, Any]],
) -> np.ndarray:
    """argmin ||design @ c - y|| subject to ``A @ c >= b`` with ``A, b = rows(points)``; ``refine(c, points)``
    says whether c meets the constraints everywhere (within rounding) and returns the points extended
    by where it does not."""
    # heavy (scipy): loaded after the arguments are checked
    from scipy.optimize import nnls

    n_params = design.shape[1]
    scale = np.sqrt((design**2).sum(axis=0))
    scale[scale == 0] = 1.0
    q, r = np.linalg.qr(design / scale)
    diag = np.abs(np.diag(r))
    if np.min(diag) < 1e-12 * np.max(diag):
        raise FitError(f"constrained fit: the {n_params} columns are not independent on these rows (few distinct x?)")
    f = q.T @ y
    coef = np.linalg.solve(r, f) / scale
    for _ in range(MAX_ROUNDS):
        matrix, bounds = rows(points)
        e = np.linalg.solve(r.T, (matrix / scale).T).T  # constraint rows in the variable z = R c - f
        norm = np.maximum(np.abs(e).max(axis=1), 1e-300)
        e, bounds = e / norm[:, None], bounds / norm
        lhs = np.vstack([e.T, (bounds - e @ f)[None, :]])
        rhs = np.zeros(n_params + 1)
        rhs[-1] = 1.0
        weights = nnls(lhs, rhs, maxiter=100 * lhs.shape[1])[0]
        resid = lhs @ weights - rhs
        z = -resid[:-1] / resid[-1]
        coef = np.linalg.solve(r, z + f) / scale
        done, points = refine(coef, points)
        if done:
            break
    return coef


def fit_monotone(
    x: np.ndarray, y: np.ndarray, degree: int, x_range: tuple[float, float], floor: float | None = None
) -> np.ndarray:
    """Least-squares polynomial (highest power first) that is non-decreasing on ``x_range`` and, with
    ``floor``, at least ``floor`` there (at its low end, where a non-decreasing function is least)."""
    free = np.polyfit(x, y, degree)
    lo, hi = x_range
    tolerance = _tolerance(y, lo, hi)
    low_enough = floor is None or np.polyval(free, lo) >= floor
    if low_enough and (degree == 0 or min_derivative(free, lo, hi)[0] >= 0):
        return free
    design = power_columns(x, degree)
    if len(np.unique(x)) <= degree:
        raise FitError(f"monotone degree {degree}: too few distinct x values ({len(np.unique(x))})")
    at_lo = power_columns(np.array([lo]), degree)

    def rows(pts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        slopes = derivative_columns(pts, degree)
        if floor is None:
            return slopes, np.zeros(len(pts))
        return np.vstack([slopes, at_lo]), np.append(np.zeros(len(pts)), floor)

    def refine(coef: np.ndarray, pts: np.ndarray) -> tuple[bool, np.ndarray]:
        worst, where = min_derivative(coef, lo, hi)
        return worst >= -tolerance, np.unique(np.concatenate([pts, where]))

    try:
        return lstsq_with_inequalities(
            design, np.asarray(y, dtype=float), rows=rows, points=np.linspace(lo, hi, GRID), refine=refine
        )
    except FitError:
        raise FitError(f"monotone degree {degree}: too few distinct x values ({len(np.unique(x))})") from None


def fit_monotone_time_aware(
    design: np.ndarray,
    y: np.ndarray,
    degree: int,
    time_degree: int,
    interaction_degree: int,
    x_range: tuple[float, float],
    u_range: tuple[float, float],
    region: Region | None = None,
    floor: float | None = None,
) -> np.ndarray:
    """Least squares over the columns of a time-aware form (x powers, u powers, x*u powers) such that
    the function never decreases in x, at every time input in ``u_range``, and (with ``region`` and
    ``floor``) is at least ``floor`` on the region: along each part of the schedule's low x.

    d/dx f(x, u) = p'(x) + q(u) with p the x polynomial and q the interaction polynomial, so the
    worst point is the worst x of p' paired with the worst u of q. At a fixed x, f is a polynomial
    in u, whose least value on a part of the schedule is at its ends or a stationary point.
    """
    lo, hi = x_range
    ulo, uhi = u_range
    n_x = degree + 1
    n_t = time_degree
    lows = [] if region is None or floor is None else [
        (r[0], a, b) for r, a, b in zip(region.x_ranges, region.time_edges, region.time_edges[1:], strict=False)
    ]  # fmt: skip

    def split(coef):
        return coef[:n_x], coef[n_x + n_t :]

    def value_rows(pairs: np.ndarray) -> np.ndarray:
        """Design rows at (x, u) pairs."""
        x0, u0 = pairs[:, 0], pairs[:, 1]
        parts = [power_columns(x0, degree), power_columns(u0, n_t, constant=False)]
        if interaction_degree:
            parts.append(x0[:, None] * power_columns(u0, interaction_degree, constant=False))
        return np.hstack(parts)

    def rows(pts) -> tuple[np.ndarray, np.ndarray]:
        """One slope constraint per (x, u) of the product of the two point sets, one value constraint per pair."""
        xs, us, pairs = pts
        out = np.zeros((len(xs) * len(us), design.shape[1]))
        out[:, :n_x] = np.repeat(derivative_columns(xs, degree), len(us), axis=0)
        if interaction_degree:
            out[:, n_x + n_t :] = np.tile(power_columns(us, interaction_degree, constant=False), (len(xs), 1))
        if not len(pairs):
            return out, np.zeros(len(out))
        return np.vstack([out, value_rows(pairs)]), np.concatenate([np.zeros(len(out)), np.full(len(pairs), floor)])

    def worst(coef) -> tuple[float, np.ndarray, np.ndarray]:
        """min over x and u of d/dx f = min p' + min q, and the points where either part goes negative."""
        xcoef, icoef = split(coef)
        xs, slopes = _critical_values(np.polyder(xcoef), lo, hi)
        us, shifts = _critical_values(np.append(icoef, 0.0), ulo, uhi) if interaction_degree else (us0, zero)
        value = float(slopes.min() + shifts.min())
        return value, xs[slopes + shifts.min() < 0], us[shifts + slopes.min() < 0]

    def lowest(coef) -> list[tuple[float, float, float]]:
        return _lowest_along(coef, lows, n_x, n_t, interaction_degree)

    def refine(coef, pts):
        value, new_x, new_u = worst(coef)
        low = [(x0, u0) for v, x0, u0 in lowest(coef) if v < floor * (1 - VALUE_SLACK)]
        pairs = np.vstack([pts[2], np.array(low).reshape(-1, 2)])
        done = value >= -tolerance and not low
        return done, (np.unique(np.concatenate([pts[0], new_x])), np.unique(np.concatenate([pts[1], new_u])), pairs)

    us0, zero = np.array([ulo]), np.array([0.0])
    tolerance = _tolerance(y, lo, hi)
    scale = _norms(design)
    free = np.linalg.lstsq(design / scale, y, rcond=None)[0] / scale
    if worst(free)[0] >= 0 and all(v >= floor for v, *_ in lowest(free)):
        return free
    points_x, points_u = TIME_AWARE_GRID
    start_pairs = np.array([(x0, u0) for x0, a, b in lows for u0 in np.linspace(a, b, points_u)]).reshape(-1, 2)
    start = (np.linspace(lo, hi, points_x), np.linspace(ulo, uhi, points_u) if interaction_degree else us0, start_pairs)
    return lstsq_with_inequalities(design, np.asarray(y, dtype=float), rows=rows, points=start, refine=refine)


def _lowest_along(
    coef: np.ndarray, lows: list, n_x: int, n_t: int, interaction_degree: int
) -> list[tuple[float, float, float]]:
    """(least value, x, u) of a time-aware form along each part of the schedule's low x (``lows``: x, u from, to)."""
    xcoef, icoef = coef[:n_x], coef[n_x + n_t :]
    tcoef = np.append(coef[n_x : n_x + n_t], 0.0)
    # without x*u terms the polynomials along the low x differ in their constant only: one derivative
    shared = None if interaction_degree else _stationary(tcoef)
    out = []
    for x0, a, b in lows:
        along = tcoef.copy()
        along[-1] += np.polyval(xcoef, x0)
        if interaction_degree:
            along[-(interaction_degree + 1) :] += x0 * np.append(icoef, 0.0)
        us, values = _critical_values(along, a, b, shared)
        i = int(np.argmin(values))
        out.append((float(values[i]), x0, float(us[i])))
    return out


def _norms(design: np.ndarray) -> np.ndarray:
    scale = np.sqrt((design**2).sum(axis=0))
    scale[scale == 0] = 1.0
    return scale


def _tolerance(y, lo: float, hi: float) -> float:
    """How far below zero the derivative may end (rounding), relative to the data's scale."""
    return 1e-9 * max(float(np.ptp(y)), 1e-12) / max(hi - lo, 1e-12)
