"""One generation through a pipeline's own ``generate_image``, with its final latents and loop time."""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

import mlx.core as mx
import numpy as np

from calib.run import fingerprint


@dataclass
class Generation:
    latents: mx.array  # final latents, as the loop left them
    image: np.ndarray  # decoded RGB, uint8, HxWx3
    loop_s: float  # denoising loop wall time: before_loop -> after_loop callbacks (mx.eval per step)
    total_s: float  # whole generate_image, encode and decode included


@dataclass(frozen=True)
class HostLatents:
    """Final latents copied to host memory, with their dtype, for comparing runs after the fact.

    A harness that keeps each run's latents on the device for a later comparison makes every later run's
    peak count them (one latent array more per run kept). On the host they cost the device nothing.
    float32 holds bfloat16 and float16 values exactly, so equality and max-abs are those of the device arrays.
    """

    values: np.ndarray  # float32
    dtype: str  # the device array's, e.g. "mlx.core.bfloat16"

    @classmethod
    def of(cls, latents: mx.array) -> HostLatents:
        return cls(np.array(latents.astype(mx.float32)), str(latents.dtype))

    def equals(self, other: HostLatents) -> bool:
        """Bit-exact: same dtype, shape and values (NaN equal to nothing, as ``mx.array_equal``)."""
        return (
            self.dtype == other.dtype
            and self.values.shape == other.values.shape
            and bool(np.array_equal(self.values, other.values))
        )

    def max_abs(self, other: HostLatents) -> float:
        return float(np.max(np.abs(self.values - other.values)))


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


# A wrapper or recorder only adds work, so a paired loop-time ratio below 1 is timing noise. A median
# outside this band (recorded / vanilla - 1) says the machine was busy, not what the wrapper costs: it is
# reported as unreliable and not stored as a figure. Lower edge: the medians in docs/ and results/ lie
# within -0.5%..+14%, but for two recordings at -7% and -12% on a 2-core machine shared with other work.
# Upper edge: far above the largest real cost measured, +117% (tiny-shapes on an H200, where recording runs
# the predict uncompiled).
PLAUSIBLE_OVERHEAD = (-0.05, 5.0)


def implausible(median: float, band: tuple[float, float] = PLAUSIBLE_OVERHEAD) -> str | None:
    """Why a median overhead is not a figure; None when it lies in the plausible band."""
    lo, hi = band
    if lo <= median <= hi:
        return None
    return (
        f"median {100 * median:+.1f}% is outside the plausible band {100 * lo:+.0f}%..{100 * hi:+.0f}%: the "
        "machine was busy with other work; measure again when it is idle"
    )


def paired_overhead(ratios: list[float], band: tuple[float, float] = PLAUSIBLE_OVERHEAD) -> dict:
    """Median/min/max overhead of paired (wrapped / vanilla) loop-time ratios, or why they are not a figure."""
    if not ratios:
        raise ValueError("paired_overhead: expected at least one pair")
    median = statistics.median(ratios) - 1.0
    summary = {"pairs": len(ratios), "loop_time_ratios": [float(r) for r in ratios]}
    reason = implausible(median, band)
    if reason is not None:
        return {**summary, "reliable": False, "reason": reason, "median": None, "min": None, "max": None}
    return {**summary, "reliable": True, "median": median, "min": min(ratios) - 1.0, "max": max(ratios) - 1.0}


def settings_fingerprint(settings, variant: str | None = None, **extra) -> dict:
    """What makes two runs over prompts and seeds the same run (``teacache-calib record``, ``teacache-bench
    sweep``): the model, the generation settings, the prompts and seeds, ``extra`` (the command's own settings)
    and the environment; the variant joins once the model has loaded and said which it is."""
    fp = {
        "model": settings.model,
        "base_model": settings.base_model,
        "quantize": settings.quantize,
        "steps": settings.steps,
        "size": f"{settings.width}x{settings.height}",
        "guidance": settings.guidance,
        "prompts": settings.prompts,
        "seeds": settings.seeds,
        **extra,
        **fingerprint.environment(settings.model, settings.base_model, settings.loras),
    }
    if variant is not None:
        fp["variant"] = variant
    return fp
