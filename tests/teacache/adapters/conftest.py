"""One tiny pipeline per family for every adapter test, and ``family``: the same test on each of them.

mflux's FLUX.2 and Z-Image predicts are ``mx.compile``d; the first compiled run after an eager run in a
process can differ from later compiled runs in the last bits (tests/teacache/adapters/test_tiny_shapes.py),
so their fixtures run TeaCache once before any comparison.
"""

from __future__ import annotations

import pytest

import teacache
from teacache import apply_teacache
from tests.conftest import make_generate
from tests.teacache.adapters import FAMILY_FIXTURES, IDENTITY, STEPS


def _warmed_up(model, generate):
    with apply_teacache(model, rel_l1_thresh=0.3, coefficients=IDENTITY):
        generate()
    generate()
    return model, generate


@pytest.fixture(scope="package")
def klein():
    model = teacache.load_model("tiny-flux2")
    return _warmed_up(model, make_generate(model, num_inference_steps=STEPS, height=128, width=128, guidance=1.0))


@pytest.fixture(scope="package")
def qwen_image():
    model = teacache.load_model("tiny-qwen-image")
    return model, make_generate(model, num_inference_steps=STEPS, height=128, width=128, guidance=4.0)


@pytest.fixture(scope="package")
def z_image():
    model = teacache.load_model("tiny-z-image")
    return _warmed_up(model, make_generate(model, num_inference_steps=STEPS, height=128, width=128, guidance=4.0))


@pytest.fixture(scope="package")
def flux1(tiny_flux1, flux1_generate):
    return tiny_flux1, flux1_generate


@pytest.fixture
def family(request):
    """(model, generate) of the embedded model named by the test's ``family`` parameter (indirect)."""
    return request.getfixturevalue(FAMILY_FIXTURES[request.param])
