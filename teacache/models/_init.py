"""Deterministic random weights for the embedded random-weight models, from a seed and nothing else."""

from __future__ import annotations

from collections.abc import Callable

import mlx.core as mx
from mlx import nn


def redraw_linears(
    module: nn.Module, seed: int, shape: Callable[[int, int], tuple[int, int]] = lambda out_d, in_d: (out_d, in_d)
) -> None:
    """Draw every Linear (in name order) uniform in +-1/sqrt(fan_in) from explicit keys derived from ``seed``.

    ``shape`` maps a Linear's (out, in) to the size to draw, so a model can be shrunk in the same pass.
    The global MLX random state is neither read nor changed.
    """
    key = mx.random.key(seed)
    for _name, layer in sorted(module.named_modules(), key=lambda item: item[0]):
        if isinstance(layer, nn.Linear):
            key, k_w, k_b = mx.random.split(key, 3)
            out_dim, in_dim = shape(*layer.weight.shape)
            bound = (1.0 / in_dim) ** 0.5
            layer.weight = mx.random.uniform(-bound, bound, (out_dim, in_dim), key=k_w)
            if "bias" in layer:
                layer.bias = mx.random.uniform(-bound, bound, (out_dim,), key=k_b)
