"""FLUX.1 adapter on the embedded trained model: the four oracles with the measured tolerances.

mflux's ``Flux1.generate_image`` calls its transformer directly; TeaCache swaps in a proxy and checks the
proxy's own path against a measured tolerance (oracle 3), threshold 0 bit-exact (oracle 2), and the default
threshold's skips and image quality against the measured band and floors (oracle 4). A test of a measured
bound runs on (prompt, seed) pairs the bound was measured on (``measured_case``), so the bound covers it.
"""

from __future__ import annotations

import mlx.core as mx
import pytest

import teacache
from bench.quality.metrics import image_metrics, latent_metrics
from bench.tolerances.derive import check_run
from calib.run.generation import generate as generate_with_image
from calib.run.prompts import TINY_SCENES_FAST
from teacache import apply_teacache
from teacache.adapters.flux1 import TeaCacheFlux1Transformer
from tests.conftest import make_generate
from tests.teacache.adapters import measured_gate, measured_settings
from tests.tolerances import measured_case

VARIANT = "tiny-scenes"
PROMPT = TINY_SCENES_FAST["scenes-00"]
SIZE = 256  # the nominal size; the image is 64x64


@pytest.fixture(scope="module")
def settings(tolerances):
    return measured_settings(tolerances, VARIANT)


@pytest.fixture(scope="module")
def scenes(settings):
    model = teacache.load_model(VARIANT)
    generate = make_generate(
        model, num_inference_steps=settings["steps"], guidance=settings["guidance"], height=SIZE, width=SIZE
    )
    return model, generate


def test_threshold_zero_swaps_nothing_and_is_bit_exact(scenes):
    model, generate = scenes
    original = model.transformer
    before = generate(PROMPT, seed=1)
    with apply_teacache(model, rel_l1_thresh=0.0) as handle:
        assert model.transformer is original
        wrapped = generate(PROMPT, seed=1)
    assert mx.array_equal(before, wrapped).item() and mx.array_equal(before, generate(PROMPT, seed=1)).item()
    assert handle.stats.skipped == 0 and handle.stats.computed == 28


def test_proxy_that_computes_every_step_stays_within_the_measured_tolerance(scenes, settings, tolerances):
    model, generate = scenes
    prompt, seed = measured_case(tolerances, VARIANT)
    vanilla = generate(prompt, seed=seed)
    gate = {**measured_gate(settings), "skip_first_n_steps": settings["steps"]}
    with pytest.warns(teacache.NeverSkipsWarning), apply_teacache(model, **gate) as handle:
        assert isinstance(model.transformer, TeaCacheFlux1Transformer)
        wrapped = generate(prompt, seed=seed)
    assert handle.stats.skipped == 0 and not isinstance(model.transformer, TeaCacheFlux1Transformer)
    metrics = latent_metrics(wrapped, vanilla)
    run = {
        "proxy_noop_bit_exact": mx.array_equal(wrapped, vanilla).item(),
        "proxy_noop_cosine": metrics["cosine"],
        "proxy_noop_max_abs": metrics["max_abs"],
    }
    assert check_run(tolerances, VARIANT, run) == {"proxy_noop": True}, run


def test_restore_is_bit_exact_around_a_skipping_run(scenes, settings):
    model, generate = scenes
    before = generate(PROMPT, seed=3)
    with apply_teacache(model, **measured_gate(settings)) as handle:
        cached = generate(PROMPT, seed=3)
        assert handle.cache_bytes > 0
    assert handle.stats.skipped > 0 and not mx.array_equal(before, cached).item()
    assert handle.cache_bytes == 0 and mx.array_equal(before, generate(PROMPT, seed=3)).item()


@pytest.mark.parametrize("case", range(len(TINY_SCENES_FAST)), ids=lambda i: f"measured-pair-{i}")
def test_skips_and_quality_at_the_default_threshold_are_inside_the_measured_bounds(scenes, settings, tolerances, case):
    model, _ = scenes
    prompt, seed = measured_case(tolerances, VARIANT, case)
    args = (prompt, seed, settings["steps"], SIZE, SIZE, settings["guidance"])
    vanilla = generate_with_image(model, *args)
    with apply_teacache(model, **measured_gate(settings)) as handle:
        cached = generate_with_image(model, *args)
    run = {"skipped": handle.stats.skipped, **image_metrics(cached.image, vanilla.image)}
    verdict = check_run(tolerances, VARIANT, run)
    assert verdict == {"skip_band": True, "ssim_floor": True, "psnr_floor": True}, (run, verdict)
