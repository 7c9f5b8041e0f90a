"""FLUX.2 adapter on the embedded trained model: the four oracles with the measured tolerances.

mflux's FLUX.2 predict is ``mx.compile``d and TeaCache swaps in one whose transformer calls run in compiled
segments with the decision between them; the proxy's own path is checked against a measured tolerance
(oracle 3; bit-exact on this CPU, seeds 0-2, and on the H200 for the full-size Klein base 4B). One
measured MLX behaviour shapes the fixture: the first compiled run after an eager (uncompiled) run in a
process can differ from earlier compiled runs in the last bits, then stays stable; so every comparison
here starts after one TeaCache warm-up run. A test of a measured bound runs on (prompt, seed) pairs the bound
was measured on (``measured_case``), so the bound covers it.
"""

from __future__ import annotations

import mlx.core as mx
import pytest

import teacache
from bench.quality.metrics import image_metrics, latent_metrics
from bench.tolerances.derive import check_run
from calib.run.prompts import TINY_SHAPES_FAST
from teacache import apply_teacache
from teacache.adapters.flux2 import TeaCacheFlux2Transformer
from teacache.core import is_applied
from teacache.gate import GateConfig
from tests.conftest import make_generate
from tests.teacache.adapters import measured_gate, measured_settings
from tests.tolerances import measured_case

VARIANT = "tiny-shapes"
PROMPT = TINY_SHAPES_FAST["shapes-00"]
GATE_KEYWORDS = ("rel_l1_thresh", "skip_first_n_steps", "skip_last_n_steps", "max_consecutive_skips")


@pytest.fixture(scope="module")
def settings(tolerances):
    return measured_settings(tolerances, VARIANT)


@pytest.fixture(scope="module")
def shapes(settings):
    model = teacache.load_model(VARIANT)
    generate = make_generate(model, num_inference_steps=settings["steps"], guidance=settings["guidance"])
    from calib.run.generation import generate as generate_with_image

    with apply_teacache(model, rel_l1_thresh=settings["threshold"]):
        generate(PROMPT)  # warm-up: see the module docstring
    generate(PROMPT)
    return model, generate, generate_with_image


def test_threshold_zero_swaps_nothing_and_is_bit_exact(shapes):
    model, generate, _ = shapes
    original = model.transformer
    before = generate(PROMPT, seed=1)
    with apply_teacache(model, rel_l1_thresh=0.0) as handle:
        assert model.transformer is original and "_predict" not in vars(model)
        wrapped = generate(PROMPT, seed=1)
    after = generate(PROMPT, seed=1)
    assert mx.array_equal(before, wrapped).item() and mx.array_equal(before, after).item()
    assert handle.stats.skipped == 0 and handle.stats.computed == 28


def test_proxy_that_computes_every_step_stays_within_the_measured_tolerance(shapes, settings, tolerances):
    model, generate, _ = shapes
    prompt, seed = measured_case(tolerances, VARIANT)
    vanilla = generate(prompt, seed=seed)
    gate = {**measured_gate(settings), "skip_first_n_steps": settings["steps"]}
    with pytest.warns(teacache.NeverSkipsWarning), apply_teacache(model, **gate) as handle:
        assert isinstance(model.transformer, TeaCacheFlux2Transformer) and "_predict" in vars(model)
        wrapped = generate(prompt, seed=seed)
    assert handle.stats.skipped == 0
    assert "_predict" not in vars(model) and not isinstance(model.transformer, TeaCacheFlux2Transformer)
    metrics = latent_metrics(wrapped, vanilla)
    run = {
        "proxy_noop_bit_exact": mx.array_equal(wrapped, vanilla).item(),
        "proxy_noop_cosine": metrics["cosine"],
        "proxy_noop_max_abs": metrics["max_abs"],
    }
    assert check_run(tolerances, VARIANT, run) == {"proxy_noop": True}, run


def test_restore_is_bit_exact_around_a_skipping_run(shapes, settings):
    model, generate, _ = shapes
    before = generate(PROMPT, seed=3)
    with apply_teacache(model, **measured_gate(settings)) as handle:
        cached = generate(PROMPT, seed=3)
        assert handle.cache_bytes > 0 and handle.cached_branches == [0]
    assert handle.stats.skipped > 0 and not mx.array_equal(before, cached).item()
    assert handle.cache_bytes == 0 and handle.cached_branches == []  # restore() drops the cache
    assert mx.array_equal(before, generate(PROMPT, seed=3)).item()


def test_keywords_left_out_take_the_variants_and_the_gate_configs_defaults(shapes, settings):
    model, _, _ = shapes
    spec = teacache.variants.get(VARIANT)
    with apply_teacache(model, rel_l1_thresh=0.2) as handle:
        assert handle.config == GateConfig(0.2, spec.rescale(), skip_first_n_steps=spec.skip_first_n_steps)
    with apply_teacache(model, rel_l1_thresh=0.2, skip_last_n_steps=3, max_consecutive_skips=2) as handle:
        assert (handle.config.skip_last_n_steps, handle.config.max_consecutive_skips) == (3, 2)


@pytest.mark.parametrize("keyword", GATE_KEYWORDS)
def test_a_config_with_any_gate_keyword_is_refused_even_at_its_default_value(shapes, keyword):
    model, _, _ = shapes
    config = GateConfig(0.2, teacache.variants.get(VARIANT).rescale())
    with pytest.raises(ValueError, match=f"config: pass either config= or the gate keywords, not both .*{keyword}"):
        apply_teacache(model, config=config, **{keyword: getattr(config, keyword)})
    assert not is_applied(model)


@pytest.mark.parametrize("case", range(len(TINY_SHAPES_FAST)), ids=lambda i: f"measured-pair-{i}")
def test_skips_and_quality_at_the_default_threshold_are_inside_the_measured_bounds(shapes, settings, tolerances, case):
    model, _, generate_with_image = shapes
    prompt, seed = measured_case(tolerances, VARIANT, case)
    args = (prompt, seed, settings["steps"], 32, 32, settings["guidance"])
    vanilla = generate_with_image(model, *args)
    with apply_teacache(model, **measured_gate(settings)) as handle:
        cached = generate_with_image(model, *args)
    run = {"skipped": handle.stats.skipped, **image_metrics(cached.image, vanilla.image)}
    verdict = check_run(tolerances, VARIANT, run)
    assert verdict == {"skip_band": True, "ssim_floor": True, "psnr_floor": True}, (run, verdict)


def test_cfg_takes_one_decision_per_step_and_keeps_a_residual_per_branch(shapes, settings):
    model, _, generate_with_image = shapes
    with apply_teacache(model, **measured_gate(settings)) as handle:
        generate_with_image(model, PROMPT, 0, settings["steps"], 32, 32, 2.0)
        assert handle.cached_branches == [0, 1]
    stats = handle.stats
    assert stats.computed + stats.skipped == settings["steps"] and len(stats.log) == settings["steps"]
    assert stats.skipped > 0
