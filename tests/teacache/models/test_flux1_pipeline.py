"""The FLUX.1 layout of tiny-open-flux1: pixels as mflux's latent, the training forward against mflux's, the decoder."""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest
from mflux.models.common.config.config import Config
from mflux.models.flux.latent_creator.flux_latent_creator import FluxLatentCreator

from teacache.models import flux1_latents, flux1_pipeline, open_data, open_models

LAYOUT = open_models.FAMILIES["flux1"]
CAPTION = "a red shape at the left"
ONE_HEAD = LAYOUT.architecture
FOUR_HEADS = {**ONE_HEAD, "transformer": {**ONE_HEAD["transformer"], "heads": 4, "head_dim": 32}}


def _tokenize(prompt: str) -> np.ndarray:
    return open_data.tokenize(prompt, LAYOUT.name, LAYOUT.captions)


@pytest.mark.parametrize("architecture", [ONE_HEAD, FOUR_HEADS], ids=["1x128", "4x32"])
def test_training_forward_is_the_pipelines_transformer_call(architecture):
    """What train_open optimises is what Flux1.generate_image calls, step for step and in a batch, at
    FLUX.1's head width and at 4 heads of 32 (the q/k norms and RoPE's axes resized with it)."""
    model = flux1_pipeline.TinyFlux1Model(architecture, seed=3)
    pipeline = flux1_pipeline.as_pipeline(model, None, LAYOUT.name, _tokenize)
    config = Config(width=256, height=256, guidance=2.5, scheduler="linear", model_config=pipeline.model_config,
                    num_inference_steps=10)  # fmt: skip
    latents = mx.random.normal((1, 256, 64), key=mx.random.key(0))
    sequence, pooled = pipeline.prompt_cache[CAPTION]
    ids = mx.array(_tokenize(CAPTION))[None]
    rotary = open_models.flux1_rotary(model.transformer)
    for t in (0, 4, 9):
        expected = pipeline.transformer(t=t, config=config, hidden_states=latents, prompt_embeds=sequence,
                                        pooled_prompt_embeds=pooled)  # fmt: skip
        sigma = config.scheduler.sigmas[t : t + 1]
        assert mx.array_equal(model.velocity(latents, ids, sigma, mx.array([2.5]), rotary), expected)
    model.set_batch_size(3)
    batched = model.velocity(
        mx.concatenate([latents] * 3), mx.concatenate([ids] * 3), mx.broadcast_to(sigma, (3,)),
        mx.array([2.5] * 3), rotary,
    )  # fmt: skip
    np.testing.assert_allclose(np.array(batched[2:3]), np.array(expected), rtol=0, atol=1e-5)


def test_four_heads_of_32_keep_the_width_and_size():
    """4 heads of 32 is the same 128-wide transformer (same Linears) with 4 attention patterns per token."""
    one, four = flux1_pipeline.TinyFlux1Model(ONE_HEAD, seed=0), flux1_pipeline.TinyFlux1Model(FOUR_HEADS, seed=0)
    attention = four.transformer.transformer_blocks[0].attn
    assert (attention.num_heads, attention.head_dimension, attention.norm_q.weight.shape) == (4, 32, (32,))
    assert sum(four.transformer.pos_embed.axes_dim) == 32
    count = open_models.parameter_count
    assert 0 < count(one) - count(four) < 0.01 * count(one)


def test_latent_layout_is_mflux_packing_and_round_trips():
    size = flux1_latents.IMAGE_SIZE
    images = np.random.default_rng(0).uniform(-1, 1, (2, size, size, 3)).astype(np.float32)
    latents = flux1_latents.to_latents(images)
    np.testing.assert_array_equal(flux1_latents.from_latents(latents).transpose(0, 2, 3, 1), images)
    assert not latents[:, 12:].any()
    nominal = flux1_latents.NOMINAL_SIZE
    theirs = FluxLatentCreator.pack_latents(mx.array(latents[:1]), height=nominal, width=nominal)
    np.testing.assert_array_equal(flux1_latents.pack(latents[:1]), np.array(theirs))


def test_another_size_is_named(monkeypatch):
    monkeypatch.setenv("TQDM_DISABLE", "1")
    pipe = flux1_pipeline.as_pipeline(flux1_pipeline.TinyFlux1Model(ONE_HEAD), None, LAYOUT.name, _tokenize)
    with pytest.raises(ValueError, match="height = width = 256"):
        pipe.generate_image(seed=0, prompt=CAPTION, num_inference_steps=1, height=128, width=128)


def test_the_sampling_record_is_the_committed_models():
    """The schedule train_open writes into a manifest is the one the committed tiny-open-flux1 was trained with."""
    import json

    manifest = json.loads((LAYOUT.folder / LAYOUT.manifest_name).read_text())
    assert open_models.sampling_record("flux1") == manifest["sampling"]
