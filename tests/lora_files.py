"""Small LoRA files in mflux's format, written by the tests that load them: the keys and layout mflux's trainers save
(``transformer.<layer>.lora_A.weight``: rank x inputs; ``transformer.<layer>.lora_B.weight``: outputs x rank)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from safetensors.numpy import save_file

RANK = 4


def layer_sizes(model, layers: tuple[str, ...]) -> dict[str, tuple[int, int]]:
    """(inputs, outputs) of each named linear layer of ``model``'s transformer."""
    sizes = {}
    for layer in layers:
        module = model.transformer
        for part in layer.split("."):
            module = module[int(part)] if part.isdigit() else getattr(module, part)
        outputs, inputs = module.weight.shape
        sizes[layer] = (int(inputs), int(outputs))
    return sizes


def write_lora(path: Path, sizes: dict[str, tuple[int, int]], seed: int = 0, size: float = 0.1) -> dict:
    """A LoRA of rank RANK for the layers of ``sizes`` ((inputs, outputs) each), its matrices drawn from ``seed``;
    returns the tensors written (float32)."""
    rng = np.random.default_rng(seed)
    tensors = {}
    for layer, (inputs, outputs) in sizes.items():
        tensors[f"transformer.{layer}.lora_A.weight"] = (rng.standard_normal((RANK, inputs)) * size).astype(np.float32)
        tensors[f"transformer.{layer}.lora_B.weight"] = (rng.standard_normal((outputs, RANK)) * size).astype(np.float32)
    path.parent.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(path), metadata={"model": "test"})
    return tensors


def fitting_lora(path: Path, model, layers: tuple[str, ...], seed: int = 0) -> dict:
    """A LoRA that fits ``model``'s layers as they are."""
    return write_lora(path, layer_sizes(model, layers), seed)


# Layers each test model has, some of them of its family only (FLUX.2's fused single-block projection, FLUX.1's
# separate single-block MLP): a LoRA of one applied to the other is another family's.
FLUX2_LAYERS = ("transformer_blocks.0.attn.to_q", "single_transformer_blocks.0.attn.to_qkv_mlp_proj")
FLUX1_LAYERS = ("transformer_blocks.0.attn.to_q", "single_transformer_blocks.0.proj_mlp")
