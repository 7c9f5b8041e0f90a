"""The constrained fits' shortcuts give what the general route gives, bit for bit."""

from __future__ import annotations

import numpy as np
import pytest

from calib.fit.monotone import _critical_values, _roots, _stationary


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def test_a_first_degree_root_is_the_one_np_roots_finds():
    rng = np.random.default_rng(0)
    for scale in (1e-60, 1e-6, 1.0, 1e6, 1e60):
        for p in rng.normal(size=(2000, 2)) * scale * np.exp(rng.normal(size=(2000, 2)) * 4):
            assert _same(_roots(p), np.roots(p)), p


@pytest.mark.parametrize(
    "p",
    [[2.0, 0.0], [0.0, 3.0], [1e-200, 1.0], [1.0, 1e-200], [1.0, -5e-101], [1.0, 2.0, 3.0], [1.0, -3.0, 2.0, 0.5]],
)
def test_every_other_polynomial_goes_to_np_roots(p):
    p = np.asarray(p)
    assert _same(_roots(p), np.roots(p))


def test_infinite_and_nan_coefficients_fail_as_np_roots_fails():
    for p in ([1e-300, 1e300], [np.nan, 1.0]):
        with np.errstate(over="ignore", invalid="ignore"), pytest.raises(np.linalg.LinAlgError):
            np.roots(np.asarray(p))
        with np.errstate(over="ignore", invalid="ignore"), pytest.raises(np.linalg.LinAlgError):
            _roots(np.asarray(p))


def test_critical_values_with_known_stationary_points_are_the_same():
    rng = np.random.default_rng(1)
    for coef in rng.normal(size=(200, 4)):
        along = coef.copy()
        along[-1] += 0.3  # another constant: the same derivative, the same stationary points
        points, values = _critical_values(along, -1.0, 1.0)
        known_points, known_values = _critical_values(along, -1.0, 1.0, _stationary(coef))
        assert _same(points, known_points) and _same(values, known_values)
