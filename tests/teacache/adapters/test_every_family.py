"""What every adapter must do the same way, on each family's embedded pipeline (conftest's ``family``)."""

from __future__ import annotations

import warnings

import mlx.core as mx
import pytest

from teacache import apply_teacache, variants
from teacache.coefficients import load_packaged, load_recipe
from teacache.core import is_applied
from tests.teacache.adapters import FAMILY_FIXTURES, IDENTITY

EVERY_FAMILY = pytest.mark.parametrize("family", list(FAMILY_FIXTURES), indirect=True)


def _untouched(model, original) -> bool:
    """The pipeline as mflux built it: its transformer, no predict of ours, no controller in its callbacks."""
    return model.transformer is original and "_predict" not in vars(model) and not is_applied(model)


@EVERY_FAMILY
def test_restore_is_exact_after_an_exception_inside_the_loop(family):
    model, generate = family
    vanilla = generate(seed=6)

    class Boom:
        def call_in_loop(self, t, **_):
            if t == 3:
                raise RuntimeError("boom at step 3")

    boom = Boom()
    model.callbacks.register(boom)
    original = model.transformer
    try:
        with pytest.raises(RuntimeError, match="boom"), apply_teacache(model, rel_l1_thresh=0.3, coefficients=IDENTITY):
            generate(seed=6)
    finally:
        model.callbacks.in_loop.remove(boom)
    assert _untouched(model, original)
    assert mx.array_equal(vanilla, generate(seed=6)).item()


@EVERY_FAMILY
def test_applying_twice_raises_and_leaves_the_first_in_place(family):
    model, _ = family
    original = model.transformer
    with apply_teacache(model, rel_l1_thresh=0.3, coefficients=IDENTITY) as first:
        with pytest.raises(RuntimeError, match="already applied"):
            apply_teacache(model, rel_l1_thresh=0.3, coefficients=IDENTITY)
        assert first.active and is_applied(model)
    assert _untouched(model, original)


@pytest.mark.parametrize("family", ["tiny-qwen-image", "tiny-z-image"], indirect=True)
def test_packaged_tiny_calibration_matches_the_test_recipe(family):
    model, generate = family
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no recipe-mismatch or never-skips warning at the packaged defaults
        with apply_teacache(model) as handle:
            generate(seed=8)
    assert handle.variant == variants.variant_of(model) and handle.stats.skipped > 0


@pytest.mark.parametrize(
    ("variant", "recipe"),
    [
        ("qwen-image", {"num_steps": 50, "guidance": 4.0, "resolution": "768x768", "quantization": 4}),
        ("qwen-image-2512", {"num_steps": 50, "guidance": 4.0, "resolution": "768x768", "quantization": 4}),
        ("z-image", {"num_steps": 50, "guidance": 4.0, "resolution": "512x512", "quantization": 8}),
    ],
)
def test_published_coefficients_can_skip_at_the_default_threshold(variant, recipe):
    rescale = load_packaged(variant)
    assert len(rescale.coefficients) == 5 and rescale.coefficients[-1] == 0.0
    assert rescale.floor()[0] < variants.get(variant).default_threshold
    assert load_recipe(variant) == recipe
