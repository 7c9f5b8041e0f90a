"""The API takes numpy's scalars where it takes Python numbers, and refuses wrong types and numbers it
cannot use with one error naming the argument."""

from __future__ import annotations

import numpy as np
import pytest


def test_numpy_scalars_are_numbers_where_python_numbers_are():
    from teacache.gate import GateConfig
    from teacache.rescale import RescaleFunction

    config = GateConfig(np.float32(0.03), RescaleFunction((np.float64(1.0), 0)), skip_first_n_steps=np.int64(2))
    assert config.rel_l1_thresh == pytest.approx(0.03) and type(config.rel_l1_thresh) is float
    assert config.skip_first_n_steps == 2 and type(config.skip_first_n_steps) is int
    with pytest.raises(ValueError, match=r"got -0\.05\b") as caught:
        GateConfig(np.float64(-0.05), RescaleFunction((1.0, 0.0)))
    assert "np.float64" not in str(caught.value)


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: __import__("teacache").load_model(123), "model: expected a name"),
        (lambda: __import__("teacache.rescale").rescale.RescaleFunction(("a", "b")), "coefficients: expected numbers"),
        (lambda: __import__("teacache.gate").gate.check_threshold("0.1"), "rel_l1_thresh: expected a number"),
    ],
)
def test_wrong_types_are_type_errors_naming_the_argument(call, match):
    with pytest.raises(TypeError, match=match):
        call()


def test_coefficients_that_overflow_are_refused():
    from teacache.rescale import RescaleFunction

    with pytest.raises(ValueError, match="overflows"):
        RescaleFunction((1e308, 1e308))
    with pytest.raises(ValueError, match="overflows"):  # only at the top of the x range
        RescaleFunction((1e308, 0.0), (0.0, 2.0))
    with pytest.raises(ValueError, match="overflows"):  # only at the end of the schedule (u = 1)
        RescaleFunction((1e308,), (0.0, 2.0), "poly+step", (1e308,))
    RescaleFunction((1e308, 0.0), (0.0, 1.0))  # finite everywhere it is evaluated: accepted
    RescaleFunction((1e308,), (0.0, 2.0), "poly+step", (-1e308,))
