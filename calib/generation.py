"""One generation through a pipeline's own ``generate_image``, with its final latents and loop time."""

from __future__ import annotations

import time
from dataclasses import dataclass

import mlx.core as mx
import numpy as np


@dataclass
class Generation:
    latents: mx.array  # final latents, as the loop left them
    image: np.ndarray  # decoded RGB, uint8, HxWx3
    loop_s: float  # denoising loop wall time: before_loop -> after_loop callbacks (mx.eval per step)
    total_s: float  # whole generate_image, encode and decode included


class _LoopProbe:
    """mflux callback: times the denoising loop and keeps the final latents."""

    def __init__(self) -> None:
        self.start = self.end = 0.0
        self.latents = None

    def call_before_loop(self, seed, prompt, latents, config, **_) -> None:
        self.start = time.perf_counter()

    def call_after_loop(self, seed, prompt, latents, config) -> None:
        mx.eval(latents)
        self.end = time.perf_counter()
        self.latents = latents


def generate(model, prompt: str, seed: int, steps: int, width: int, height: int, guidance: float) -> Generation:
    probe = _LoopProbe()
    registry = model.callbacks
    registry.register(probe)
    try:
        start = time.perf_counter()
        result = model.generate_image(
            seed=seed, prompt=prompt, num_inference_steps=steps, height=height, width=width, guidance=guidance
        )
        total = time.perf_counter() - start
    finally:
        for lst in (registry.before_loop, registry.in_loop, registry.after_loop, registry.interrupt):
            lst[:] = [c for c in lst if c is not probe]
    image = np.asarray(result.image.convert("RGB"), dtype=np.uint8)
    return Generation(latents=probe.latents, image=image, loop_s=probe.end - probe.start, total_s=total)
