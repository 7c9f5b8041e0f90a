"""Two arms in one generation for ``teacache-bench step-cost``: which one runs each step, and when each step begins.

Each step a pipeline calls either its transformer (FLUX.1, Qwen-Image: ``model.transformer``) or a predict
function it builds once per generation from its transformer (FLUX.2, Z-Image: ``model._predict(transformer)``,
``mx.compile``d by mflux). ``apply_teacache`` swaps its proxy in for the transformer and, where the pipeline
compiles its predict, a predict of its own too. :func:`switched` stands one level above whichever of the two
the pipeline calls each step, holding vanilla's (mflux's own transformer, or mflux's own predict built and
compiled as mflux builds it) and the arm's (whatever ``apply_teacache`` installed, untouched), and calls one of
them per step as the schedule says. It reads no adapter's internals: it compares what the pipeline holds before
and after ``apply_teacache``.

:class:`StepClock` stamps the start of each step's first call (mflux evaluates the latents at the end of every
step, so the device is idle there) and the end of the loop; with ``memory=True`` it also reads the allocator's
peak at each stamp (the peak of the step before), so the phases of a generation are: before the loop, each step,
and the decode after the loop. :class:`AfterLoopMemory`, registered after the controller, reads what is held
once the loop and the controller's end-of-loop work are done.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import mlx.core as mx
from mlx import nn

VANILLA_STEP, ARM_STEP = "v", "p"  # a schedule's letters: the step runs vanilla's call or the arm's


@dataclass
class Phases:
    """Allocator readings of one generation, in bytes (absolute, as MLX reports them)."""

    base: int = 0  # active memory when the generation starts
    before_loop_peak: int = 0  # text encoding and latents, up to the first step
    step_peaks: list[int] = field(default_factory=list)  # each step's evaluation
    held_after_loop: int = 0  # active memory once the loop and its end-of-loop callbacks are done
    decode_peak: int = 0  # from the end of the loop to the end of generate_image


def _mark() -> tuple[int, int]:
    """(peak since the last mark, active now), the peak reset for the next phase."""
    mx.synchronize()
    peak, active = mx.get_peak_memory(), mx.get_active_memory()
    mx.reset_peak_memory()
    return peak, active


class StepClock:
    """mflux callback: the step the loop is on, a stamp at the start of each step and at the end of the loop.

    Registered before ``apply_teacache``, so the loop's end is stamped before the controller's own end-of-loop
    work, as each step's start is stamped before the proxy's call.
    """

    def __init__(self, memory: bool = False) -> None:
        self.memory = memory
        self.phases = Phases()
        self.step = 0
        self.stamps: list[float] = []
        self._stamped = -1

    def call_before_loop(self, seed, prompt, latents, config, **_) -> None:
        self.step, self.stamps, self._stamped = 0, [], -1

    def call_in_loop(self, t, seed, prompt, latents, config, time_steps=None, **_) -> None:
        self.step += 1

    def call_after_loop(self, seed, prompt, latents, config) -> None:
        self.stamps.append(time.perf_counter())
        if self.memory:
            self.phases.step_peaks.append(_mark()[0])

    def stamp(self) -> None:
        """At every call of the pipeline's step function; only its first call of a step counts."""
        if self._stamped == self.step:
            return
        self._stamped = self.step
        if self.memory:
            peak, _ = _mark()
            if self.step == 0:
                self.phases.before_loop_peak = peak
            else:
                self.phases.step_peaks.append(peak)
        self.stamps.append(time.perf_counter())

    def seconds(self) -> list[float]:
        """Each step's time: from its start to the next step's (the last one: to the end of the loop)."""
        return [b - a for a, b in zip(self.stamps, self.stamps[1:], strict=False)]


class AfterLoopMemory:
    """mflux callback, registered after the controller: what is held once the loop's end is handled."""

    def __init__(self, clock: StepClock) -> None:
        self.clock = clock

    def call_after_loop(self, seed, prompt, latents, config) -> None:
        if self.clock.memory:
            mx.synchronize()
            self.clock.phases.held_after_loop = mx.get_active_memory()


@contextlib.contextmanager
def registered(model, *callbacks) -> Iterator[None]:
    """``callbacks`` on the pipeline's registry for the block, removed again however it ends."""
    registry = model.callbacks
    for callback in callbacks:
        registry.register(callback)
    try:
        yield
    finally:
        for lst in (registry.before_loop, registry.in_loop, registry.after_loop, registry.interrupt):
            lst[:] = [c for c in lst if not any(c is callback for callback in callbacks)]


class _TransformerSwitch(nn.Module):
    """Stands in for ``model.transformer``: each call goes to vanilla's transformer or the arm's, by step."""

    def __init__(self, sides: tuple, choose: Callable[[], int], clock: StepClock) -> None:
        super().__init__()
        object.__setattr__(self, "_sides", sides)  # kept out of the module's parameter tree
        object.__setattr__(self, "_choose", choose)
        object.__setattr__(self, "_clock", clock)

    def __call__(self, *args, **kwargs):
        self._clock.stamp()
        return self._sides[self._choose()](*args, **kwargs)


@dataclass(frozen=True)
class Pipeline:
    """What a pipeline calls each step, before TeaCache: its transformer and its own predict factory (if any)."""

    transformer: object
    predict: Callable | None

    @classmethod
    def of(cls, model) -> Pipeline:
        return cls(model.transformer, getattr(model, "_predict", None))


@contextlib.contextmanager
def switched(model, vanilla: Pipeline, schedule: str, clock: StepClock) -> Iterator[None]:
    """For the block, step ``i`` of each generation calls vanilla's step function where ``schedule[i]`` is
    :data:`VANILLA_STEP` and the arm's (what the pipeline holds now) where it is :data:`ARM_STEP`.

    ``vanilla`` is what the pipeline held before the arm was installed (:meth:`Pipeline.of`); with nothing
    installed in between, both sides call one and the same function (the arm that measures the instrument).
    A pipeline that builds a predict per generation is switched there, so a compiled predict stays compiled.
    """
    if len(schedule) == 0 or set(schedule) - {VANILLA_STEP, ARM_STEP}:
        raise ValueError(f"schedule: expected letters {VANILLA_STEP!r} and {ARM_STEP!r}, got {schedule!r}")

    def choose() -> int:
        return 0 if schedule[min(clock.step, len(schedule) - 1)] == VANILLA_STEP else 1

    arm_transformer = model.transformer
    if vanilla.predict is None:  # the pipeline calls its transformer each step
        model.transformer = _TransformerSwitch((vanilla.transformer, arm_transformer), choose, clock)
        try:
            yield
        finally:
            model.transformer = arm_transformer
        return
    own_predict = "_predict" in vars(model)
    arm_predict = model._predict
    same = arm_predict is vanilla.predict and arm_transformer is vanilla.transformer

    def factory(_transformer):
        ours = vanilla.predict(vanilla.transformer)
        sides = (ours, ours if same else arm_predict(arm_transformer))

        def predict(*args, **kwargs):
            clock.stamp()
            return sides[choose()](*args, **kwargs)

        return predict

    object.__setattr__(model, "_predict", factory)
    try:
        yield
    finally:
        if own_predict:
            object.__setattr__(model, "_predict", arm_predict)
        else:
            object.__delattr__(model, "_predict")
