"""tiny-scenes: committed weights, data recipe, the training forward against mflux's, and the pipeline."""

from __future__ import annotations

import json

import mlx.core as mx
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from mflux.models.common.config.config import Config
from mflux.models.flux.latent_creator.flux_latent_creator import FluxLatentCreator
from mflux.models.flux.variants.txt2img.flux import Flux1
from safetensors.numpy import load_file, save_file

import teacache
from teacache.io import file_sha256
from teacache.models import scenes, scenes_data
from teacache.models.scenes import WeightsError

CAPTION = "a big red striped circle left of a small blue square on a white background"


@pytest.fixture(scope="module")
def pipe() -> Flux1:
    return teacache.load_model("tiny-scenes")


@pytest.fixture
def quiet_progress(monkeypatch):
    monkeypatch.setenv("TQDM_DISABLE", "1")


def test_weights_match_manifest_and_fit_the_budget():
    manifest = json.loads(scenes.DEFAULT_MANIFEST.read_text())
    assert file_sha256(scenes.DEFAULT_WEIGHTS) == manifest["weights"]["sha256"]
    assert scenes.DEFAULT_WEIGHTS.stat().st_size == manifest["weights"]["bytes"] <= 10 * 1000 * 1000
    assert manifest["data_recipe"] == json.loads(json.dumps(scenes_data.recipe()))
    assert manifest["training"]["provenance"]["command"].startswith("python -m teacache.models.train_scenes")


def test_loads_as_mflux_flux1_in_float32(pipe):
    from mflux.models.flux.model.flux_transformer.transformer import Transformer

    assert type(pipe) is Flux1 and type(pipe.transformer) is Transformer
    assert pipe.transformer.x_embedder.weight.dtype == mx.float32
    assert pipe.teacache_variant == "tiny-scenes"


FOUR_HEADS = {**scenes.ARCHITECTURE, "transformer": {**scenes.ARCHITECTURE["transformer"], "heads": 4, "head_dim": 32}}


@pytest.mark.parametrize("architecture", [scenes.ARCHITECTURE, FOUR_HEADS], ids=["1x128", "4x32"])
def test_training_forward_is_the_pipelines_transformer_call(architecture):
    """What train_scenes optimises is what Flux1.generate_image calls, step for step and in a batch, at
    FLUX.1's head width and at 4 heads of 32 (the q/k norms and RoPE's axes resized with it)."""
    model = scenes.TinyScenesModel(architecture, seed=3)
    pipeline = scenes.as_pipeline(model)
    config = Config(width=256, height=256, guidance=2.5, scheduler="linear", model_config=pipeline.model_config,
                    num_inference_steps=10)  # fmt: skip
    latents = mx.random.normal((1, 256, 64), key=mx.random.key(0))
    sequence, pooled = pipeline.prompt_cache[CAPTION]
    ids = mx.array(scenes_data.tokenize(CAPTION))[None]
    rotary = scenes.rotary_embeddings(model.transformer)
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
    one, four = scenes.TinyScenesModel(seed=0), scenes.TinyScenesModel(FOUR_HEADS, seed=0)
    attention = four.transformer.transformer_blocks[0].attn
    assert (attention.num_heads, attention.head_dimension, attention.norm_q.weight.shape) == (4, 32, (32,))
    assert sum(four.transformer.pos_embed.axes_dim) == 32
    assert 0 < scenes.parameter_count(one) - scenes.parameter_count(four) < 0.01 * scenes.parameter_count(one)


def test_corrupted_copy_is_refused(tmp_path):
    copy = tmp_path / "tiny-scenes.safetensors"
    blob = bytearray(scenes.DEFAULT_WEIGHTS.read_bytes())
    blob[len(blob) // 2] ^= 0xFF
    copy.write_bytes(bytes(blob))
    (tmp_path / "tiny-scenes.json").write_text(scenes.DEFAULT_MANIFEST.read_text())
    with pytest.raises(WeightsError, match=r"does not match its manifest \(sha256"):
        scenes.load_tiny_scenes(copy)


def test_wrong_tensor_is_named(tmp_path):
    tensors = load_file(str(scenes.DEFAULT_WEIGHTS))
    tensors["transformer.proj_out.weight"] = tensors["transformer.proj_out.weight"][:32].copy()
    path = tmp_path / "tiny-scenes.safetensors"
    save_file(tensors, str(path))
    manifest = json.loads(scenes.DEFAULT_MANIFEST.read_text())
    manifest["weights"]["sha256"] = file_sha256(path)
    (tmp_path / "tiny-scenes.json").write_text(json.dumps(manifest))
    with pytest.raises(WeightsError, match="first mismatch.*proj_out"):
        scenes.load_tiny_scenes(path)


def test_generates_64px_through_flux1_and_repeats_itself(pipe, quiet_progress):
    first = pipe.generate_image(seed=2, prompt=CAPTION, num_inference_steps=3, height=256, width=256)
    second = pipe.generate_image(seed=2, prompt=CAPTION, num_inference_steps=3, height=256, width=256)
    assert first.image.size == (64, 64)
    assert np.array_equal(np.asarray(first.image), np.asarray(second.image))


def test_another_size_is_named(pipe, quiet_progress):
    with pytest.raises(ValueError, match="height = width = 256"):
        pipe.generate_image(seed=0, prompt=CAPTION, num_inference_steps=1, height=128, width=128)


def test_unknown_word_is_named(pipe):
    with pytest.raises(ValueError, match="unknown word 'teapot'"):
        pipe.generate_image(seed=0, prompt="a teapot", num_inference_steps=1, height=256, width=256)


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 2**32 - 1), st.sampled_from(["train", "held_out"]))
def test_captions_round_trip(seed, split):
    (spec,) = scenes_data.sample_specs(np.random.default_rng(seed), 1, split)
    assert scenes_data.parse_prompt(spec.prompt) == spec
    assert spec.held_out == (split == "held_out")
    assert np.count_nonzero(scenes_data.tokenize(spec.prompt)) <= scenes_data.TEXT_LEN


def test_held_out_split_is_disjoint_and_about_a_tenth():
    train, held = scenes_data.split_combinations("train"), scenes_data.split_combinations("held_out")
    assert not set(train) & set(held) and len(train) + len(held) == len(scenes_data.combinations())
    assert 0.07 < len(held) / len(scenes_data.combinations()) < 0.13


def test_bad_captions_say_what_is_expected():
    with pytest.raises(ValueError, match="expected the form"):
        scenes_data.parse_prompt("a big red circle on a white background")
    with pytest.raises(ValueError, match="colours must differ"):
        scenes_data.parse_prompt("a big red circle left of a small red square on a white background")


def test_latent_layout_is_mflux_packing_and_round_trips():
    rng = np.random.default_rng(0)
    images = scenes_data.render_batch(scenes_data.sample_specs(rng, 2), rng)
    latents = scenes_data.to_latents(images)
    np.testing.assert_array_equal(scenes_data.from_latents(latents).transpose(0, 2, 3, 1), images)
    assert not latents[:, 12:].any()
    theirs = FluxLatentCreator.pack_latents(mx.array(latents[:1]), height=256, width=256)
    np.testing.assert_array_equal(scenes_data.pack(latents[:1]), np.array(theirs))


def test_recording_needs_no_packaged_calibration_and_gating_does(pipe, monkeypatch):
    """A variant without packaged coefficients can be recorded (the first step of fitting it)."""
    import dataclasses

    from teacache import api, variants

    uncalibrated = dataclasses.replace(variants.get("tiny-scenes"), coefficients=None)
    monkeypatch.setattr(api.variants, "get", lambda name: uncalibrated)
    with teacache.apply_teacache(pipe, calibrate=True) as handle:
        assert handle.config.rel_l1_thresh == 0.0
    with pytest.raises(ValueError, match="has no packaged calibration"):
        teacache.apply_teacache(pipe, rel_l1_thresh=0.1)


def test_training_writes_a_model_the_loader_accepts_and_repeats_itself(tmp_path, quiet_progress):
    from teacache.models import train_scenes

    argv = ["--steps", "2", "--batch", "2", "--samples", "0", "--no-compile", "--seed", "5"]
    for run in ("a", "b"):
        assert train_scenes.main([*argv, "--out", str(tmp_path / run)]) == 0
    manifests = [json.loads((tmp_path / run / "tiny-scenes.json").read_text()) for run in ("a", "b")]
    assert manifests[0]["weights"]["sha256"] == manifests[1]["weights"]["sha256"]  # same seed, same weights
    assert manifests[0]["training"]["steps"] == 2 and len(manifests[0]["training"]["loss_per_10_steps"]) == 1
    assert (tmp_path / "a" / "MODEL_CARD.md").read_text().startswith("# tiny-scenes")
    pipe = scenes.load_tiny_scenes(tmp_path / "a" / "tiny-scenes.safetensors")
    assert pipe.generate_image(seed=0, prompt=CAPTION, num_inference_steps=2, height=256, width=256).image.size == (
        64,
        64,
    )


def test_the_weights_file_of_the_same_weights_has_one_hash(tmp_path):
    """safetensors writes a metadata dict in no fixed order; the header keeps one key so the hash holds."""
    from teacache.models.training import save_weights

    model = scenes.TinyScenesModel(seed=1)
    hashes = {save_weights(model, tmp_path / f"w{i}.safetensors", "tiny", 1)["sha256"] for i in range(8)}
    assert len(hashes) == 1
