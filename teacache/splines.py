"""The basis of the ``mono+step`` rescale form: ramps in x times hats in the step fraction. Pure numpy.

``f(x, u) = sum_k sum_l w[k, l] * ramp_k(x) * hat_l(u)``. ``ramp_0 = 1``; ramp k (k >= 1) rises from 0 at
``knots[k-1]`` to 1 at ``knots[k]`` and stays there, so it never decreases. The hats are the piecewise-linear
interpolation weights on ``time_knots`` (one knot: the constant 1): never negative, summing to 1 at every u.
Hence, with ``w[k, l] >= 0`` for k >= 1, f never decreases in x at any u, and with ``w[0, l] >= floor`` it is
at least ``floor`` at every x >= ``knots[0]`` (where a non-decreasing function is least). Safe by construction:
the fit only has to bound the weights.
"""

from __future__ import annotations

import numpy as np


def ramp_columns(x, knots) -> np.ndarray:
    """Columns ramp_0 .. ramp_K at each x: ``[len(x), len(knots)]``."""
    x = np.asarray(x, dtype=float).reshape(-1)
    t = np.asarray(knots, dtype=float)
    with np.errstate(invalid="ignore"):
        rises = np.clip((x[:, None] - t[:-1]) / np.diff(t), 0.0, 1.0)
    return np.hstack([np.ones((x.size, 1)), rises])


def ramp_slopes(x, knots) -> np.ndarray:
    """d/dx of :func:`ramp_columns` (from the right; at the last knot from the left): ``[len(x), len(knots)]``."""
    x = np.asarray(x, dtype=float).reshape(-1)
    t = np.asarray(knots, dtype=float)
    piece = np.searchsorted(t, x, side="right") - 1
    piece = np.where(x == t[-1], t.size - 2, piece)  # the last knot belongs to the last piece
    inside = piece[:, None] == np.arange(t.size - 1)  # x outside the knots: no piece, slope 0
    return np.hstack([np.zeros((x.size, 1)), np.where(inside, 1.0 / np.diff(t), 0.0)])


def hat_columns(u, time_knots) -> np.ndarray:
    """Columns hat_0 .. hat_L at each u: ``[len(u), len(time_knots)]``; u outside the knots takes the end's."""
    u = np.asarray(u, dtype=float).reshape(-1)
    g = np.asarray(time_knots, dtype=float)
    if g.size == 1:
        return np.ones((u.size, 1))
    eye = np.eye(g.size)
    return np.stack([np.interp(u, g, eye[i]) for i in range(g.size)], axis=1)


def design(x, u, knots, time_knots) -> np.ndarray:
    """Products ramp_k(x) * hat_l(u), k-major: the column order of the flattened weights."""
    ramps = ramp_columns(x, knots)
    hats = hat_columns(u, time_knots)
    return (ramps[:, :, None] * hats[:, None, :]).reshape(ramps.shape[0], -1)


def evaluate(weights, knots, time_knots, x, u):
    """f(x, u) for flattened ``weights`` (k-major), broadcasting x against u; a float for scalars."""
    xb, ub = np.broadcast_arrays(np.asarray(x, dtype=float), np.asarray(u, dtype=float))
    w = np.asarray(weights, dtype=float).reshape(len(knots), len(time_knots))
    ramps = ramp_columns(xb, knots)
    hats = hat_columns(ub, time_knots)
    y = np.einsum("nk,kl,nl->n", ramps, w, hats).reshape(xb.shape)
    return float(y) if y.ndim == 0 else y


def slope(weights, knots, time_knots, x, u) -> np.ndarray:
    """d/dx f(x, u), broadcasting x against u."""
    xb, ub = np.broadcast_arrays(np.asarray(x, dtype=float), np.asarray(u, dtype=float))
    w = np.asarray(weights, dtype=float).reshape(len(knots), len(time_knots))
    return np.einsum("nk,kl,nl->n", ramp_slopes(xb, knots), w, hat_columns(ub, time_knots)).reshape(xb.shape)
