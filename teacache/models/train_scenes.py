"""Train ``tiny-scenes``: flow matching on procedural two-object scenes, with mflux's FLUX.1 Transformer.

    python -m teacache.models.train_scenes --steps 6000 --batch 128 --seed 0 --out DIR
    python -m bench.quality.scene_adherence --model-dir DIR     # adds held-out adherence to the card

Writes DIR/tiny-scenes.safetensors (float32), tiny-scenes.json (architecture, data recipe, SHA-256,
training record), loss.png, samples.png and MODEL_CARD.md, each atomically. Reproducible from
``--seed``: batch i is drawn from ``numpy.random.default_rng([seed, i])`` (so worker processes do not
change the data), ``mx.random.seed`` draws the initial weights, sigmas, guidance and noise. A GPU is
recommended; it also runs, slowly, on a CPU.

Objective: x_t = (1 - s) x_0 + s eps, predict v = eps - x_0, the direction mflux's FLUX.1 Euler step
follows; s is logit-normal, and the transformer gets ``1000 * s`` as its timestep, exactly what
``Transformer.compute_text_embeddings`` passes from ``scheduler.sigmas``.
"""

from __future__ import annotations

from teacache._platform import quiet_transformers

# A command, so it starts here: before mflux imports transformers (importing teacache preloaded OpenBLAS).
quiet_transformers()

# isort: split
import argparse
import json
import multiprocessing
import shlex
import sys
from functools import partial
from pathlib import Path

import mlx.core as mx
import mlx.optimizers as optim
import numpy as np
from mflux.models.common.config.model_config import ModelConfig
from mlx import nn

from teacache.io import FORMAT_VERSION, atomic_path, write_json, write_text
from teacache.models import scenes, scenes_data
from teacache.models.training import argument_error, learning_rate, plot_loss, run_steps, save_weights, training_record
from teacache.templating import template_environment

PROG = "python -m teacache.models.train_scenes"
WEIGHTS_NAME = "tiny-scenes.safetensors"
MANIFEST_NAME = "tiny-scenes.json"
CARD_NAME = "MODEL_CARD.md"
SIGMA_MIN = 0.001
GUIDANCE_RANGE = (1.0, 5.0)  # drawn independently of the image: the model learns to ignore guidance
SAMPLE_STEPS = 28
SAMPLE_GUIDANCE = 3.5


def setup_arg_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=6000)
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--lr", type=float, default=1e-3, help="peak learning rate (AdamW, warmup + cosine decay)")
    p.add_argument("--warmup", type=int, default=200, help="linear warmup steps")
    p.add_argument("--weight-decay", type=float, default=0.0)
    p.add_argument("--sigma-loc", type=float, default=0.3, help="logit-normal location of the sigmas")
    p.add_argument("--sigma-scale", type=float, default=1.2, help="logit-normal scale of the sigmas")
    p.add_argument("--workers", type=int, default=0, help="processes drawing batches (0: in this process)")
    p.add_argument("--samples", type=int, default=16, help="held-out prompts in samples.png")
    p.add_argument("--no-compile", action="store_true", help="run the training step uncompiled")
    p.add_argument("--out", type=Path, required=True, help="output folder")
    return p


def draw_batch(index: int, seed: int, batch: int) -> tuple[np.ndarray, np.ndarray]:
    """Batch ``index`` of the train split: (B, 256, 64) tokens and (B, TEXT_LEN) caption ids."""
    rng = np.random.default_rng([seed, index])
    specs = scenes_data.sample_specs(rng, batch, split="train")
    tokens = scenes_data.pack(scenes_data.to_latents(scenes_data.render_batch(specs, rng)))
    captions = np.stack([scenes_data.tokenize(s.prompt) for s in specs])
    return tokens.astype(np.float32), captions


def make_train_step(model: scenes.TinyScenesModel, optimizer: optim.Optimizer, args: argparse.Namespace):
    """One optimizer step on a batch; sigma, guidance and noise are drawn inside from mx.random (seeded)."""
    model.set_batch_size(args.batch)
    rotary = scenes.rotary_embeddings(model.transformer)

    def loss_fn(model, x0, token_ids, sigma, guidance, eps):
        s = sigma[:, None, None]
        xt = (1.0 - s) * x0 + s * eps
        velocity = model.velocity(xt, token_ids, sigma, guidance, rotary)
        return mx.mean((velocity - (eps - x0)) ** 2)

    loss_and_grad = nn.value_and_grad(model, loss_fn)

    def step(x0: mx.array, token_ids: mx.array) -> mx.array:
        n = x0.shape[0]
        sigma = mx.clip(mx.sigmoid(mx.random.normal((n,)) * args.sigma_scale + args.sigma_loc), SIGMA_MIN, 1.0)
        guidance = mx.random.uniform(*GUIDANCE_RANGE, (n,))
        eps = mx.random.normal(x0.shape)
        loss, grads = loss_and_grad(model, x0, token_ids, sigma, guidance, eps)
        optimizer.update(model, grads)
        return loss

    state = [model.state, optimizer.state, mx.random.state]
    if args.no_compile:
        return step, state
    return partial(mx.compile, inputs=state, outputs=state)(step), state


def train(args: argparse.Namespace) -> tuple[scenes.TinyScenesModel, list[float], dict]:
    """The model, the loss of every step, and timings (the loop's wall time and its first step's)."""
    mx.random.seed(args.seed)
    model = scenes.TinyScenesModel(seed=args.seed)
    mx.eval(model.parameters())
    optimizer = optim.AdamW(learning_rate=learning_rate(args), weight_decay=args.weight_decay)
    optimizer.init(model.trainable_parameters())
    step, state = make_train_step(model, optimizer, args)
    draw = partial(draw_batch, seed=args.seed, batch=args.batch)
    print(
        f"tiny-scenes: {scenes.parameter_count(model) / 1e6:.2f} M parameters on {mx.default_device()}, "
        f"{len(scenes_data.split_combinations('train'))} train combinations, {args.steps} steps x {args.batch}",
        flush=True,
    )
    pool = multiprocessing.get_context("spawn").Pool(args.workers) if args.workers > 0 else None
    batches = pool.imap(draw, range(args.steps), chunksize=4) if pool else map(draw, range(args.steps))
    try:
        losses, timing = run_steps(step, state, batches, args.steps)
    finally:
        if pool:
            pool.terminate()
    model.eval()
    model.set_batch_size(1)
    return model, losses, timing


def plot_samples(images: list, specs: list[scenes_data.SceneSpec], path: Path) -> None:
    """A grid of generated images, each titled with its caption."""
    # heavy (matplotlib): loaded only when this runs, and pyplot only after the Agg backend is chosen
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cols = 4
    rows = (len(images) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(2.6 * cols, 3.0 * rows), dpi=110, squeeze=False)
    for ax in axes.ravel():
        ax.axis("off")
    for ax, image, spec in zip(axes.ravel(), images, specs, strict=False):
        ax.imshow(np.asarray(image), interpolation="nearest")
        title = f"{spec.first.words}\n{spec.relation} {spec.second.words}\non {spec.background}"
        ax.set_title(title, fontsize=7)
    fig.suptitle(f"held-out combinations, seed = index, {SAMPLE_STEPS} steps, guidance {SAMPLE_GUIDANCE}", fontsize=9)
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png")
    plt.close(fig)


def sampling_record(steps: int = SAMPLE_STEPS) -> dict:
    """The schedule mflux's FLUX.1-dev pipeline uses at the nominal size."""
    from mflux.models.common.config.config import Config  # mflux's Config needs ModelConfig set first

    config = Config(
        width=scenes_data.NOMINAL_SIZE,
        height=scenes_data.NOMINAL_SIZE,
        guidance=SAMPLE_GUIDANCE,
        scheduler="linear",
        model_config=ModelConfig.dev(),
        num_inference_steps=steps,
    )
    return {
        "pipeline": "mflux Flux1.generate_image (FLUX.1-dev model config)",
        "scheduler": "linear",
        "default_steps": steps,
        "height_width": scenes_data.NOMINAL_SIZE,
        "sigmas": [round(float(s), 6) for s in np.array(config.scheduler.sigmas)],
        "note": (
            f"called at {scenes_data.NOMINAL_SIZE}x{scenes_data.NOMINAL_SIZE}, which mflux counts as 256 tokens "
            f"(16 px each); the decoder turns them into the {scenes_data.IMAGE_SIZE}x{scenes_data.IMAGE_SIZE} image"
        ),
    }


def write_model_card(out_dir: str | Path) -> Path:
    """MODEL_CARD.md from tiny-scenes.json: rebuilt whole, so training and evaluation can each update it."""
    out_dir = Path(out_dir)
    m = json.loads((out_dir / MANIFEST_NAME).read_text(encoding="utf-8"))
    tr, prov = m["training"], m["training"]["provenance"]
    ev = m.get("evaluation")
    text = template_environment("teacache.models").get_template("MODEL_CARD_scenes.md.j2").render(
        arch=m["architecture"], tr=tr, prov=prov, rec=m["data_recipe"], w=m["weights"], smp=m["sampling"],
        ev=ev, out_dir=out_dir, sigma_min=SIGMA_MIN, guidance_range=GUIDANCE_RANGE,
        versions=", ".join(f"{k} {v}" for k, v in prov["versions"].items() if v),
        palette=", ".join(f"{k} {tuple(v)}" for k, v in m["data_recipe"]["palette"].items()),
        device_name=(ev or {}).get("device", {}).get("device_name", "an unrecorded device"),
    )  # fmt: skip
    path = out_dir / CARD_NAME
    write_text(path, text)
    return path


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = setup_arg_parser().parse_args(argv)
    error = argument_error(args, PROG)
    if error:
        print(f"{PROG}: {error}", file=sys.stderr)
        return 2
    ModelConfig.precision = mx.float32  # trained in float32 on every backend
    out: Path = args.out

    model, losses, timing = train(args)
    weights = save_weights(model, out / WEIGHTS_NAME, scenes.MODEL_NAME, scenes_data.RECIPE_VERSION)
    training = training_record(args, losses, timing, "teacache.models.train_scenes", argv,
                               guidance_range=list(GUIDANCE_RANGE))  # fmt: skip
    print(f"final loss {training['final_loss']:.4f} (last {training['final_loss_window']} steps), "
          f"{timing['wall_time_s']:.1f} s")  # fmt: skip
    manifest = {
        "format_version": FORMAT_VERSION,
        "name": scenes.MODEL_NAME,
        "weights": weights,
        "architecture": scenes.ARCHITECTURE,
        "data_recipe": scenes_data.recipe(),
        "sampling": sampling_record(),
        "training": training,
        "evaluation": None,
    }
    write_json(out / MANIFEST_NAME, manifest)
    plot_loss(losses, out / "loss.png", "tiny-scenes training loss")

    if args.samples > 0:
        pipeline = scenes.as_pipeline(model, manifest)
        specs = scenes_data.evaluation_specs(args.samples)
        side = scenes_data.NOMINAL_SIZE
        images = [
            pipeline.generate_image(
                seed=i, prompt=s.prompt, num_inference_steps=SAMPLE_STEPS, height=side, width=side,
                guidance=SAMPLE_GUIDANCE,
            ).image
            for i, s in enumerate(specs)
        ]  # fmt: skip
        plot_samples(images, specs, out / "samples.png")
    card = write_model_card(out)
    samples = ", samples.png" if args.samples > 0 else ""
    written = f"{out / WEIGHTS_NAME} ({weights['bytes']:,} bytes, sha256 {weights['sha256']})"
    print(f"wrote {written}, {MANIFEST_NAME}, loss.png{samples}, {card.name}")
    print(f"held-out adherence: python -m bench.quality.scene_adherence --model-dir {shlex.quote(str(out))}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
