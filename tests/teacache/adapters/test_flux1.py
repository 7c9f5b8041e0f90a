"""FLUX.1 on mflux's real Flux1.generate_image (tiny-flux1): the no-op oracle, skipping, restore."""

from __future__ import annotations

import importlib
import os
import warnings
from pathlib import Path

import mlx.core as mx
import pytest

import teacache
from bench.quality.metrics import image_metrics
from bench.tolerances.derive import check_run
from calib.run.generation import generate
from teacache import NeverSkipsWarning, apply_teacache
from teacache.adapters.flux1 import TeaCacheFlux1Transformer
from teacache.coefficients import _upstream, module_name
from teacache.rescale import RescaleFunction
from tests.tolerances import measured_case


def test_threshold_zero_is_a_bit_exact_no_op_in_reverse_order(tiny_flux1, flux1_generate):
    with apply_teacache(tiny_flux1, rel_l1_thresh=0.0):
        wrapped_before = flux1_generate(seed=3)
    vanilla = flux1_generate(seed=3)
    with apply_teacache(tiny_flux1, rel_l1_thresh=0.0):
        wrapped_after = flux1_generate(seed=3)
    assert mx.array_equal(wrapped_before, vanilla).item()
    assert mx.array_equal(wrapped_after, vanilla).item()


def test_active_proxy_that_skips_nothing_is_bit_exact(tiny_flux1, flux1_generate):
    """The re-walked forward, the signal and the kept residual must not change a single bit."""
    vanilla = flux1_generate(seed=1)
    upstream = _upstream.FLUX1_DEV_RESCALE  # its minimum, ~0.180, is above 0.05: the gate never skips
    with pytest.warns(NeverSkipsWarning), apply_teacache(tiny_flux1, 0.05, coefficients=upstream) as handle:
        wrapped = flux1_generate(seed=1)
        assert isinstance(tiny_flux1.transformer, TeaCacheFlux1Transformer)
    assert handle.stats.computed == 10 and handle.stats.skipped == 0
    assert len(handle.stats.log) == 10 and handle.stats.log[1].x is not None
    assert mx.array_equal(vanilla, wrapped).item()
    assert mx.array_equal(vanilla, flux1_generate(seed=1)).item()


def test_positive_threshold_skips_within_the_measured_bounds(tiny_flux1, tolerances):
    settings = tolerances.TINY_FLUX1_SETTINGS
    width, height = (int(v) for v in settings["resolution"].split("x"))
    prompt, seed = measured_case(tolerances, "tiny-flux1")  # a pair the bounds were measured on
    args = (prompt, seed, settings["steps"], width, height, settings["guidance"])
    vanilla = generate(tiny_flux1, *args)
    gate = {
        "coefficients": RescaleFunction.from_dict(settings["rescale"]),
        "skip_first_n_steps": settings["skip_first_n_steps"],
    }
    with apply_teacache(tiny_flux1, settings["threshold"], **gate) as handle:
        cached = generate(tiny_flux1, *args)
    stats = handle.stats
    run = {"skipped": stats.skipped, **image_metrics(cached.image, vanilla.image)}
    assert check_run(tolerances, "tiny-flux1", run) == {"skip_band": True, "ssim_floor": True, "psnr_floor": True}
    assert stats.computed + stats.skipped == settings["steps"]
    assert 0 not in stats.skipped_steps and settings["steps"] - 1 not in stats.skipped_steps
    assert not mx.array_equal(vanilla.latents, cached.latents).item()
    assert [d.step for d in stats.log] == list(range(settings["steps"]))
    assert all(d.sigma is not None for d in stats.log)


def test_restore_without_context_manager_and_twice(tiny_flux1):
    original = tiny_flux1.transformer
    handle = apply_teacache(tiny_flux1, rel_l1_thresh=0.3)
    assert tiny_flux1.transformer is not original
    handle.restore()
    handle.restore()
    assert tiny_flux1.transformer is original


def test_unsupported_model_names_the_supported_variants():
    from mlx import nn

    with pytest.raises(TypeError, match="supported variants: .*flux1-dev"):
        apply_teacache(nn.Linear(2, 2), rel_l1_thresh=0.3)


@pytest.mark.parametrize("bad", [-0.5, float("nan"), "0.3", True])
def test_bad_threshold_is_refused_before_anything_is_installed(tiny_flux1, bad):
    original = tiny_flux1.transformer
    with pytest.raises((ValueError, TypeError), match="rel_l1_thresh"):  # TypeError for "0.3" and True
        apply_teacache(tiny_flux1, rel_l1_thresh=bad)
    assert tiny_flux1.transformer is original


def test_coefficients_accept_a_published_tuple(tiny_flux1, flux1_generate):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with apply_teacache(tiny_flux1, rel_l1_thresh=0.3, coefficients=(1.0, 0.0)) as handle:
            flux1_generate(seed=5)
    assert handle.rescale.coefficients == (1.0, 0.0)
    with pytest.raises(TypeError, match="coefficients"):
        apply_teacache(tiny_flux1, rel_l1_thresh=0.3, coefficients="1,0")


def test_too_few_steps_are_announced_before_generating(tiny_flux1, flux1_generate):
    warns = pytest.warns(NeverSkipsWarning, match="cannot skip any step of this 2-step schedule")
    with warns, apply_teacache(tiny_flux1, rel_l1_thresh=0.3) as handle:
        flux1_generate(num_inference_steps=2)
    assert handle.stats.skipped == 0


def test_calibration_mode_records_every_step_and_never_skips(tiny_flux1, flux1_generate):
    vanilla = flux1_generate(seed=6)
    with apply_teacache(tiny_flux1, calibrate=True) as handle:
        recorded = flux1_generate(seed=6)
    assert mx.array_equal(vanilla, recorded).item()
    rows = handle.records
    assert [r["step"] for r in rows] == list(range(10))
    assert all(r["x_rel_l1"] > 0 and r["y_rel_l1"] > 0 for r in rows[1:])
    assert all(r["residual_norm"] > 0 for r in rows)


def test_packaged_coefficients_outside_their_recipe_warn_once(tiny_flux1, flux1_generate, monkeypatch):
    # tiny-flux1's packaged module holds the FLUX.1-dev tuple at its own recipe (it was never fitted on it);
    # the tuple and its FLUX.1-dev recipe (28 steps, 1024x1024, guidance 3.5) are set here from where they are
    # defined, so a local refit of tiny-flux1 does not change this test
    module = importlib.import_module(f"teacache.coefficients.{module_name('tiny-flux1')}")
    monkeypatch.setattr(module, "RESCALE", _upstream.FLUX1_DEV_RESCALE)
    monkeypatch.setattr(module, "RECIPE", _upstream.FLUX1_DEV_RECIPE)
    expect = pytest.warns(teacache.RecipeMismatchWarning, match="28 steps, this generation 10.*--model tiny-flux1 ")
    with expect as caught, apply_teacache(tiny_flux1, rel_l1_thresh=0.3):
        flux1_generate(seed=7)
        flux1_generate(seed=8)
    assert sum(issubclass(w.category, teacache.RecipeMismatchWarning) for w in caught) == 1
    # raised in a callback of mflux's loop, it names the line that called generate_image, not teacache or mflux
    (where,) = [w.filename for w in caught if issubclass(w.category, teacache.RecipeMismatchWarning)]
    assert not where.startswith(str(Path(teacache.__file__).parent)) and f"{os.sep}mflux{os.sep}" not in where
    with warnings.catch_warnings():
        warnings.simplefilter("error", teacache.RecipeMismatchWarning)
        with apply_teacache(tiny_flux1, rel_l1_thresh=0.3, coefficients=(1.0, 0.0)):
            flux1_generate(seed=7)  # the user's own coefficients carry no recipe
