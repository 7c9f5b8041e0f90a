"""The signal TeaCache gates on, shared by the runtime gate and ``teacache-calib record``."""

from __future__ import annotations

import mlx.core as mx


def rel_l1(current: mx.array, previous: mx.array) -> mx.array:
    """mean|current - previous| / mean|previous|, as a lazy float32 scalar (upstream TeaCache's measure).

    A zero denominator gives inf/NaN on purpose: the gate treats a non-finite signal as "compute".
    """
    current = current.astype(mx.float32)
    previous = previous.astype(mx.float32)
    return mx.mean(mx.abs(current - previous)) / mx.mean(mx.abs(previous))


def mean_abs(value: mx.array) -> mx.array:
    return mx.mean(mx.abs(value.astype(mx.float32)))
