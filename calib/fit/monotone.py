"""Least squares under linear inequality constraints: rescale functions that never decrease in x.

A rescale function that predicts a smaller output change for a larger input change would let the gate
skip more where the model changes more. The solver is exact for a finite set of constraint points
(a least-distance problem solved by NNLS, Lawson & Hanson ch. 23); wherever the derivative still dips
below zero between points, those points join the set and the problem is solved again.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from calib.fit.errors import FitError

GRID = 129  # constraint points in x on the first round
# Time-aware forms: a coarser first grid (x by u); the refinement rounds add the exact worst points.
TIME_AWARE_GRID = (17, 5)
MAX_ROUNDS = 20


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
        roots = np.roots(np.polyder(d1)) if len(d1) > 2 else np.array([])
        points += [float(t.real) for t in roots if abs(t.imag) < 1e-12 and lo <= t.real <= hi]
    points = np.asarray(points)
    values = np.polyval(d1, points)
    return float(values.min()), points[values < 0]


def _critical_values(coef: np.ndarray, lo: float, hi: float) -> tuple[np.ndarray, np.ndarray]:
    """The ends of [lo, hi] and the real stationary points inside it, and the polynomial's values there:
    its minimum on [lo, hi] is among them."""
    points = [lo, hi]
    if len(coef) > 2:
        points += [float(t.real) for t in np.roots(np.polyder(coef)) if abs(t.imag) < 1e-12 and lo <= t.real <= hi]
    points = np.asarray(points)
    return points, np.polyval(coef, points)


def lstsq_with_inequalities(
    design: np.ndarray,
    y: np.ndarray,
    rows: Callable[[Any], np.ndarray],
    points: Any,
    refine: Callable[[np.ndarray, Any], tuple[float, Any]],
    tolerance: float,
) -> np.ndarray:
    """argmin ||design @ c - y|| subject to ``rows(points) @ c >= 0``, with ``refine(c, points)`` returning
    the worst constraint value anywhere and the points extended by where it is negative, until that
    value is at least ``-tolerance``."""
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
        e = np.linalg.solve(r.T, (rows(points) / scale).T).T  # constraint rows in the variable z = R c - f
        e /= np.maximum(np.abs(e).max(axis=1, keepdims=True), 1e-300)
        lhs = np.vstack([e.T, -(e @ f)[None, :]])
        rhs = np.zeros(n_params + 1)
        rhs[-1] = 1.0
        weights = nnls(lhs, rhs, maxiter=100 * lhs.shape[1])[0]
        resid = lhs @ weights - rhs
        z = -resid[:-1] / resid[-1]
        coef = np.linalg.solve(r, z + f) / scale
        worst, points = refine(coef, points)
        if worst >= -tolerance:
            break
    return coef


def fit_monotone(x: np.ndarray, y: np.ndarray, degree: int, x_range: tuple[float, float]) -> np.ndarray:
    """Least-squares polynomial (highest power first) that is non-decreasing on ``x_range``."""
    free = np.polyfit(x, y, degree)
    lo, hi = x_range
    if degree == 0 or min_derivative(free, lo, hi)[0] >= 0:
        return free
    design = power_columns(x, degree)
    if len(np.unique(x)) <= degree:
        raise FitError(f"monotone degree {degree}: too few distinct x values ({len(np.unique(x))})")
    try:
        return lstsq_with_inequalities(
            design,
            np.asarray(y, dtype=float),
            rows=lambda pts: derivative_columns(pts, degree),
            points=np.linspace(lo, hi, GRID),
            refine=lambda coef, pts: _refine_1d(coef, pts, lo, hi),
            tolerance=_tolerance(y, lo, hi),
        )
    except FitError:
        raise FitError(f"monotone degree {degree}: too few distinct x values ({len(np.unique(x))})") from None


def _refine_1d(coef: np.ndarray, points: np.ndarray, lo: float, hi: float) -> tuple[float, np.ndarray]:
    worst, where = min_derivative(coef, lo, hi)
    return worst, np.unique(np.concatenate([points, where]))


def fit_monotone_time_aware(
    design: np.ndarray,
    y: np.ndarray,
    degree: int,
    time_degree: int,
    interaction_degree: int,
    x_range: tuple[float, float],
    u_range: tuple[float, float],
) -> np.ndarray:
    """Least squares over the columns of a time-aware form (x powers, u powers, x*u powers) such that
    the function never decreases in x, at every time input in ``u_range``.

    d/dx f(x, u) = p'(x) + q(u) with p the x polynomial and q the interaction polynomial, so the
    worst point is the worst x of p' paired with the worst u of q.
    """
    lo, hi = x_range
    ulo, uhi = u_range
    n_x = degree + 1

    def split(coef):
        return coef[:n_x], coef[n_x + time_degree :]

    def rows(pts: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
        """One constraint per (x, u) of the product of the two point sets."""
        xs, us = pts
        out = np.zeros((len(xs) * len(us), design.shape[1]))
        out[:, :n_x] = np.repeat(derivative_columns(xs, degree), len(us), axis=0)
        if interaction_degree:
            out[:, n_x + time_degree :] = np.tile(power_columns(us, interaction_degree, constant=False), (len(xs), 1))
        return out

    def worst(coef) -> tuple[float, np.ndarray, np.ndarray]:
        """min over x and u of d/dx f = min p' + min q, and the points where either part goes negative."""
        xcoef, icoef = split(coef)
        xs, slopes = _critical_values(np.polyder(xcoef), lo, hi)
        us, shifts = _critical_values(np.append(icoef, 0.0), ulo, uhi) if interaction_degree else (us0, zero)
        value = float(slopes.min() + shifts.min())
        return value, xs[slopes + shifts.min() < 0], us[shifts + slopes.min() < 0]

    def refine(coef, pts):
        value, new_x, new_u = worst(coef)
        return value, (np.unique(np.concatenate([pts[0], new_x])), np.unique(np.concatenate([pts[1], new_u])))

    us0, zero = np.array([ulo]), np.array([0.0])
    scale = _norms(design)
    free = np.linalg.lstsq(design / scale, y, rcond=None)[0] / scale
    if worst(free)[0] >= 0:
        return free
    points_x, points_u = TIME_AWARE_GRID
    start = (np.linspace(lo, hi, points_x), np.linspace(ulo, uhi, points_u) if interaction_degree else us0)
    return lstsq_with_inequalities(
        design, np.asarray(y, dtype=float), rows=rows, points=start, refine=refine, tolerance=_tolerance(y, lo, hi)
    )


def _norms(design: np.ndarray) -> np.ndarray:
    scale = np.sqrt((design**2).sum(axis=0))
    scale[scale == 0] = 1.0
    return scale


def _tolerance(y, lo: float, hi: float) -> float:
    """How far below zero the derivative may end (rounding), relative to the data's scale."""
    return 1e-9 * max(float(np.ptp(y)), 1e-12) / max(hi - lo, 1e-12)
