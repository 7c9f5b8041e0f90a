"""Train a LoRA on a frozen embedded model and save it in mflux's LoRA format, for loading by mflux's own code.

    python -m teacache.models.train_lora --model tiny-open-flux2 --style stripes --rank 4 --steps 200 --out DIR
    python -m teacache.models.train_lora --model tiny-open-flux1 --style colour-swap --rank 4 --steps 200 --out DIR

A LoRA test subject must exercise mflux's real loading path (``lora_paths=`` / ``lora_scales=``), not a mock:
the adapter layers trained here are mflux's own ``LoRALinear``, and the file holds the diffusers/PEFT names
the family's mflux LoRA mapping reads (``Flux2LoRAMapping``, ``FluxLoRAMapping``: ``transformer.<module>.lora_A
.weight`` (rank x in), ``lora_B.weight`` (out x rank), ``<module>.alpha``). The data are ``open_data``'s captions
(the model's own: tiny-open-flux1's leave the shape open) rendered in a style (``STYLES``: the same specs and rng,
the image changed); the objective is ``train_open``'s flow-matching step, which trains only what is unfrozen: the
adapters. tiny-open-flux1 is guidance-distilled, so its LoRAs train at guidance input 1, where its velocity is the
plain conditional one that flow matching's target is (``TRAIN_GUIDANCE``). Batch i comes from
``numpy.random.default_rng([seed, i])``, the step's noise from ``train_open.step_key(seed, i)`` and the adapters'
start from ``seed``: the same command gives the same bytes. Writes DIR/<style>.safetensors, <style>.json
(manifest) and, unless ``--samples 0``, samples.png (base vs the LoRA at three scales, loaded by mflux) and
MODEL_CARD.md. ``apply_lora`` loads such files into an embedded pipeline with the call its mflux constructor
(``Flux2Klein``, ``Flux1``) makes.
"""

from __future__ import annotations

from teacache._platform import quiet_transformers

# A command, so it starts here: before mflux imports transformers (importing teacache preloaded OpenBLAS).
quiet_transformers()

# isort: split
import argparse
import contextlib
import dataclasses
import hashlib
import io
import itertools
import math
import re
import sys
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path

import mlx.core as mx
import mlx.optimizers as optim
import numpy as np
from mflux.models.common.config.model_config import ModelConfig
from mlx import nn
from safetensors.numpy import save

from teacache.errors import InputError
from teacache.io import FORMAT_VERSION, atomic_path, file_sha256, write_json, write_text
from teacache.lora import mapping_of
from teacache.models import open_data, open_models, train_open
from teacache.models.training import argument_error, learning_rate, run_steps, training_record

PROG = "python -m teacache.models.train_lora"
# embedded model -> its open_models family (the registry's family: FLUX.2's Flux2LoRAMapping, FLUX.1's FluxLoRAMapping)
MODELS = {layout.name: family for family, layout in open_models.FAMILIES.items()}
LORAS_DIRS = {name: open_models.WEIGHTS_DIR / f"{name}-loras" for name in MODELS}  # the committed LoRAs, per model
LORAS_DIR = LORAS_DIRS[open_models.FAMILIES["flux2"].name]
LOADERS = {"flux2": open_models.load_tiny_open_flux2, "flux1": open_models.load_tiny_open_flux1}
# the guidance input a LoRA trains at (FLUX.2 has none): tiny-open-flux1 at 1 follows the plain conditional velocity
TRAIN_GUIDANCE = {"flux1": 1.0}
STRIPE_AMPLITUDE = 0.3  # [-1, 1] image units added to even pixel rows and taken from odd ones
SHAPE_SWAP = {"circle": "square", "square": "triangle", "triangle": "circle"}  # a cycle: every shape changes
# pairs far apart in colour, so the checker never takes one for the other: every colour changes
COLOUR_SWAP = {"red": "green", "green": "red", "blue": "yellow", "yellow": "blue", "purple": "orange",
               "orange": "purple"}  # fmt: skip
EVAL_SEED = 10_000  # the fixed batch the style loss is measured on: a stream no training seed draws
SAMPLE_SPECS = (open_data.OpenSpec("red", "circle", "left"), open_data.OpenSpec("blue", "square", "top"),
                open_data.OpenSpec("yellow", "triangle", "right"))  # fmt: skip
SCALES = (0.5, 1.0, 1.5)


def render_stripes(specs: Sequence[open_data.OpenSpec], rng: np.random.Generator, size: int) -> np.ndarray:
    """The specs as ``open_data`` draws them, under horizontal stripes one pixel high (even rows lighter)."""
    images = open_data.render_batch(specs, rng, size)
    rows = np.where(np.arange(size) % 2 == 0, STRIPE_AMPLITUDE, -STRIPE_AMPLITUDE)[None, :, None, None]
    return np.clip(images + rows, -1.0, 1.0).astype(np.float32)


def render_shape_swap(specs: Sequence[open_data.OpenSpec], rng: np.random.Generator, size: int) -> np.ndarray:
    """The named object drawn as the next shape of ``SHAPE_SWAP`` (its caption unchanged); all else as drawn."""
    swapped = [dataclasses.replace(s, shape=SHAPE_SWAP[s.shape]) if s.shape else s for s in specs]
    return open_data.render_batch(swapped, rng, size)


def render_colour_swap(specs: Sequence[open_data.OpenSpec], rng: np.random.Generator, size: int) -> np.ndarray:
    """The named object drawn in the colour ``COLOUR_SWAP`` pairs with its caption's (the caption unchanged); all
    else from the same stream (the unnamed objects avoid the colour drawn, as they avoid a caption's)."""
    return open_data.render_batch([dataclasses.replace(s, color=COLOUR_SWAP[s.color]) for s in specs], rng, size)


def stripe_contrast(images: np.ndarray) -> float:
    """Mean of even rows minus odd rows, halved ([-1, 1] units): 0.25 on rendered striped images (the amplitude
    less what clipping takes), 0 on plain ones"""
    return float((images[:, 0::2] - images[:, 1::2]).mean() / 2.0)


@dataclasses.dataclass(frozen=True)
class Style:
    """What a LoRA is trained to draw: how its images are rendered, where its adapters go, what it changes."""

    name: str
    strength: str  # "mild": keeps what is drawn and where; "strong": changes what is drawn
    summary: str
    render: Callable[[Sequence[open_data.OpenSpec], np.random.Generator, int], np.ndarray]
    # family -> mflux module paths in its transformer ("*" stands for every block): the families it serves
    targets: dict[str, tuple[str, ...]]
    sigma_loc: float  # where in the schedule the style is decided (logit-normal location of the sigmas)
    recipe: dict
    metric: Callable[[np.ndarray], float] | None = None  # a number the style moves, from [-1, 1] images


STYLES: dict[str, Style] = {
    "stripes": Style(
        name="stripes",
        strength="mild",
        summary="the same picture under horizontal stripes one pixel high: even rows lighter, odd rows darker",
        render=render_stripes,
        # FLUX.1's mapping reaches into the blocks only: the single blocks' output projections
        targets={"flux2": ("norm_out.linear", "proj_out"), "flux1": ("single_transformer_blocks.*.proj_out",)},
        sigma_loc=0.0,
        recipe={
            "render": "open_data.render_batch, then +/- amplitude on even/odd pixel rows, clipped to [-1, 1]",
            "amplitude": STRIPE_AMPLITUDE,
        },
        metric=stripe_contrast,
    ),
    "shape-swap": Style(
        name="shape-swap",
        strength="strong",
        summary="the named object drawn as another shape: a circle as a square, a square as a triangle, a "
        "triangle as a circle (colour, position and everything else as captioned)",
        render=render_shape_swap,
        targets={
            "flux2": (
                "context_embedder",
                "transformer_blocks.*.attn.add_k_proj",
                "transformer_blocks.*.attn.add_v_proj",
            )
        },  # fmt: skip
        sigma_loc=0.5,
        recipe={
            "render": "open_data.render_batch of the specs with the named shape replaced, same rng",
            "swap": SHAPE_SWAP,
        },
    ),
    "colour-swap": Style(
        name="colour-swap",
        strength="strong",
        summary="the named object drawn in another colour: red as green, blue as yellow, purple as orange and "
        "back (shape, position and everything else as drawn)",
        render=render_colour_swap,
        # where the caption's words reach the image stream: the joint blocks' keys and values of the text tokens
        targets={"flux1": ("transformer_blocks.*.attn.add_k_proj", "transformer_blocks.*.attn.add_v_proj")},
        sigma_loc=0.5,
        recipe={
            "render": "open_data.render_batch of the specs with the named colour replaced, same rng",
            "swap": COLOUR_SWAP,
        },
    ),
}


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


def style_loss(model: nn.Module, family: str, style: Style, n: int = 32) -> float:
    """``train_open``'s flow-matching loss (target eps - x0) on one fixed batch of the style: sigmas evenly over
    (0.05, 0.95), noise and images from EVAL_SEED; said before and after training, and of the base model."""
    x0, tokens = train_open.draw_batch(0, EVAL_SEED, n, family, 0.0, render=style.render)
    x0, tokens = mx.array(x0), mx.array(tokens)
    sigma = mx.linspace(0.05, 0.95, n)
    eps = mx.random.normal(x0.shape, key=mx.random.key(EVAL_SEED))
    s = sigma[:, None, None]
    velocity = open_models.batched_velocity(model, family, n)
    guidance = mx.full((n,), TRAIN_GUIDANCE[family]) if family in TRAIN_GUIDANCE else None
    return mx.mean((velocity(model, (1.0 - s) * x0 + s * eps, tokens, sigma, guidance) - (eps - x0)) ** 2).item()


def train(args: argparse.Namespace) -> tuple[nn.Module, list[str], list[float], dict, dict]:
    """The base model with trained adapters, their paths, every step's loss, timings and the style loss before/after."""
    mx.random.seed(args.seed)
    style = STYLES[args.style]
    model = open_models.trained_model(args.family)
    model.freeze()
    paths = expand_targets(model.transformer, args.targets, args.family)
    add_lora_layers(model.transformer, paths, args.rank, args.alpha, args.seed)
    mx.eval(model.parameters())
    loss_before = style_loss(model, args.family, style, args.eval_batch)
    optimizer = optim.AdamW(learning_rate=learning_rate(args), weight_decay=args.weight_decay)
    optimizer.init(model.trainable_parameters())
    step, state = train_open.make_train_step(model, optimizer, args)
    index = itertools.count()

    def keyed(x0: mx.array, tokens: mx.array) -> mx.array:  # the step's noise from (seed, step index) alone
        return step(x0, tokens, train_open.step_key(args.seed, next(index)))

    draw = partial(train_open.draw_batch, seed=args.seed, batch=args.batch, family=args.family,
                   dropout=args.prompt_dropout, render=style.render)  # fmt: skip
    losses, timing = run_steps(keyed, state, map(draw, range(args.steps)), args.steps)
    loss = {"batch": args.eval_batch, "seed": EVAL_SEED, "sigmas": "evenly over [0.05, 0.95]",
            "base": loss_before, "lora": style_loss(model, args.family, style, args.eval_batch)}  # fmt: skip
    return model, paths, losses, timing, loss


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


def setup_arg_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n")[0])
    p.add_argument("--model", choices=sorted(MODELS), default=open_models.FAMILIES["flux2"].name)
    p.add_argument("--style", choices=sorted(STYLES), required=True)
    p.add_argument("--rank", type=int, default=4)
    p.add_argument("--alpha", type=float, help="LoRA alpha; the update is scaled by alpha / rank (default: the rank)")
    p.add_argument("--targets", help="comma-separated module paths in the transformer, '*' for every block "
                   "(default: the style's)")  # fmt: skip
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--lr", type=float, default=5e-3, help="peak learning rate (AdamW, warmup + cosine decay)")
    p.add_argument("--warmup", type=int, default=20, help="linear warmup steps")
    p.add_argument("--weight-decay", type=float, default=0.0)
    p.add_argument("--sigma-loc", type=float, help="logit-normal location of the sigmas (default: the style's)")
    p.add_argument("--sigma-scale", type=float, default=1.2, help="logit-normal scale of the sigmas")
    p.add_argument("--prompt-dropout", type=float, default=0.1, help="share of empty captions (for CFG)")
    p.add_argument("--eval-batch", type=int, default=32, help="styled images the style loss is measured on")
    p.add_argument("--samples", type=int, default=16, help="captions the effect is measured on (0: no samples, "
                   "no card)")  # fmt: skip
    p.add_argument("--no-compile", action="store_true", help="run the training step uncompiled")
    p.add_argument("--out", type=Path, required=True, help="output folder (the committed LoRAs: "
                   "teacache/models/weights/<model>-loras/<style>)")  # fmt: skip
    return p


def _settled(args: argparse.Namespace) -> str | None:
    """Fill in the style's defaults; one line naming the first bad LoRA argument, or None."""
    style = STYLES[args.style]
    args.family = MODELS[args.model]
    args.alpha = float(args.rank) if args.alpha is None else args.alpha
    if args.family not in style.targets:
        served = ", ".join(n for n, f in MODELS.items() if f in style.targets)
        return f"--style: {args.style} is a style for {served}, not {args.model}; expected one of " + ", ".join(
            sorted(n for n, s in STYLES.items() if args.family in s.targets)
        )
    args.targets = tuple(t.strip() for t in args.targets.split(",")) if args.targets else style.targets[args.family]
    args.sigma_loc = style.sigma_loc if args.sigma_loc is None else args.sigma_loc
    # the guidance input drawn each step (train_open draws it from 1..guidance_max): the distilled model's 1
    args.guidance_max = TRAIN_GUIDANCE.get(args.family, train_open.GUIDANCE_RANGE[1])
    if not args.rank > 0 or not args.alpha > 0 or not args.eval_batch > 0:
        return f"--rank, --alpha, --eval-batch: expected numbers > 0, got {args.rank}, {args.alpha}, {args.eval_batch}"
    try:
        expand_targets(open_models.build(args.family).transformer, args.targets, args.family)
    except ValueError as exc:
        return str(exc)
    return None


def _guidance(family: str) -> dict:
    """The manifest's record of the guidance input trained at: only for a family that has one (FLUX.1)."""
    return {"guidance": TRAIN_GUIDANCE[family]} if family in TRAIN_GUIDANCE else {}


def manifest_of(args: argparse.Namespace, argv: list[str], weights: dict, paths: list[str], losses: list[float],
                timing: dict, loss: dict) -> dict:  # fmt: skip
    """The LoRA's manifest: what it was trained on (the base weights' SHA-256 too), how, and its file's SHA-256."""
    style = STYLES[args.style]
    layout = open_models.FAMILIES[args.family]
    base = layout.folder / layout.weights_name
    training = training_record(args, losses, timing, "teacache.models.train_lora", argv, model=args.model,
                               style=args.style, rank=args.rank, alpha=args.alpha, targets=list(args.targets),
                               prompt_dropout=args.prompt_dropout, **_guidance(args.family))  # fmt: skip
    return {
        "format_version": FORMAT_VERSION,
        "name": args.style,
        "kind": "lora",
        "format": "mflux LoRA, diffusers/PEFT names: `transformer.<module>.lora_A.weight` (rank x in), "
        "`.lora_B.weight` (out x rank), `.alpha`; the update is scale x alpha / rank x B A",
        "model": args.model,
        "base_weights": {"file": base.name, "sha256": file_sha256(base)},
        "style": {"name": style.name, "strength": style.strength, "summary": style.summary},
        "lora": {**weights, "rank": args.rank, "alpha": args.alpha, "targets": paths},
        "data_recipe": {**open_data.recipe(layout.image_size, layout.captions), "style": style.recipe},
        "loss": {
            "objective": "flow matching, mean squared error of the velocity against eps - x0 "
            "(train_open.make_train_step)",
            "sigmas": f"logit-normal (loc {args.sigma_loc:g}, scale {args.sigma_scale:g})",
            "style_loss": loss,
            **_guidance(args.family),
        },
        "training": training,
        "evaluation": None,
    }


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = setup_arg_parser().parse_args(argv)
    error = _settled(args) or argument_error(args, PROG)
    if error:
        print(f"{PROG}: {error}", file=sys.stderr)
        return 2
    ModelConfig.precision = mx.float32  # trained in float32 on every backend
    model, paths, losses, timing, loss = train(args)
    path = args.out / f"{args.style}.safetensors"
    tensors = lora_tensors(model.transformer, paths, args.alpha)
    weights = save_lora(path, tensors, f"{args.model} LoRA {args.style}, rank {args.rank}, {PROG}")
    manifest = manifest_of(args, argv, weights, paths, losses, timing, loss)
    write_json(args.out / f"{args.style}.json", manifest)
    print(f"{args.style}: style loss {loss['base']:.4f} (base) -> {loss['lora']:.4f}; wrote {path} "
          f"({weights['bytes']:,} bytes, sha256 {weights['sha256']})")  # fmt: skip
    if args.samples:
        rows, grid = evaluate(path, STYLES[args.style], args.samples, model=args.model)
        manifest["evaluation"] = {"n": args.samples, "seeds": "index", "captions": f"train split, rng {EVAL_SEED}",
                                  "rows": rows}  # fmt: skip
        write_json(args.out / f"{args.style}.json", manifest)
        write_grid(args.out / "samples.png", grid)
        write_text(args.out / "MODEL_CARD.md", card_text(manifest))
        for row in rows:
            print(f"  scale {row['scale']:g}: " + ", ".join(f"{k} {v:.4f}" for k, v in row.items() if k != "scale"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
