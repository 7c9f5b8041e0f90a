"""What training an embedded model needs whatever it draws: the learning-rate schedule, the weights file,
the loss plot."""

from __future__ import annotations

import argparse
import hashlib
from collections.abc import Callable
from pathlib import Path

import mlx.core as mx
import mlx.optimizers as optim
import numpy as np
from mlx import nn
from mlx.utils import tree_flatten
from safetensors.numpy import save

from teacache.io import atomic_path

FINAL_LOSS_WINDOW = 200


def effective_warmup(args: argparse.Namespace) -> int:
    return max(0, min(args.warmup, args.steps // 2))


def learning_rate(args: argparse.Namespace) -> Callable[[mx.array], mx.array]:
    """Linear warmup from 1% to ``args.lr``, then cosine decay to 1% at ``args.steps``."""
    warmup = effective_warmup(args)
    decay = optim.cosine_decay(args.lr, max(1, args.steps - warmup), args.lr * 0.01)
    if warmup == 0:
        return decay
    return optim.join_schedules([optim.linear_schedule(args.lr * 0.01, args.lr, warmup), decay], [warmup])


def save_weights(model: nn.Module, path: Path, name: str, recipe_version: int) -> tuple[str, int]:
    """Float32 safetensors, written atomically; returns (sha256, bytes).

    The header holds one metadata key: safetensors writes a metadata dict in no fixed order, so two keys
    would give the same weights a different SHA-256 from one run to the next."""
    arrays = {k: np.array(v.astype(mx.float32)) for k, v in tree_flatten(model.parameters())}
    blob = save(arrays, metadata={"model": f"{name}, data recipe {recipe_version}"})
    with atomic_path(path) as tmp:
        tmp.write_bytes(blob)
    return hashlib.sha256(blob).hexdigest(), len(blob)


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
