"""``teacache-bench step-cost``'s generations: one arm installed through ``apply_teacache``, switched in and out
by step (:mod:`bench.timing.step_cost_switch`), timed per step, its memory read per phase, its final latents
compared with a vanilla reference run of the same process."""

from __future__ import annotations

import json
import warnings
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import mlx.core as mx

from bench.timing.step_cost_records import ARM, MIXED, REFERENCE, WHOLE
from bench.timing.step_cost_switch import (
    ARM_STEP,
    VANILLA_STEP,
    AfterLoopMemory,
    Pipeline,
    StepClock,
    registered,
    switched,
)
from calib.run.generation import HostLatents, generate
from teacache import apply_teacache
from teacache.rescale import RescaleFunction

# The rescale function of both TeaCache arms: the raw signal, since neither arm is meant to skip a step.
IDENTITY = RescaleFunction((1.0, 0.0), provenance={"source": "identity: the arms compute every step"})
ARMS = {
    "forced": "TeaCache with every decision forced (skip_first_n_steps = steps): the signal is read after the step",
    "gated": "TeaCache with every step after the first decided by the signal at a threshold nothing stays under "
    "(1e-12, skip_last_n_steps 0): each step reads its signal back while it is built, and is computed",
    "vanilla": "mflux's own call on both sides: what the instrument measures when the arms do not differ",
}


def arm_settings(arm: str, steps: int) -> dict | None:
    """``apply_teacache``'s keywords of ``arm`` (None: nothing installed)."""
    if arm == "forced":
        return {"rel_l1_thresh": 1.0, "coefficients": IDENTITY, "skip_first_n_steps": steps}
    if arm == "gated":
        return {"rel_l1_thresh": 1e-12, "coefficients": IDENTITY, "skip_first_n_steps": 1, "skip_last_n_steps": 0}
    if arm == "vanilla":
        return None
    raise ValueError(f"arm: expected one of {', '.join(ARMS)}, got {arm!r}")


def mixed_schedule(steps: int, block: int, arm_first: bool) -> str:
    """Blocks of ``block`` steps, the two sides alternating: ``vvvvpppp...`` (``ppppvvvv...`` with ``arm_first``)."""
    first, other = (ARM_STEP, VANILLA_STEP) if arm_first else (VANILLA_STEP, ARM_STEP)
    return "".join(first if (i // block) % 2 == 0 else other for i in range(steps))


@contextmanager
def _installed(model, arm: str, steps: int) -> Iterator:
    settings = arm_settings(arm, steps)
    if settings is None:
        yield None
        return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "cannot skip any step": by design of these arms
        with apply_teacache(model, **settings) as handle:
            yield handle


@dataclass
class Run:
    """One generation's measurements."""

    schedule: str
    clock: StepClock
    loop_s: float
    total_s: float
    latents: HostLatents
    cache_bytes: int
    reasons: dict
    skipped: int
    arm_steps: tuple[int, ...]  # the steps the arm's controller decided (none for the vanilla arm)


class Session:
    """One loaded pipeline under measurement, with the generation every run repeats."""

    def __init__(self, model, prompt: str, seed: int, steps: int, width: int, height: int, guidance: float) -> None:
        self.model = model
        self.steps = steps
        self.generation = {"prompt": prompt, "seed": seed, "steps": steps, "width": width, "height": height,
                           "guidance": guidance}  # fmt: skip
        self.reference: HostLatents | None = None

    def run(self, arm: str, schedule: str, memory: bool = False) -> Run:
        """One generation of ``arm`` by ``schedule`` (``v``: vanilla's call that step, ``p``: the arm's)."""
        model = self.model
        clock = StepClock(memory)
        mx.synchronize()
        if memory:
            mx.clear_cache()
        mx.reset_peak_memory()
        clock.phases.base = mx.get_active_memory()
        vanilla = Pipeline.of(model)
        with registered(model, clock), _installed(model, arm, self.steps) as handle:
            with switched(model, vanilla, schedule, clock), registered(model, AfterLoopMemory(clock)):
                out = generate(model, **self.generation)
            cache = handle.cache_bytes if handle is not None else 0
            log = list(handle.stats.log) if handle is not None else []
        mx.synchronize()
        clock.phases.decode_peak = mx.get_peak_memory()
        if len(clock.stamps) != self.steps + 1:
            raise RuntimeError(
                f"the pipeline called its step function at {len(clock.stamps) - 1} of {self.steps} steps; "
                "step-cost times each step from its first call"
            )
        reasons = dict(sorted(Counter(d.reason for d in log).items()))
        skipped = sum(not d.compute for d in log)
        latents = HostLatents.of(out.latents)
        return Run(
            schedule, clock, out.loop_s, out.total_s, latents, cache, reasons, skipped, tuple(d.step for d in log)
        )


def warm_up(session: Session, arms: list[str], block: int) -> None:
    """Every path once (the first steps JIT-compile), then the vanilla run every later one is compared with."""
    steps = session.steps
    session.run("vanilla", VANILLA_STEP * steps)
    for arm in arms:
        session.run(arm, mixed_schedule(steps, block, arm_first=False))
        session.run(arm, ARM_STEP * steps, memory=True)
    session.reference = session.run("vanilla", VANILLA_STEP * steps).latents


def rows(run: Run, reference: HostLatents, kind: str, arm: str, role: str, index: int, position: int,
         block: int) -> tuple[dict, list[dict]]:  # fmt: skip
    """(generations.csv's row, steps.csv's rows) of one run."""
    who = {"kind": kind, "arm": arm, "role": role, "index": index}
    phases = run.clock.phases
    memory = {}
    if run.clock.memory:
        memory = {
            "base_bytes": phases.base, "before_loop_peak_bytes": phases.before_loop_peak,
            "loop_peak_bytes": max(phases.step_peaks), "decode_peak_bytes": phases.decode_peak,
            "held_after_loop_bytes": phases.held_after_loop,
        }  # fmt: skip
    generation = {
        **who, "position": position, "schedule": run.schedule, "block": block, "loop_s": run.loop_s,
        "total_s": run.total_s, "exact": run.latents.equals(reference), "max_abs": run.latents.max_abs(reference),
        "cache_bytes": run.cache_bytes, "reasons": json.dumps(run.reasons, sort_keys=True), **memory,
    }  # fmt: skip
    peaks = phases.step_peaks if run.clock.memory else [None] * len(run.clock.seconds())
    steps = [{**who, "step": i, "seconds": s, "peak_bytes": p}
             for i, (s, p) in enumerate(zip(run.clock.seconds(), peaks, strict=True))]  # fmt: skip
    return generation, steps


def mixed_unit(session: Session, arm: str, index: int, position: int, block: int) -> tuple[list[dict], list[dict], Run]:
    """The arm's ``index``-th mixed generation; the side that starts flips from one generation to the next."""
    run = session.run(arm, mixed_schedule(session.steps, block, arm_first=index % 2 == 1))
    generation, steps = rows(run, session.reference, MIXED, arm, ARM, index, position, block)
    return [generation], steps, run


def whole_unit(session: Session, order: list[str], index: int) -> tuple[list[dict], list[dict], list[Run]]:
    """One repeat of whole runs, vanilla's (the reference of the repeat) and each arm's, in ``order`` (a name of
    ``order`` that is None stands for vanilla's reference run); each with its memory read per phase."""
    generations, steps, runs = [], [], []
    for position, arm in enumerate(order):
        role = REFERENCE if arm is None else ARM
        letter = VANILLA_STEP if arm is None else ARM_STEP
        run = session.run("vanilla" if arm is None else arm, letter * session.steps, memory=True)
        generation, step_rows = rows(run, session.reference, WHOLE, arm or "vanilla", role, index, position, 0)
        generations.append(generation)
        steps += step_rows
        runs.append(run)
    return generations, steps, runs
