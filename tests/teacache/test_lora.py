"""``load_model(..., lora_paths=, lora_scales=)``: LoRA files applied by mflux's own loader to the embedded models,
and every file that does not fit the model refused in one line before it loads."""

from __future__ import annotations

import inspect
import re

import mlx.core as mx
import numpy as np
import pytest

from calib.run.prompts import load_prompts
from teacache import load_model, variants
from teacache.errors import InputError
from teacache.io import file_sha256
from teacache.loading import check_loras
from teacache.lora import LoraError, Loras
from tests.lora_files import FLUX1_LAYERS, FLUX2_LAYERS, fitting_lora, write_lora

MODELS = {"tiny-open-flux2": FLUX2_LAYERS, "tiny-flux1": FLUX1_LAYERS}


@pytest.fixture(scope="module")
def base():
    return {name: load_model(name) for name in MODELS}


def _layer(model, layer: str):
    module = model.transformer
    for part in layer.split("."):
        module = module[int(part)] if part.isdigit() else getattr(module, part)
    return module


def _latents(model, steps: int = 2):
    """Final latents of a short generation at the model's own size (tiny-flux1: 32x32)."""
    spec = variants.get(variants.variant_of(model))
    prompt = next(iter(load_prompts(spec.prompt_set).values()))
    side = 32 if spec.name == "tiny-flux1" else spec.generation.width
    kept = {}

    class Last:
        def call_after_loop(self, seed, prompt, latents, config) -> None:
            kept["latents"] = latents

    model.callbacks.register(Last())
    model.generate_image(seed=0, prompt=prompt, num_inference_steps=steps, width=side, height=side,
                         guidance=spec.generation.guidance)  # fmt: skip
    return np.array(kept["latents"].astype(mx.float32))


@pytest.mark.parametrize("name", list(MODELS))
def test_a_lora_loads_through_mflux_into_the_weights_and_changes_the_output(name, base, tmp_path):
    path = tmp_path / "style.safetensors"
    tensors = fitting_lora(path, base[name], MODELS[name])
    model = load_model(name, lora_paths=[path], lora_scales=[0.5])
    assert model.lora_paths == [str(path)] and model.lora_scales == [0.5]  # as mflux's constructors set them
    for layer in MODELS[name]:  # baked as mflux bakes: W + scale * B @ A
        down = tensors[f"transformer.{layer}.lora_A.weight"]
        up = tensors[f"transformer.{layer}.lora_B.weight"]
        delta = np.array(_layer(model, layer).weight) - np.array(_layer(base[name], layer).weight)
        np.testing.assert_allclose(delta, 0.5 * up @ down, atol=1e-5)
    assert not np.array_equal(_latents(model), _latents(load_model(name)))


def test_loras_are_named_by_their_sha256_and_scales(base, tmp_path):
    path = tmp_path / "a.safetensors"
    fitting_lora(path, base["tiny-flux1"], FLUX1_LAYERS)
    loras = Loras.of([path])
    assert loras.identity() == [{"sha256": file_sha256(path), "scale": 1.0}]  # 1.0 where no scale is given
    assert loras.provenance() == [{"path": str(path), "sha256": file_sha256(path), "scale": 1.0}]
    assert re.fullmatch(r"a\.safetensors \(sha256 [0-9a-f]{12}, scale 1\)", loras.describe())
    assert not Loras.of() and Loras.of().kwargs() == {} and Loras.of().recorded() == {}


def _files(tmp_path, base) -> None:
    """A LoRA of each family, one of other shapes, a corrupt one and one under another suffix, in tmp_path."""
    fitting_lora(tmp_path / "flux2.safetensors", base["tiny-open-flux2"], FLUX2_LAYERS)
    fitting_lora(tmp_path / "flux1.safetensors", base["tiny-flux1"], FLUX1_LAYERS)
    write_lora(tmp_path / "narrow.safetensors", {"transformer_blocks.0.attn.to_q": (96, 128)})
    (tmp_path / "junk.safetensors").write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00{not json")
    (tmp_path / "lora.bin").write_bytes((tmp_path / "flux2.safetensors").read_bytes())


REFUSED = {  # model, lora_paths, lora_scales, what the line says
    "another family's": ("tiny-open-flux2", ["flux1.safetensors"], None,
                         r"lora_paths: .*flux1\.safetensors does not fit tiny-open-flux2: 2 of its keys name layers "
                         r"of mflux's FLUX\.1 LoRA mapping, not FLUX\.2's .*expected a LoRA for FLUX\.2"),
    "another family's, other way": ("tiny-flux1", ["flux2.safetensors"], None, r"expected a LoRA for FLUX\.1"),
    "other shapes": ("tiny-open-flux2", ["narrow.safetensors"], None,
                     r"layer transformer_blocks\.0\.attn\.to_q maps 128 -> 128 features in tiny-open-flux2; the "
                     r"LoRA's down and up matrices give \(96, 4\) and \(4, 128\) \(expected \(128, r\)"),
    "not safetensors": ("tiny-open-flux2", ["junk.safetensors"], None, r"is not a readable safetensors file"),
    "another suffix": ("tiny-open-flux2", ["lora.bin"], None, r"lora\.bin is not a \.safetensors file"),
    "missing": ("tiny-open-flux2", ["nowhere.safetensors"], None, r"nowhere\.safetensors does not exist"),
    "a folder": ("tiny-open-flux2", ["."], None, r"is not a file"),
    "a nan scale": ("tiny-open-flux2", ["flux2.safetensors"], [float("nan")], r"lora_scales: expected finite"),
    "an infinite scale": ("tiny-open-flux2", ["flux2.safetensors"], [float("inf")], r"lora_scales: expected finite"),
    "a word for a scale": ("tiny-open-flux2", ["flux2.safetensors"], ["big"], r"lora_scales: expected finite"),
    "two scales for one file": ("tiny-open-flux2", ["flux2.safetensors"], [1.0, 0.5],
                                r"lora_scales: 2 scale\(s\) for 1 LoRA file\(s\)"),
    "scales without files": ("tiny-open-flux2", [], [1.0], r"lora_scales: given without LoRA files"),
}  # fmt: skip


@pytest.mark.parametrize("case", REFUSED, ids=list(REFUSED))
def test_a_lora_that_does_not_fit_is_refused_in_one_line_before_the_model_loads(case, base, tmp_path, monkeypatch):
    _files(tmp_path, base)
    monkeypatch.chdir(tmp_path)
    name, paths, scales, says = REFUSED[case]
    load = lambda: load_model(name, lora_paths=paths, lora_scales=scales)  # noqa: E731
    for check in (load, lambda: check_loras(name, None, paths, scales)):
        with pytest.raises(LoraError) as refused:
            check()
        message = str(refused.value)
        assert re.search(says, message) and "\n" not in message, message
        assert refused.value.exit_status == 2 and isinstance(refused.value, InputError)


def test_a_released_model_s_layers_are_checked_without_its_weights(base, tmp_path, monkeypatch):
    """flux1-dev's transformer is built with its initial weights left lazy: nothing is downloaded or evaluated."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    path = tmp_path / "tiny.safetensors"
    fitting_lora(path, base["tiny-flux1"], FLUX1_LAYERS)
    with pytest.raises(LoraError, match=r"maps 3072 -> 12288 features in flux1-dev.*expected \(3072, r\)"):
        check_loras("flux1-dev", None, [path])


@pytest.mark.parametrize("family", [f.name for f in variants.families()])
def test_each_family_checks_loras_by_the_mapping_its_mflux_pipeline_applies(family):
    """The mapping the registry names is the one mflux's initializer of the family's pipeline loads LoRAs with."""
    fam = variants.family(family)
    pipeline = variants.attribute(fam.pipeline)
    mapping = variants.attribute(fam.lora_mapping)
    initializers = [v for k, v in vars(inspect.getmodule(pipeline)).items() if k.endswith("Initializer")]
    assert initializers, pipeline
    assert any(f"{mapping.__name__}.get_mapping()" in inspect.getsource(i) for i in initializers)
