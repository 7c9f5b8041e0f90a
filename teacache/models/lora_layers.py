"""mflux LoRA layers on the embedded models: which modules take one, adding them, saving and loading them.

The adapter layers are mflux's own ``LoRALinear``, and the file holds the diffusers/PEFT names the family's mflux
LoRA mapping reads; ``apply_lora`` loads such files into an embedded pipeline with the call its mflux constructor
(``Flux2Klein``, ``Flux1``) makes.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import math
import re
from collections.abc import Sequence
from pathlib import Path

import mlx.core as mx
import numpy as np
from mlx import nn
from safetensors.numpy import save

from teacache.errors import InputError
from teacache.io import atomic_path
from teacache.lora import mapping_of
from teacache.models import open_models

# embedded model -> its open_models family (the registry's family: FLUX.2's Flux2LoRAMapping, FLUX.1's FluxLoRAMapping)
MODELS = {layout.name: family for family, layout in open_models.FAMILIES.items()}
LORAS_DIRS = {name: open_models.WEIGHTS_DIR / f"{name}-loras" for name in MODELS}  # the committed LoRAs, per model
LORAS_DIR = LORAS_DIRS[open_models.FAMILIES["flux2"].name]
LOADERS = {"flux2": open_models.load_tiny_open_flux2, "flux1": open_models.load_tiny_open_flux1}


def _module(root: nn.Module, path: str):
    for part in path.split("."):
        root = root[int(part)] if part.isdigit() else getattr(root, part)
    return root


def _find(transformer: nn.Module, path: str):
    try:
        return _module(transformer, path)
    except (AttributeError, IndexError, TypeError):
        raise InputError(f"--targets: {path} is not a module of the transformer") from None


def expand_targets(transformer: nn.Module, patterns: Sequence[str], family: str = "flux2") -> list[str]:
    """Module paths with "*" expanded over the blocks, each a Linear that mflux's mapping of the family names: a
    target mflux would not load is refused before training, not found missing in the file afterwards."""
    mapping = mapping_of(family)
    mapped = [re.escape(t.model_path).replace(r"\{block\}", r"\d+") for t in mapping.get_mapping()]
    paths = []
    for pattern in patterns:
        head, star, tail = pattern.partition(".*.")
        paths += [f"{head}.{i}.{tail}" for i in range(len(_find(transformer, head)))] if star else [pattern]
    for path in paths:
        if not isinstance(_find(transformer, path), nn.Linear) or not any(re.fullmatch(m, path) for m in mapped):
            raise InputError(f"--targets: {path} is not a linear layer mflux's {mapping.__name__} can load a LoRA into")
    return paths


def add_lora_layers(transformer: nn.Module, paths: Sequence[str], rank: int, alpha: float, seed: int) -> None:
    """Swap each target for mflux's ``LoRALinear`` (scale alpha / rank, B = 0: the base model at first), the
    only trainable parameters; A is drawn as mflux draws it, from a key of ``seed`` and the target's index."""
    from mflux.models.common.lora.layer.linear_lora_layer import LoRALinear

    transformer.freeze()
    keys = mx.random.split(mx.random.key(seed), len(paths))
    for path, key in zip(paths, keys, strict=True):
        base = _module(transformer, path)
        layer = LoRALinear.from_linear(base, r=rank, scale=alpha / rank)
        bound = 1.0 / math.sqrt(base.weight.shape[1])
        layer.lora_A = mx.random.uniform(-bound, bound, layer.lora_A.shape, key=key)
        layer.lora_B = mx.zeros_like(layer.lora_B)
        layer.linear.freeze()
        parent, _, name = path.rpartition(".")
        holder = _module(transformer, parent) if parent else transformer
        if name.isdigit():
            holder[int(name)] = layer
        else:
            setattr(holder, name, layer)


def lora_tensors(transformer: nn.Module, paths: Sequence[str], alpha: float) -> dict[str, np.ndarray]:
    """The trained adapters under the names mflux reads: A as (rank, in), B as (out, rank), alpha per layer."""
    tensors = {}
    for path in paths:
        layer = _module(transformer, path)
        # contiguous: safetensors.numpy writes a transposed view's buffer in memory order, not as the view reads
        tensors[f"transformer.{path}.lora_A.weight"] = np.ascontiguousarray(layer.lora_A.T.astype(mx.float32))
        tensors[f"transformer.{path}.lora_B.weight"] = np.ascontiguousarray(layer.lora_B.T.astype(mx.float32))
        tensors[f"transformer.{path}.alpha"] = np.array(alpha, dtype=np.float32)
    return tensors


def save_lora(path: Path, tensors: dict[str, np.ndarray], description: str) -> dict:
    """Float32 safetensors, written atomically, one metadata key (so the same tensors give the same bytes)."""
    blob = save(tensors, metadata={"lora": description})
    with atomic_path(path) as tmp:
        tmp.write_bytes(blob)
    parameters = sum(v.size for k, v in tensors.items() if not k.endswith(".alpha"))
    return {"file": path.name, "sha256": hashlib.sha256(blob).hexdigest(), "bytes": len(blob), "dtype": "float32",
            "parameters": int(parameters)}  # fmt: skip


def apply_lora(pipeline, lora_paths: Sequence[str | Path], lora_scales: Sequence[float], bake: bool = True,
               quiet: bool = False):  # fmt: skip
    """Load LoRA files into an embedded pipeline (``LOADERS``) with mflux's own loader and its family's mapping: the
    call ``Flux2Klein``'s or ``Flux1``'s constructor makes (``Flux2Initializer._apply_lora``; its dense weights
    matter only to a quantized model). ``bake`` is mflux's ``bake_lora`` (its default: fold the update into the
    weights). Returns the pipeline."""
    from mflux.models.common.lora.mapping.lora_loader import LoRALoader

    with contextlib.redirect_stdout(io.StringIO()) if quiet else contextlib.nullcontext():
        pipeline.lora_paths, pipeline.lora_scales = LoRALoader.load_and_apply_lora(
            lora_mapping=mapping_of(MODELS[pipeline.teacache_variant]).get_mapping(),
            transformer=pipeline.transformer,
            lora_paths=[str(p) for p in lora_paths],
            lora_scales=list(lora_scales),
            bake_lora=bake,
        )
    return pipeline


def loaded_targets(transformer: nn.Module) -> list[str]:
    """The module paths where an unbaked mflux LoRA layer sits (what ``apply_lora(bake=False)`` put there)."""
    from mflux.models.common.lora.layer.linear_lora_layer import LoRALinear

    return sorted(name for name, module in transformer.named_modules() if isinstance(module, LoRALinear))
