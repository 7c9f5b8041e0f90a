"""Coefficients a user gives get the fit's safety check: positive nowhere on their range is refused (unless
insisted on), unsafe somewhere warns, safe passes silently; ``apply_teacache`` checks before it installs."""

from __future__ import annotations

import warnings

import pytest

from teacache.errors import TeaCacheError
from teacache.rescale import RescaleFunction
from teacache.safety import UnsafeRescaleError, UnsafeRescaleWarning, check_given, positive_nowhere

NEVER_POSITIVE = [(-1.0, -2.0, -3.0), (0.0,), (0.0, 0.0, 0.0), (-1.0, -1.0)]


@pytest.mark.parametrize("numbers", NEVER_POSITIVE, ids=str)
def test_a_function_positive_nowhere_is_refused_and_allowed_only_with_a_warning(numbers):
    rescale = RescaleFunction(numbers)
    assert positive_nowhere(rescale)
    with pytest.raises(UnsafeRescaleError, match=r"^--c: .*<= 0 everywhere.*pass --x to insist") as caught:
        check_given(rescale, "--c", insist="--x")
    assert isinstance(caught.value, TeaCacheError) and isinstance(caught.value, ValueError)
    with pytest.warns(UnsafeRescaleWarning, match="<= 0 everywhere"):
        assert check_given(rescale, "--c", allow_unsafe=True) is not None


def test_unsafe_somewhere_warns_and_safe_is_silent():
    decreasing = RescaleFunction((-1.0, 1.0, 0.1), x_range=(0.0, 1.0))  # -x^2 + x + 0.1 falls past x = 0.5
    assert not positive_nowhere(decreasing)
    with pytest.warns(UnsafeRescaleWarning, match=r"decreases with x on 0\.5"):
        check_given(decreasing)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert check_given(RescaleFunction((1.0, 0.0))) is None


@pytest.fixture(scope="module")
def shapes():
    from teacache import load_model

    return load_model("tiny-shapes")


def test_apply_teacache_refuses_coefficients_positive_nowhere_and_installs_nothing(shapes):
    from teacache import apply_teacache
    from teacache.core import is_applied

    with pytest.raises(UnsafeRescaleError, match=r"^coefficients: .*allow_unsafe=True"):
        apply_teacache(shapes, rel_l1_thresh=0.1, coefficients=(-1, -1))
    assert not is_applied(shapes)
    with pytest.warns(UnsafeRescaleWarning):
        apply_teacache(shapes, rel_l1_thresh=0.1, coefficients=(-1, -1), allow_unsafe=True).restore()
    apply_teacache(shapes, rel_l1_thresh=0, coefficients=(-1, -1)).restore()  # skips nothing: never read


def test_entering_a_restored_handle_is_refused_instead_of_running_without_teacache(shapes):
    from teacache import apply_teacache
    from teacache.errors import StateError

    handle = apply_teacache(shapes, rel_l1_thresh=0.1)
    with handle:
        pass
    refused = pytest.raises(StateError, match=r"^handle: this TeaCache handle was restored.*apply_teacache")
    with refused as caught, handle:
        raise AssertionError("the block ran")
    assert isinstance(caught.value, TeaCacheError) and isinstance(caught.value, RuntimeError)
    handle.restore()  # still idempotent
