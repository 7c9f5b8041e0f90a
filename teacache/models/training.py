"""What training an embedded model needs whatever it draws: the learning-rate schedule, the step loop, the
weights file, the manifest's training record and the loss plot."""

from __future__ import annotations

import argparse
import hashlib
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path

import mlx.core as mx
import mlx.optimizers as optim
import numpy as np
from mlx import nn
from mlx.utils import tree_flatten
from safetensors.numpy import save
from tqdm import tqdm

from teacache.errors import InputError
from teacache.io import atomic_path
from teacache.models._weights import parameter_count
from teacache.outputs import Writes, check_out_dir
from teacache.provenance import collect

FINAL_LOSS_WINDOW = 200
# what a training folder holds: the run's log, checkpoint, weights, manifest and loss plot; the card commands'
# samples and model card (teacache-bench adherence / scene-adherence / open-card write into the same folder)
TRAINING_OUTPUTS = ("train.log", "checkpoint", "*.safetensors", "*.json", "loss.png", "samples.png", "MODEL_CARD.md")


def training_writes(command: str) -> Writes:
    """What a training run (and the card commands after it) writes into its --out: the output rule's view of it.
    Retraining into the committed weights folder is allowed and said (the trainers exist to regenerate it)."""
    return Writes(command=command, names=TRAINING_OUTPUTS, regenerates=("teacache/models/weights",))


def add_optimizer_arguments(p: argparse.ArgumentParser, steps: int, batch: int, lr: float, warmup: int) -> None:
    """The options every trainer takes, in this order and with these defaults: --steps, --batch, --seed, --lr
    (AdamW's peak), --warmup, --weight-decay."""
    p.add_argument("--steps", type=int, default=steps)
    p.add_argument("--batch", type=int, default=batch)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--lr", type=float, default=lr, help="peak learning rate (AdamW, warmup + cosine decay)")
    p.add_argument("--warmup", type=int, default=warmup, help="linear warmup steps")
    p.add_argument("--weight-decay", type=float, default=0.0)


def argument_error(args: argparse.Namespace, command: str) -> str | None:
    """One line naming the first bad training argument, or None; the output folder is created when all are good.

    ``--out`` follows the output rule (teacache.outputs): new, empty or a training folder, outside the
    checkout's tracked folders but the weights', writable."""
    positive = [("--steps", args.steps), ("--batch", args.batch), ("--lr", args.lr)]
    at_least_zero = [("--warmup", args.warmup), ("--samples", args.samples), ("--weight-decay", args.weight_decay),
                     ("--workers", getattr(args, "workers", 0))]  # fmt: skip
    for name, value in positive:
        if not value > 0:
            return f"{name}: expected a number > 0, got {value}"
    for name, value in at_least_zero:
        if not value >= 0:
            return f"{name}: expected a number >= 0, got {value}"
    try:
        check_out_dir(args.out, "--out", training_writes(command))
    except InputError as exc:
        return str(exc)
    try:
        args.out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        return f"--out: cannot create {args.out}: {exc.strerror}"
    return None


def parse_arguments(
    parser: argparse.ArgumentParser, argv: list[str] | None, command: str, check: Callable | None = None
) -> tuple[list[str], argparse.Namespace | None]:
    """(the command's words, its parsed arguments); the arguments are None once the first bad one (``check``'s,
    then :func:`argument_error`'s) is printed after ``command``, and the command exits 2."""
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(argv)
    error = (check(args) if check else None) or argument_error(args, command)
    if error:
        print(f"{command}: {error}", file=sys.stderr)
        return argv, None
    return argv, args


def effective_warmup(args: argparse.Namespace) -> int:
    return max(0, min(args.warmup, args.steps // 2))


def learning_rate(args: argparse.Namespace) -> Callable[[mx.array], mx.array]:
    """Linear warmup from 1% to ``args.lr``, then cosine decay to 1% at ``args.steps``."""
    warmup = effective_warmup(args)
    decay = optim.cosine_decay(args.lr, max(1, args.steps - warmup), args.lr * 0.01)
    if warmup == 0:
        return decay
    return optim.join_schedules([optim.linear_schedule(args.lr * 0.01, args.lr, warmup), decay], [warmup])


def run_steps(step: Callable, state: list, batches: Iterable, steps: int) -> tuple[list[float], dict]:
    """``step`` on ``steps`` batches of (images, token ids); returns every step's loss and the timings.

    Each step is evaluated asynchronously, so the next batch is drawn while it runs. Timings: the loop's
    wall time and its first step's (which includes compiling the step and, on a GPU, its kernels)."""
    losses: list[float] = []
    pending = None
    first_step = None
    start = time.perf_counter()
    bar = tqdm(range(steps), desc="train", mininterval=5.0, file=sys.stdout)
    for i, (x0, tokens) in zip(bar, batches, strict=False):
        loss = step(mx.array(x0), mx.array(tokens))
        mx.async_eval(state, loss)
        if pending is not None:
            losses.append(pending.item())
            first_step = first_step or time.perf_counter() - start
        pending = loss
        if i % 50 == 49:
            bar.set_postfix(loss=f"{np.mean(losses[-50:]):.4f}", refresh=False)
    losses.append(pending.item())
    mx.eval(state)
    wall = time.perf_counter() - start
    bar.close()
    return losses, {"wall_time_s": wall, "first_step_s": first_step or wall}


def training_record(args: argparse.Namespace, losses: list[float], timing: dict, module: str, argv: list[str],
                    **extra) -> dict:  # fmt: skip
    """The manifest's ``training`` section: settings, final loss, timings, the loss curve and provenance."""
    return {
        "steps": args.steps,
        "batch": args.batch,
        "seed": args.seed,
        "lr": args.lr,
        "warmup": effective_warmup(args),
        "weight_decay": args.weight_decay,
        "sigma_loc": args.sigma_loc,
        "sigma_scale": args.sigma_scale,
        **extra,
        "compiled": not args.no_compile,
        "final_loss": float(np.mean(losses[-FINAL_LOSS_WINDOW:])),
        "final_loss_window": min(FINAL_LOSS_WINDOW, len(losses)),
        **timing,
        "loss_per_10_steps": [float(np.mean(losses[i : i + 10])) for i in range(0, len(losses), 10)],
        "provenance": collect(argv=["python", "-m", module, *argv]),
    }


def save_weights(model: nn.Module, path: Path, name: str, recipe_version: int) -> dict:
    """Float32 safetensors, written atomically; returns the manifest's ``weights`` section.

    The header holds one metadata key: safetensors writes a metadata dict in no fixed order, so two keys
    would give the same weights a different SHA-256 from one run to the next."""
    arrays = {k: np.array(v.astype(mx.float32)) for k, v in tree_flatten(model.parameters())}
    blob = save(arrays, metadata={"model": f"{name}, data recipe {recipe_version}"})
    with atomic_path(path) as tmp:
        tmp.write_bytes(blob)
    return {"file": path.name, "sha256": hashlib.sha256(blob).hexdigest(), "bytes": len(blob), "dtype": "float32",
            "parameters": parameter_count(model)}  # fmt: skip


def plot_loss(losses: list[float], path: Path, title: str) -> None:
    # heavy (matplotlib): loaded only when this runs, and pyplot only after the Agg backend is chosen
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = np.arange(1, len(losses) + 1)
    window = max(1, min(50, len(losses) // 10))
    smooth = np.convolve(losses, np.ones(window) / window, mode="valid")
    fig, ax = plt.subplots(figsize=(6, 3.5), dpi=120)
    ax.plot(steps, losses, lw=0.5, alpha=0.35, label="per step")
    ax.plot(steps[window - 1 :], smooth, lw=1.5, label=f"mean of {window}")
    ax.set_yscale("log")
    ax.set_xlabel("step")
    ax.set_ylabel("flow-matching MSE")
    ax.set_title(title)
    ax.legend()
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png")
    plt.close(fig)
