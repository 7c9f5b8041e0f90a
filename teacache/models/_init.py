"""Deterministic random weights for the random-weight models (embedded and full-size), from a seed and nothing else."""

from __future__ import annotations

from collections.abc import Callable

import mlx.core as mx
from mlx import nn


def redraw_linears(
    module: nn.Module,
    seed: int,
    shape: Callable[[int, int], tuple[int, int]] = lambda out_d, in_d: (out_d, in_d),
    dtype: mx.Dtype = mx.float32,
    evaluate_every_bytes: int | None = None,
) -> None:
    """Draw every Linear (in name order) uniform in +-1/sqrt(fan_in) from explicit keys derived from ``seed``.

    ``shape`` maps a Linear's (out, in) to the size to draw, so a model can be shrunk in the same pass;
    ``dtype``: the drawn weights' dtype. ``evaluate_every_bytes``: materialise the drawn weights each time
    about that many bytes are pending, so the temporaries of a large model never exist all at once (None:
    leave them lazy). The global MLX random state is neither read nor changed.
    """
    key = mx.random.key(seed)
    pending: list[mx.array] = []
    pending_bytes = 0
    for _name, layer in sorted(module.named_modules(), key=lambda item: item[0]):
        if not isinstance(layer, nn.Linear):
            continue
        key, k_w, k_b = mx.random.split(key, 3)
        out_dim, in_dim = shape(*layer.weight.shape)
        bound = (1.0 / in_dim) ** 0.5
        layer.weight = mx.random.uniform(-bound, bound, (out_dim, in_dim), dtype=dtype, key=k_w)
        pending.append(layer.weight)
        if "bias" in layer:
            layer.bias = mx.random.uniform(-bound, bound, (out_dim,), dtype=dtype, key=k_b)
            pending.append(layer.bias)
        pending_bytes += layer.weight.nbytes
        if evaluate_every_bytes is not None and pending_bytes >= evaluate_every_bytes:
            mx.eval(pending, key)
            pending, pending_bytes = [], 0


def drawn(transformer: nn.Module, seed: int) -> nn.Module:
    """An embedded model's transformer with every Linear drawn from ``seed``, cast to mflux's precision and
    evaluated."""
    from mflux.models.common.config.model_config import ModelConfig

    redraw_linears(transformer, seed)
    transformer.set_dtype(ModelConfig.precision)
    mx.eval(transformer.parameters())
    return transformer
