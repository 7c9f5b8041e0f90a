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
import itertools
from functools import partial
from pathlib import Path

import mlx.core as mx
import mlx.optimizers as optim
from mflux.models.common.config.model_config import ModelConfig
from mlx import nn

from teacache.io import FORMAT_VERSION, file_sha256, write_json, write_text
from teacache.models import open_data, open_models, train_open
from teacache.models.lora_effect import EVAL_SEED, card_text, evaluate, write_grid

# the committed LoRAs' model cards load them as train_lora.LORAS_DIR(S) and train_lora.apply_lora
from teacache.models.lora_layers import LORAS_DIR as LORAS_DIR
from teacache.models.lora_layers import LORAS_DIRS as LORAS_DIRS
from teacache.models.lora_layers import MODELS, add_lora_layers, expand_targets, lora_tensors, save_lora
from teacache.models.lora_layers import apply_lora as apply_lora
from teacache.models.lora_styles import STYLES, Style
from teacache.models.training import add_optimizer_arguments, learning_rate, parse_arguments, run_steps, training_record

PROG = "python -m teacache.models.train_lora"
# the guidance input a LoRA trains at (FLUX.2 has none): tiny-open-flux1 at 1 follows the plain conditional velocity
TRAIN_GUIDANCE = {"flux1": 1.0}


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


def setup_arg_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n")[0])
    p.add_argument("--model", choices=sorted(MODELS), default=open_models.FAMILIES["flux2"].name)
    p.add_argument("--style", choices=sorted(STYLES), required=True)
    p.add_argument("--rank", type=int, default=4)
    p.add_argument("--alpha", type=float, help="LoRA alpha; the update is scaled by alpha / rank (default: the rank)")
    p.add_argument("--targets", help="comma-separated module paths in the transformer, '*' for every block "
                   "(default: the style's)")  # fmt: skip
    add_optimizer_arguments(p, steps=200, batch=16, lr=5e-3, warmup=20)
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
    argv, args = parse_arguments(setup_arg_parser(), argv, PROG, check=_settled)
    if args is None:
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
