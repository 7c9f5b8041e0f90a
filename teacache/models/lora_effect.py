"""A trained LoRA's effect, loaded by mflux into fresh embedded pipelines: images, the sample grid, the model card.

``evaluate`` measures the LoRA at each scale against the base pipeline on training-split captions (the model's own
generation settings); ``write_grid`` draws the samples; ``card_text`` renders MODEL_CARD.md from the manifest.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
from collections.abc import Sequence
from pathlib import Path

import mlx.core as mx
import numpy as np

from teacache.io import atomic_path
from teacache.lora import mapping_of
from teacache.models import open_data, open_models
from teacache.models.lora_layers import LOADERS, MODELS, apply_lora
from teacache.models.lora_styles import STYLES, Style

EVAL_SEED = 10_000  # the fixed batch the style loss is measured on: a stream no training seed draws
SAMPLE_SPECS = (open_data.OpenSpec("red", "circle", "left"), open_data.OpenSpec("blue", "square", "top"),
                open_data.OpenSpec("yellow", "triangle", "right"))  # fmt: skip
SCALES = (0.5, 1.0, 1.5)


def _pixels(pipeline, latents: mx.array) -> np.ndarray:
    return np.array(pipeline._pixels(latents)).transpose(0, 2, 3, 1)  # (B, H, W, 3) in [-1, 1]


def sample_prompts(model: str) -> list[str]:
    """The sample grid's captions in the model's own words (tiny-open-flux1's leave the shape open)."""
    captions = open_models.FAMILIES[MODELS[model]].captions
    return [s.prompt if captions.names_shape else dataclasses.replace(s, shape=None).prompt for s in SAMPLE_SPECS]


def eval_specs(model: str, n: int) -> list[open_data.OpenSpec]:
    """The ``n`` training-split captions the effect is measured on, in the model's own words."""
    captions = open_models.FAMILIES[MODELS[model]].captions
    return open_data.sample_specs(np.random.default_rng(EVAL_SEED), n, captions=captions)


def generate(pipeline, model: str, seeds: Sequence[int], prompts: Sequence[str]) -> np.ndarray:
    """Final images of the model's own generation settings (variants), (B, H, W, 3) in [-1, 1]: FLUX.2's batched,
    FLUX.1's one at a time through mflux's ``Flux1.generate_image`` (read back from its 8-bit image)."""
    with contextlib.redirect_stderr(io.StringIO()):  # mflux's progress bar, once per image
        if MODELS[model] == "flux2":
            batch = pipeline.generate_batch(list(seeds), list(prompts))
            return _pixels(pipeline, mx.concatenate([im.latents for im in batch]))
        from teacache import variants

        g = variants.get(model).generation
        images = [pipeline.generate_image(seed=s, prompt=p, num_inference_steps=g.steps, height=g.height,
                                          width=g.width, guidance=g.guidance).image
                  for s, p in zip(seeds, prompts, strict=True)]  # fmt: skip
    return np.stack([np.asarray(im, dtype=np.float32) / 127.5 - 1.0 for im in images])


def sample_images(pipeline, model: str) -> list:
    """The sample grid's images of one column (PIL), seed = row index, the model's own settings."""
    prompts = sample_prompts(model)
    if MODELS[model] == "flux2":
        with contextlib.redirect_stderr(io.StringIO()):
            return [pipeline.generate_image(seed=i, prompt=p).image for i, p in enumerate(prompts)]
    import PIL.Image

    pixels = generate(pipeline, model, range(len(prompts)), prompts)
    return [PIL.Image.fromarray(im) for im in open_data.to_uint8(pixels)]


def evaluate(lora: Path, style: Style, n: int, scales: Sequence[float] = SCALES,
             model: str = open_models.FAMILIES["flux2"].name) -> tuple[list[dict], list[list]]:  # fmt: skip
    """The LoRA's effect, loaded by mflux at each scale into a fresh pipeline, against the base pipeline: on ``n``
    training-split captions (seed = index, the model's own steps and guidance) the mean |difference| of the final
    images ([-1, 1] units) and the style's metric; and the sample grid's images (base, then each scale)."""
    specs = eval_specs(model, n)
    prompts, seeds = [s.prompt for s in specs], list(range(n))
    rows, grid, base = [], [], None
    for scale in (0.0, *scales):
        pipeline = LOADERS[MODELS[model]]()
        if scale:
            apply_lora(pipeline, [lora], [scale], quiet=True)
        images = generate(pipeline, model, seeds, prompts)
        grid.append(sample_images(pipeline, model))
        base = images if base is None else base
        row = {"scale": scale, "mean_abs_diff": float(np.abs(images - base).mean()),
               "max_abs_diff": float(np.abs(images - base).max())}  # fmt: skip
        if style.metric is not None:
            row[style.metric.__name__] = style.metric(images)
        rows.append(row)
    return rows, grid


def write_grid(path: Path, grid: list[list], scales: Sequence[float] = SCALES, zoom: int = 4) -> None:
    """Rows: the sample prompts; columns: base, then the LoRA at each scale; a label over each column."""
    import PIL.Image
    import PIL.ImageDraw

    tile, gap, head = 32 * zoom, 2, 12  # a 64 px image at half the zoom: the same tile
    columns = ["base", *(f"LoRA x{s:g}" for s in scales)]
    sheet = PIL.Image.new("RGB", (len(columns) * (tile + gap) - gap, head + len(grid[0]) * (tile + gap) - gap), "white")
    draw = PIL.ImageDraw.Draw(sheet)
    for c, (label, images) in enumerate(zip(columns, grid, strict=True)):
        draw.text((c * (tile + gap) + 2, 0), label, fill="black")
        for r, image in enumerate(images):
            sheet.paste(image.resize((tile, tile), PIL.Image.NEAREST), (c * (tile + gap), head + r * (tile + gap)))
    with atomic_path(path) as tmp:
        sheet.save(tmp, format="PNG", optimize=True)


def _effect_table(rows: list[dict], metric: str | None) -> list[str]:
    names = ["LoRA scale", "mean abs diff", "max abs diff", *([metric] if metric else [])]
    lines = ["| " + " | ".join(names) + " |", "|" + "---:|" * len(names)]
    for r in rows:
        cells = ["0 (base)" if r["scale"] == 0 else f"{r['scale']:g}", f"{r['mean_abs_diff']:.4f}"]
        cells += [f"{r['max_abs_diff']:.3f}", *([f"{r[metric]:.4f}"] if metric else [])]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def _sentence(doc: str) -> str:
    text = " ".join(doc.split())
    return text[:1].lower() + text[1:]


def card_text(manifest: dict) -> str:
    """MODEL_CARD.md: what the LoRA does, how it was trained, and its measured effect."""
    from teacache.templating import template_environment

    rows = manifest["evaluation"]["rows"]
    metric = next((k for k in rows[0] if k not in ("scale", "mean_abs_diff", "max_abs_diff")), None)
    table = _effect_table(rows, metric)
    return (
        template_environment("teacache.models")
        .get_template("MODEL_CARD_lora.md.j2")
        .render(
            m=manifest,
            t=manifest["training"],
            e=manifest["evaluation"],
            targets=", ".join(f"`{t}`" for t in manifest["lora"]["targets"]),
            metric=metric,
            metric_doc=_sentence(STYLES[manifest["name"]].metric.__doc__) if metric else None,
            table=table,
            scales=", ".join(f"{s:g}" for s in SCALES),
            **_card_names(manifest["model"]),
        )
    )


def _card_names(model: str) -> dict:
    """What a card names per model: mflux's mapping and pipeline, the loading snippet, the generation settings."""
    from teacache import variants

    family = MODELS[model]
    g = variants.get(model).generation
    folder = "train_lora.LORAS_DIR" if family == "flux2" else f'train_lora.LORAS_DIRS["{model}"]'
    return {
        "mapping": mapping_of(family).__name__,
        "pipeline": {"flux2": "Flux2Klein", "flux1": "Flux1"}[family],
        "loader": LOADERS[family].__name__,
        "folder": folder,
        "generation": f"{g.steps} steps, guidance {g.guidance}",
    }
