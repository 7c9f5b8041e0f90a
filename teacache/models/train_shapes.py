"""Train ``tiny-shapes``: flow matching on procedurally drawn shapes, with mflux's Flux2Transformer.

    python -m teacache.models.train_shapes --steps 4000 --batch 128 --seed 0 --out DIR
    teacache-bench adherence --model-dir DIR     # adds held-out prompt adherence to the card

Writes DIR/tiny-shapes.safetensors (float32), tiny-shapes.json (architecture, data recipe, SHA-256,
training record), loss.png, samples.png and MODEL_CARD.md, each atomically. Reproducible from
``--seed``: a numpy Generator draws the data, ``mx.random.seed`` the initial weights and the noise
(compiled and uncompiled steps round differently). A GPU is recommended; it also runs, slowly, on a CPU.

Objective: x_t = (1 - s) x_0 + s eps, predict v = eps - x_0 (the direction mflux's Euler step follows
from sigma to the next, smaller sigma). s is logit-normal; the transformer gets ``1000 * s`` as its
timestep, exactly what the pipeline passes from ``scheduler.timesteps``.
"""

from __future__ import annotations

from teacache._platform import quiet_transformers

# A command, so it starts here: before mflux imports transformers (importing teacache preloaded OpenBLAS).
quiet_transformers()

# isort: split
import argparse
import json
import shlex
from functools import partial
from pathlib import Path

import mlx.core as mx
import mlx.optimizers as optim
import numpy as np
from mflux.models.common.config.model_config import ModelConfig
from mlx import nn

from teacache.io import FORMAT_VERSION, atomic_path, write_json, write_text
from teacache.models import shapes, shapes_data
from teacache.models.training import (
    add_optimizer_arguments,
    learning_rate,
    parse_arguments,
    plot_loss,
    run_steps,
    save_weights,
    training_record,
)
from teacache.templating import template_environment

PROG = "python -m teacache.models.train_shapes"
WEIGHTS_NAME = "tiny-shapes.safetensors"
MANIFEST_NAME = "tiny-shapes.json"
CARD_NAME = "MODEL_CARD.md"
SIGMA_MIN = 0.002  # keeps 1000 * sigma above 1, where Flux2Transformer would rescale it again


def setup_arg_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n")[0])
    add_optimizer_arguments(p, steps=4000, batch=128, lr=1e-3, warmup=100)
    p.add_argument("--prompt-dropout", type=float, default=0.1, help="share of empty prompts, for CFG")
    p.add_argument("--sigma-loc", type=float, default=0.5, help="logit-normal location of the sigmas")
    p.add_argument("--sigma-scale", type=float, default=1.2, help="logit-normal scale of the sigmas")
    p.add_argument("--samples", type=int, default=16, help="held-out prompts in samples.png")
    p.add_argument("--no-compile", action="store_true", help="run the training step uncompiled")
    p.add_argument("--out", type=Path, required=True, help="output folder")
    return p


class BatchMaker:
    """Training batches from the train split only: images as patch tokens, prompt ids with dropout."""

    def __init__(self, rng: np.random.Generator, prompt_dropout: float) -> None:
        self.rng = rng
        self.prompt_dropout = prompt_dropout
        self.specs = shapes_data.split_specs("train")
        self.tokens = np.stack([shapes_data.tokenize(s.prompt) for s in self.specs])

    def __call__(self, batch: int) -> tuple[np.ndarray, np.ndarray]:
        idx = self.rng.integers(len(self.specs), size=batch)
        images = shapes_data.render_batch([self.specs[i] for i in idx], self.rng)
        tokens = self.tokens[idx].copy()
        tokens[self.rng.random(batch) < self.prompt_dropout] = 0  # all padding = the empty prompt
        return shapes_data.patchify(images), tokens


def make_train_step(model: shapes.TinyShapesModel, optimizer: optim.Optimizer, args: argparse.Namespace):
    """One optimizer step on a batch; sigma and noise are drawn inside from mx.random (seeded)."""
    img_ids, txt_ids = shapes.image_ids(1), shapes.text_ids(1)

    def loss_fn(model, x0, tokens, sigma, eps):
        s = sigma[:, None, None]
        xt = (1.0 - s) * x0 + s * eps
        velocity = model(xt, tokens, sigma * 1000.0, img_ids, txt_ids)
        return mx.mean((velocity - (eps - x0)) ** 2)

    loss_and_grad = nn.value_and_grad(model, loss_fn)

    def step(x0: mx.array, tokens: mx.array) -> mx.array:
        z = mx.random.normal((x0.shape[0],)) * args.sigma_scale + args.sigma_loc
        sigma = mx.clip(mx.sigmoid(z), SIGMA_MIN, 1.0)
        eps = mx.random.normal(x0.shape)
        loss, grads = loss_and_grad(model, x0, tokens, sigma, eps)
        optimizer.update(model, grads)
        return loss

    state = [model.state, optimizer.state, mx.random.state]
    if args.no_compile:
        return step, state
    return partial(mx.compile, inputs=state, outputs=state)(step), state


def train(args: argparse.Namespace) -> tuple[shapes.TinyShapesModel, list[float], dict]:
    """Returns the model, the loss of every step, and timings: the loop's wall time and its first step's
    (which includes compiling the step and, on a GPU, JIT-compiling its kernels)."""
    mx.random.seed(args.seed)
    model = shapes.TinyShapesModel()
    mx.eval(model.parameters())
    optimizer = optim.AdamW(learning_rate=learning_rate(args), weight_decay=args.weight_decay)
    optimizer.init(model.trainable_parameters())
    step, state = make_train_step(model, optimizer, args)
    batches = BatchMaker(np.random.default_rng(args.seed), args.prompt_dropout)
    print(
        f"tiny-shapes: {shapes.parameter_count(model) / 1e6:.2f} M parameters on {mx.default_device()}, "
        f"{len(batches.specs)} train combinations, {args.steps} steps x {args.batch}",
        flush=True,
    )
    draws = (batches(args.batch) for _ in range(args.steps))  # each drawn while the previous step still runs
    losses, timing = run_steps(step, state, draws, args.steps)
    model.eval()
    return model, losses, timing


def plot_samples(images: list, specs: list[shapes_data.ShapeSpec], path: Path) -> None:
    """A grid of generated images, each titled with its prompt's attributes."""
    # heavy (matplotlib): loaded only when this runs, and pyplot only after the Agg backend is chosen
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cols = 4
    rows = (len(images) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(2.0 * cols, 2.25 * rows), dpi=110, squeeze=False)
    for ax in axes.ravel():
        ax.axis("off")
    for ax, image, spec in zip(axes.ravel(), images, specs, strict=False):
        ax.imshow(np.asarray(shapes.upscale(image, 4)), interpolation="nearest")
        ax.set_title(f"{spec.color} {spec.shape}\non {spec.background}, {spec.position}", fontsize=8)
    fig.suptitle("held-out prompts, seed = index, 28 steps, guidance 1.0", fontsize=9)
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png")
    plt.close(fig)


def sampling_record(steps: int = 28) -> dict:
    sigmas, timesteps = shapes.schedule(steps)
    return {
        "scheduler": "flow_match_euler_discrete",
        "model_config": "requires_sigma_shift=True, as FLUX.2 Klein",
        "default_steps": steps,
        "sigmas": [round(float(s), 6) for s in sigmas],
        "timesteps": [round(float(t), 4) for t in timesteps],
        "note": (
            "mflux's Config counts 16 px per token, so at 32x32 it sets the shift from image_seq_len 4 "
            "(mu 1.76; 256 tokens would give 1.78). Sigma runs from 1.0 to 0.177, then jumps to 0."
        ),
    }


def write_model_card(out_dir: str | Path) -> Path:
    """MODEL_CARD.md from tiny-shapes.json: rebuilt whole, so training and evaluation can each update it."""
    out_dir = Path(out_dir)
    m = json.loads((out_dir / MANIFEST_NAME).read_text(encoding="utf-8"))
    tr, prov, arch = m["training"], m["training"]["provenance"], m["architecture"]
    rec, w, smp = m["data_recipe"], m["weights"], m["sampling"]
    ev = m.get("evaluation")
    text = template_environment("teacache.models").get_template("MODEL_CARD.md.j2").render(
        tf=arch["transformer"], arch=arch, tr=tr, prov=prov, rec=rec, w=w, smp=smp, ev=ev, out_dir=out_dir,
        sigma_min=SIGMA_MIN,
        transformer_args=", ".join(f"{k}={v}" for k, v in arch["transformer"].items()),
        versions=", ".join(f"{k} {v}" for k, v in prov["versions"].items() if v),
        palette=", ".join(f"{k} {tuple(v)}" for k, v in rec["palette"].items()),
        anchors=", ".join(f"{k} {tuple(v)}" for k, v in rec["positions"].items()),
        device_name=(ev or {}).get("device", {}).get("device_name", "an unrecorded device"),
        misses=(ev or {}).get("misses") or [],
    )  # fmt: skip
    path = out_dir / CARD_NAME
    write_text(path, text)
    return path


def main(argv: list[str] | None = None) -> int:
    argv, args = parse_arguments(setup_arg_parser(), argv, PROG)
    if args is None:
        return 2
    ModelConfig.precision = mx.float32  # trained in float32 on every backend
    out: Path = args.out

    model, losses, timing = train(args)
    weights = save_weights(model, out / WEIGHTS_NAME, shapes_data.MODEL_NAME, shapes_data.RECIPE_VERSION)
    training = training_record(args, losses, timing, "teacache.models.train_shapes", argv,
                               prompt_dropout=args.prompt_dropout)  # fmt: skip
    print(f"final loss {training['final_loss']:.4f} (last {training['final_loss_window']} steps), "
          f"{timing['wall_time_s']:.1f} s")  # fmt: skip
    manifest = {
        "format_version": FORMAT_VERSION,
        "name": shapes_data.MODEL_NAME,
        "weights": weights,
        "architecture": shapes.ARCHITECTURE,
        "data_recipe": shapes_data.recipe(),
        "sampling": sampling_record(),
        "training": training,
        "evaluation": None,
    }
    write_json(out / MANIFEST_NAME, manifest)
    plot_loss(losses, out / "loss.png", "tiny-shapes training loss")

    if args.samples > 0:
        pipeline = shapes.TinyShapesPipeline(model, manifest=manifest)
        specs = shapes_data.evaluation_specs(args.samples)
        images = [pipeline.generate_image(seed=i, prompt=spec.prompt).image for i, spec in enumerate(specs)]
        plot_samples(images, specs, out / "samples.png")
    card = write_model_card(out)
    written = f"{out / WEIGHTS_NAME} ({weights['bytes']:,} bytes, sha256 {weights['sha256']})"
    print(f"wrote {written}, {MANIFEST_NAME}, loss.png, samples.png, {card.name}")
    print(f"held-out adherence: teacache-bench adherence --model-dir {shlex.quote(str(out))}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
