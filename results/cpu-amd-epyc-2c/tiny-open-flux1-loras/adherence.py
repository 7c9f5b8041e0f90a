"""The committed tiny-open-flux1 LoRAs scored by the adherence checker, at each scale, on the CPU.

python adherence.py > adherence.jsonl

The images of each card's effect table (``lora_effect.evaluate``: 16 training-split captions drawn from
``lora_effect.EVAL_SEED`` in the model's own words ("a red shape at the left": the shape is left open), seed = index,
28 steps, guidance 5.0 at 256x256 (the 64x64 image), the LoRA loaded by mflux into a fresh pipeline), scored by
``bench.quality.open_adherence`` against the caption (colour, position, all; the shape is not named) and, for the
colour, against the one ``lora_styles.COLOUR_SWAP`` puts in its place. One JSON line per LoRA and scale (scale 0:
the base model).
"""

import teacache  # noqa: F401  (first: the OpenBLAS preload)

# isort: split
import dataclasses
import json

import mlx.core as mx
import numpy as np
from mflux.models.common.config.model_config import ModelConfig

from bench.quality.open_adherence import check, summarize
from teacache.models import lora_effect, lora_layers, lora_styles, train_lora

MODEL = "tiny-open-flux1"
N = 16
ModelConfig.precision = mx.float32


def images(lora, scale: float) -> np.ndarray:
    specs = lora_effect.eval_specs(MODEL, N)
    pipeline = lora_layers.LOADERS[lora_layers.MODELS[MODEL]]()
    if scale:
        train_lora.apply_lora(pipeline, [lora], [scale], quiet=True)
    return lora_effect.generate(pipeline, MODEL, range(N), [s.prompt for s in specs]), specs


def share(pixels, specs, key: str) -> float:
    value = summarize([check(im, s) for im, s in zip(pixels, specs, strict=True)])[key]
    return None if value != value else round(value, 4)  # NaN: no caption names it


def row(name: str, scale: float, pixels: np.ndarray, specs, base: np.ndarray) -> dict:
    swapped = [dataclasses.replace(s, color=lora_styles.COLOUR_SWAP[s.color]) for s in specs]
    return {
        "lora": name,
        "scale": scale,
        "n": N,
        **{k: share(pixels, specs, k) for k in ("color", "shape", "position", "all")},
        "color_swapped": share(pixels, swapped, "color"),
        "stripe_contrast": round(lora_styles.stripe_contrast(pixels), 4),
        "mean_abs_diff": round(float(np.abs(pixels - base).mean()), 4),
    }


base, specs = images(None, 0.0)
print(json.dumps(row("base", 0.0, base, specs, base)), flush=True)
for name in ("stripes", "colour-swap"):
    lora = train_lora.LORAS_DIRS[MODEL] / name / f"{name}.safetensors"
    for scale in lora_effect.SCALES:
        print(json.dumps(row(name, scale, images(lora, scale)[0], specs, base)), flush=True)
