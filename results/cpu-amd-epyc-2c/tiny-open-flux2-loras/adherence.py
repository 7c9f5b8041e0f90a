"""The committed tiny-open-flux2 LoRAs scored by the adherence checker, at each scale, on the CPU.

python adherence.py > adherence.jsonl

The images of each card's effect table (``lora_effect.evaluate``: 16 training-split captions drawn from
``lora_effect.EVAL_SEED``, seed = index, 28 steps, guidance 2.0, the LoRA loaded by mflux into a fresh pipeline),
scored by ``bench.quality.open_adherence`` against the caption (colour, shape, position, all) and, for the shape,
against the shape ``lora_styles.SHAPE_SWAP`` puts in its place. One JSON line per LoRA and scale (scale 0: the
base model).
"""

import teacache  # noqa: F401  (first: the OpenBLAS preload)

# isort: split
import contextlib
import dataclasses
import io
import json

import mlx.core as mx
import numpy as np
from mflux.models.common.config.model_config import ModelConfig

from bench.quality.open_adherence import check, summarize
from teacache.models import lora_effect, lora_styles, open_data, open_models, train_lora

N = 16
ModelConfig.precision = mx.float32


def images(lora, scale: float) -> np.ndarray:
    specs = open_data.sample_specs(np.random.default_rng(lora_effect.EVAL_SEED), N)
    pipeline = open_models.load_tiny_open_flux2()
    if scale:
        train_lora.apply_lora(pipeline, [lora], [scale], quiet=True)
    with contextlib.redirect_stderr(io.StringIO()):
        batch = pipeline.generate_batch(list(range(N)), [s.prompt for s in specs])
    return lora_effect._pixels(pipeline, mx.concatenate([im.latents for im in batch])), specs


def row(name: str, scale: float, pixels: np.ndarray, specs, base: np.ndarray) -> dict:
    swapped = [dataclasses.replace(s, shape=lora_styles.SHAPE_SWAP[s.shape]) for s in specs]
    caption = summarize([check(im, s) for im, s in zip(pixels, specs, strict=True)])
    return {
        "lora": name,
        "scale": scale,
        "n": N,
        **{k: round(v, 4) for k, v in caption.items()},
        "shape_swapped": round(summarize([check(im, s) for im, s in zip(pixels, swapped, strict=True)])["shape"], 4),
        "stripe_contrast": round(lora_styles.stripe_contrast(pixels), 4),
        "mean_abs_diff": round(float(np.abs(pixels - base).mean()), 4),
    }


base, specs = images(None, 0.0)
print(json.dumps(row("base", 0.0, base, specs, base)), flush=True)
for name in ("stripes", "shape-swap"):
    lora = train_lora.LORAS_DIR / name / f"{name}.safetensors"
    for scale in lora_effect.SCALES:
        print(json.dumps(row(name, scale, images(lora, scale)[0], specs, base)), flush=True)
