"""The monotone ceiling of a fit: how well any function that never decreases in x can predict held-out prompts.

No function non-decreasing in x fits a set of rows better than isotonic regression in x on those rows. Fitted
per part of the schedule (equal bins of the step fraction; 1, 3, 5 or 8 bins, the best kept) and scored on the
same prompt-grouped folds as the candidates, it says how far the selected candidate is from what a safe
function could do: a gap means a more flexible form could help, none means only more data or another signal
can. A held-out x between fitted ones takes the linear interpolation, outside them the end value.
"""

from __future__ import annotations

import numpy as np

from calib.fit.selection import r2_score

CEILING_BINS = (1, 3, 5, 8)


def isotonic_predict(x_fit: np.ndarray, y_fit: np.ndarray, x_new: np.ndarray) -> np.ndarray:
    """Isotonic (non-decreasing) least squares of y in x on the fitted rows, evaluated at ``x_new``."""
    # heavy (scipy): loaded after the arguments are checked
    from scipy.optimize import isotonic_regression

    order = np.argsort(x_fit, kind="stable")
    fitted = isotonic_regression(y_fit[order]).x
    xs, inverse = np.unique(x_fit[order], return_inverse=True)
    level = np.bincount(inverse, fitted) / np.bincount(inverse)  # tied x share one value
    return np.interp(x_new, xs, level)


def _bins(u: np.ndarray, n_bins: int) -> np.ndarray:
    edges = np.linspace(0.0, 1.0, n_bins + 1)
    return np.clip(np.searchsorted(edges, u, side="right") - 1, 0, n_bins - 1)


def cv_r2_binned(x: np.ndarray, y: np.ndarray, u: np.ndarray, folds: np.ndarray, n_bins: int) -> float:
    """Pooled out-of-fold R^2 of isotonic regression in x fitted per step-fraction bin."""
    which = _bins(u, n_bins)
    oof = np.empty_like(y)
    for k in np.unique(folds):
        test = folds == k
        for b in np.unique(which[test]):
            rows = test & (which == b)
            train = ~test & (which == b)
            if not train.any():  # no fitted row in this bin: the whole schedule's fit
                train = ~test
            oof[rows] = isotonic_predict(x[train], y[train], x[rows])
    return r2_score(y, oof)


def monotone_ceiling(
    x: np.ndarray, y: np.ndarray, u: np.ndarray | None, folds: np.ndarray, selected_cv_r2: float
) -> dict:
    """fit.json's ``ceiling``: the best binned isotonic cv R^2, per bin count, and the selection's distance to it."""
    x = np.asarray(x, dtype=float)
    y = np.asarray(y, dtype=float)
    bins = CEILING_BINS if u is not None else (1,)
    u = np.zeros_like(x) if u is None else np.asarray(u, dtype=float)
    scores = {str(b): cv_r2_binned(x, y, u, folds, b) for b in bins}
    best = max(scores, key=lambda b: (scores[b], -int(b)))
    variance = float(np.mean((y - np.mean(y)) ** 2))
    return {
        "method": "isotonic regression in x per equal bin of the step fraction, scored on the same folds",
        "cv_r2": scores[best],
        "bins": int(best),
        "cv_r2_by_bins": scores,
        "rmse": float(np.sqrt(max(0.0, 1.0 - scores[best]) * variance)),
        "selected_cv_r2": float(selected_cv_r2),
        "distance": float(scores[best] - selected_cv_r2),
    }
