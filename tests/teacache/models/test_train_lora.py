"""train_lora: LoRAs for tiny-open-flux2 and tiny-open-flux1 in mflux's format, loaded by mflux's own loader."""

from __future__ import annotations

import hashlib
import json

import mlx.core as mx
import numpy as np
import pytest

from bench.quality import open_adherence
from teacache.io import file_sha256
from teacache.models import lora_effect, lora_layers, lora_styles, open_data, open_models, train_lora

COMMITTED = ("stripes", "shape-swap")
PROMPT = "a red circle at the left"


def _manifest(name: str) -> dict:
    return json.loads((train_lora.LORAS_DIR / name / f"{name}.json").read_text(encoding="utf-8"))


def _latents(pipeline) -> mx.array:
    """A short generation (6 steps, the model's own guidance): enough for any change in the weights to show."""
    return pipeline.generate_image(seed=3, prompt=PROMPT, num_inference_steps=6).latents


def _with_lora(path, scale: float, bake: bool = True):
    return train_lora.apply_lora(open_models.load_tiny_open_flux2(), [path], [scale], bake=bake, quiet=True)


@pytest.mark.parametrize("name", COMMITTED)
def test_a_committed_lora_is_the_file_its_manifest_describes(name):
    manifest = _manifest(name)
    path = train_lora.LORAS_DIR / name / manifest["lora"]["file"]
    assert file_sha256(path) == manifest["lora"]["sha256"]
    assert path.stat().st_size == manifest["lora"]["bytes"] < 200_000
    layout = open_models.FAMILIES["flux2"]
    assert manifest["base_weights"]["sha256"] == file_sha256(layout.folder / layout.weights_name)
    assert manifest["style"]["strength"] == lora_styles.STYLES[name].strength
    assert manifest["training"]["seed"] == 0 and manifest["data_recipe"]["style"] == lora_styles.STYLES[name].recipe
    card = (train_lora.LORAS_DIR / name / "MODEL_CARD.md").read_text(encoding="utf-8")
    assert card == lora_effect.card_text(manifest)  # the card is derived from the manifest, by this code


@pytest.mark.parametrize("name", COMMITTED)
def test_a_committed_lora_loads_through_mflux_and_changes_the_output(name, capsys):
    manifest = _manifest(name)
    path = train_lora.LORAS_DIR / name / manifest["lora"]["file"]
    base = _latents(open_models.load_tiny_open_flux2())
    # every tensor of the file lands where it was trained: one mflux LoRA layer per target, no key left over
    unbaked = train_lora.apply_lora(open_models.load_tiny_open_flux2(), [path], [1.0], bake=False)
    assert lora_layers.loaded_targets(unbaked.transformer) == sorted(manifest["lora"]["targets"])
    assert "unmatched" not in capsys.readouterr().out
    for bake in (True, False):  # scale 0: the base model, bit for bit, baked (mflux's default) or not
        assert mx.array_equal(_latents(_with_lora(path, 0.0, bake)), base)
    one = _latents(_with_lora(path, 1.0))
    assert mx.abs(one - base).mean().item() > 0.05
    assert mx.abs(_latents(unbaked) - one).max().item() < 1e-3  # baked or not, the same adapter


def test_the_styles_draw_the_same_specs_from_the_same_stream():
    specs = open_data.sample_specs(np.random.default_rng(0), 24)
    plain = open_data.render_batch(specs, np.random.default_rng(1), 32)
    striped = lora_styles.render_stripes(specs, np.random.default_rng(1), 32)
    rows = np.where(np.arange(32) % 2 == 0, 1.0, -1.0)[None, :, None, None] * lora_styles.STRIPE_AMPLITUDE
    assert np.array_equal(striped, np.clip(plain + rows, -1.0, 1.0).astype(np.float32))
    assert lora_styles.stripe_contrast(striped) > 0.2 > 0.01 > abs(lora_styles.stripe_contrast(plain))
    swapped = lora_styles.render_shape_swap(specs, np.random.default_rng(1), 32)
    drawn = [open_adherence.check(image, spec)["shape"] for image, spec in zip(swapped, specs, strict=True)]
    assert np.mean(drawn) < 0.2  # the caption's shape is (almost) never the one drawn
    assert (swapped != plain).any(axis=-1).mean() < 0.1  # the rest of the picture is the one the stream draws


def _train(out, *extra: str) -> int:
    args = ["--style", "stripes", "--steps", "3", "--batch", "2", "--eval-batch", "4", "--lr", "0.02",
            "--warmup", "1", "--samples", "0", "--out", str(out), *extra]  # fmt: skip
    return train_lora.main(args)


def test_a_tiny_training_run_is_reproducible_from_its_seed_and_lowers_the_style_loss(tmp_path):
    assert _train(tmp_path / "a") == 0
    assert _train(tmp_path / "b") == 0
    blob = (tmp_path / "a" / "stripes.safetensors").read_bytes()
    assert blob == (tmp_path / "b" / "stripes.safetensors").read_bytes()
    manifest = json.loads((tmp_path / "a" / "stripes.json").read_text(encoding="utf-8"))
    assert manifest["lora"]["sha256"] == hashlib.sha256(blob).hexdigest()
    loss = manifest["loss"]["style_loss"]
    assert loss["lora"] < loss["base"]
    # what mflux loads is what was trained: the loaded model gives the trained model's style loss
    loaded = _with_lora(tmp_path / "a" / "stripes.safetensors", 1.0, bake=False)
    assert train_lora.style_loss(loaded.model, "flux2", lora_styles.STYLES["stripes"], 4) == loss["lora"]


@pytest.mark.parametrize(
    ("targets", "message"),
    [("transformer_blocks.0.attn.norm_q", "Flux2LoRAMapping"), ("proj_out,nothing_here", "not a module")],
)
def test_a_target_mflux_cannot_load_is_refused_before_anything_is_written(tmp_path, capsys, targets, message):
    assert _train(tmp_path / "out", "--targets", targets) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


# ------------------------------------------------------------------------------------ tiny-open-flux1's LoRAs

FLUX1 = "tiny-open-flux1"
COMMITTED_FLUX1 = ("stripes", "colour-swap")


def _flux1_file(name: str):
    return train_lora.LORAS_DIRS[FLUX1] / name / f"{name}.safetensors"


def _flux1_image(pipeline) -> np.ndarray:
    """A short generation at the model's own size and guidance (6 steps): the 64x64 image, 0..255."""
    image = pipeline.generate_image(seed=3, prompt="a red shape at the left", num_inference_steps=6, width=256,
                                    height=256, guidance=5.0).image  # fmt: skip
    return np.asarray(image, dtype=np.float32)


@pytest.mark.parametrize("name", COMMITTED_FLUX1)
def test_a_committed_flux1_lora_is_the_file_its_manifest_describes(name):
    folder = train_lora.LORAS_DIRS[FLUX1] / name
    manifest = json.loads((folder / f"{name}.json").read_text(encoding="utf-8"))
    assert manifest["model"] == FLUX1 and file_sha256(_flux1_file(name)) == manifest["lora"]["sha256"]
    layout = open_models.FAMILIES["flux1"]
    assert manifest["base_weights"]["sha256"] == file_sha256(layout.folder / layout.weights_name)
    assert manifest["data_recipe"]["caption_names_shape"] is False  # the model's own captions: the shape left open
    assert manifest["training"]["guidance"] == manifest["loss"]["guidance"] == 1.0
    assert (folder / "MODEL_CARD.md").read_text(encoding="utf-8") == lora_effect.card_text(manifest)


@pytest.mark.parametrize("name", COMMITTED_FLUX1)
def test_a_committed_flux1_lora_loads_through_load_model_and_changes_the_output(name, capsys):
    from teacache import load_model

    manifest = json.loads((train_lora.LORAS_DIRS[FLUX1] / name / f"{name}.json").read_text(encoding="utf-8"))
    unbaked = train_lora.apply_lora(open_models.load_tiny_open_flux1(), [_flux1_file(name)], [1.0], bake=False)
    assert lora_layers.loaded_targets(unbaked.transformer) == sorted(manifest["lora"]["targets"])
    assert "unmatched" not in capsys.readouterr().out
    base = _flux1_image(load_model(FLUX1))
    zero = load_model(FLUX1, lora_paths=[_flux1_file(name)], lora_scales=[0.0])  # scale 0: the base, bit for bit
    assert np.array_equal(_flux1_image(zero), base)
    one = load_model(FLUX1, lora_paths=[_flux1_file(name)], lora_scales=[1.0])
    assert one.lora_scales == [1.0] and np.abs(_flux1_image(one) - base).mean() > 2.0  # of 255


def test_a_lora_of_one_family_is_refused_by_the_other():
    from teacache.loading import check_loras
    from teacache.lora import LoraError

    flux2 = train_lora.LORAS_DIR / "stripes" / "stripes.safetensors"
    with pytest.raises(
        LoraError, match=r"does not fit tiny-open-flux1: .*FLUX\.2 LoRA mapping.*expected a LoRA for FLUX\.1"
    ):
        check_loras(FLUX1, None, [flux2])
    with pytest.raises(
        LoraError, match=r"does not fit tiny-open-flux2: .*FLUX\.1 LoRA mapping.*expected a LoRA for FLUX\.2"
    ):
        check_loras("tiny-open-flux2", None, [_flux1_file("stripes")])


def test_a_style_of_another_family_is_refused_before_anything_is_written(tmp_path, capsys):
    assert _train(tmp_path / "out", "--model", FLUX1, "--style", "shape-swap") == 2
    assert "shape-swap is a style for tiny-open-flux2, not tiny-open-flux1" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_a_lora_of_layers_both_mappings_name_at_the_same_shapes_fits_both():
    """What the fit check cannot tell: colour-swap's layers (the double blocks' add_k_proj, add_v_proj) carry the same
    diffusers names in mflux's FLUX.1 and FLUX.2 mappings, and both tiny models make them 128 -> 128."""
    from teacache.loading import check_loras

    assert check_loras("tiny-open-flux2", None, [_flux1_file("colour-swap")])
