"""Fitting the ``mono+step`` form (:mod:`teacache.splines`): bounded least squares on ramp-times-hat columns.

The form is safe by construction once its weights are bounded (rises >= 0, values at the lowest knot >=
the prediction floor), so the fit is a non-negative least squares after shifting the bounded weights by
their bounds: no constraint grid, no refinement rounds. x knots sit at quantiles of the fitted x (each
piece holds data), time knots evenly over the fitted step fractions.
"""

from __future__ import annotations

import numpy as np

from calib.fit.errors import FitError
from teacache import splines

# Knots closer than this fraction of the x range are merged: a piece that narrow holds no data of its own and
# its ramp's slope (1 / width) would only amplify rounding.
MIN_PIECE = 1e-6


def x_knots(x: np.ndarray, pieces: int) -> tuple[float, ...]:
    """``pieces + 1`` knots at quantiles of x (fewer where x has fewer distinct values)."""
    x = np.asarray(x, dtype=float)
    lo, hi = float(np.min(x)), float(np.max(x))
    if not hi > lo:
        raise FitError(f"mono+step: every x is {lo:g}; a monotone fit in x needs a spread of x values")
    quantiles = np.quantile(x, np.linspace(0.0, 1.0, pieces + 1))
    kept = [lo]
    for q in quantiles[1:-1]:
        if q - kept[-1] > MIN_PIECE * (hi - lo) and hi - q > MIN_PIECE * (hi - lo):
            kept.append(float(q))
    return (*kept, hi)


def time_knots(u: np.ndarray, pieces: int) -> tuple[float, ...]:
    """``pieces + 1`` even knots over the fitted time inputs (one knot, the constant, for 0 pieces)."""
    u = np.asarray(u, dtype=float)
    lo, hi = float(np.min(u)), float(np.max(u))
    if pieces == 0 or not hi > lo:
        return (lo,)
    return tuple(float(v) for v in np.linspace(lo, hi, pieces + 1))


def fit_weights(
    x: np.ndarray, y: np.ndarray, u: np.ndarray, knots: tuple[float, ...], tknots: tuple[float, ...], floor: float
) -> np.ndarray:
    """Least-squares weights (k-major) with rises >= 0 and values at ``knots[0]`` >= ``floor``."""
    # heavy (scipy): loaded after the arguments are checked
    from scipy.optimize import nnls

    design = splines.design(x, u, knots, tknots)
    lower = np.zeros(design.shape[1])
    lower[: len(tknots)] = floor  # row k = 0: the value at the lowest knot per hat
    scale = np.sqrt((design**2).sum(axis=0))
    scale[scale == 0] = 1.0
    scaled = design / scale
    shifted = np.asarray(y, dtype=float) - design @ lower
    z = nnls(scaled, shifted, maxiter=50 * design.shape[1])[0]
    return lower + z / scale
