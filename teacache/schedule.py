"""A skip schedule fixed before the generation, run through TeaCache's own proxy and residual reuse.

Comparing TeaCache with a fixed schedule that skips as many steps separates what caching buys from
what adaptivity buys. :class:`ScheduleGate` has the ``decide()`` / ``reset()`` / ``log`` interface of
:class:`teacache.gate.Gate`, so the same :class:`teacache.core.StepController` drives it: the same
signal is measured (and logged) at every step and the same cached residual replaces the body on a
skipped step; only the decision differs. Nothing here changes the TeaCache rule.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from teacache._compat import check_mflux_version
from teacache.core import StepController, is_applied
from teacache.errors import InputError, InputTypeError, StateError
from teacache.gate import DEFAULT_SKIP_FIRST, DEFAULT_SKIP_LAST, REASON_SKIP, GateConfig, StepDecision, check_flag
from teacache.handle import TeaCacheHandle
from teacache.rescale import RescaleFunction

REASON_SCHEDULED = "scheduled"  # the schedule computes this step


@dataclass(frozen=True)
class StaticSchedule:
    """Which steps of an N-step generation are computed (True) and which reuse the cached residual.

    ``label`` names the schedule in tables ("every:2", "even:10", ...). Step 0 must be computed:
    nothing is cached before it.
    """

    compute: tuple[bool, ...]
    label: str = ""

    def __post_init__(self) -> None:
        mask = tuple(self.compute)
        if not mask or not all(isinstance(v, bool) for v in mask):
            raise InputError(f"compute: expected a non-empty sequence of booleans, got {self.compute!r}")
        if not mask[0]:
            raise InputError("compute: step 0 must be computed (nothing is cached before the first step)")
        object.__setattr__(self, "compute", mask)

    @property
    def num_steps(self) -> int:
        return len(self.compute)

    @property
    def computed(self) -> int:
        return sum(self.compute)

    @property
    def skipped_steps(self) -> list[int]:
        return [s for s, c in enumerate(self.compute) if not c]

    @property
    def ideal_speedup(self) -> float:
        return self.num_steps / self.computed

    @classmethod
    def from_skipped(cls, num_steps: int, skipped_steps: Iterable[int], label: str = "") -> StaticSchedule:
        """The schedule that skips exactly ``skipped_steps`` (indices in 1..num_steps-1)."""
        _check_steps(num_steps)
        skipped = sorted({int(s) for s in skipped_steps})
        outside = [s for s in skipped if not 0 < s < num_steps]
        if outside:
            raise InputError(f"skipped_steps: {outside} outside 1..{num_steps - 1}")
        return cls(tuple(s not in skipped for s in range(num_steps)), label or f"skip:{skipped}")

    @classmethod
    def every(
        cls,
        num_steps: int,
        k: int,
        skip_first_n_steps: int = DEFAULT_SKIP_FIRST,
        skip_last_n_steps: int = DEFAULT_SKIP_LAST,
    ) -> StaticSchedule:
        """Compute every k-th step after the forced first ones; the forced first and last are computed."""
        _check_steps(num_steps)
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise InputError(f"k: expected an integer >= 1, got {k!r}")
        first, last = _check_forced(num_steps, skip_first_n_steps, skip_last_n_steps)
        mask = tuple(s < first or s >= num_steps - last or (s - first) % k == k - 1 for s in range(num_steps))
        return cls(mask, f"every:{k}")

    @classmethod
    def evenly(
        cls,
        num_steps: int,
        computed: int,
        skip_first_n_steps: int = DEFAULT_SKIP_FIRST,
        skip_last_n_steps: int = DEFAULT_SKIP_LAST,
    ) -> StaticSchedule:
        """Exactly ``computed`` steps: the forced first and last ones, the rest spread evenly between them."""
        _check_steps(num_steps)
        first, last = _check_forced(num_steps, skip_first_n_steps, skip_last_n_steps)
        if isinstance(computed, bool) or not isinstance(computed, int) or not first + last <= computed <= num_steps:
            raise InputError(
                f"computed: expected an integer in {first + last}..{num_steps} (the forced first {first} and last "
                f"{last} steps are always computed), got {computed!r}"
            )
        inner = computed - first - last
        lo, hi = first - 1, num_steps - last  # the spread points fall strictly between these two steps
        gap = (hi - lo) / (inner + 1)
        chosen = {math.floor(lo + gap * i + 0.5) for i in range(1, inner + 1)}  # gap >= 1: distinct steps
        mask = tuple(s < first or s >= num_steps - last or s in chosen for s in range(num_steps))
        return cls(mask, f"even:{computed}")


def most_common(num_steps: int, schedules: Iterable[Sequence[int]], label: str = "") -> StaticSchedule:
    """The skip schedule seen most often (e.g. TeaCache's at one threshold over prompts and seeds).

    Ties go to the schedule that skips fewer steps, then to the lexicographically smaller one, so the
    same runs always give the same schedule.
    """
    counts = Counter(tuple(sorted(int(s) for s in steps)) for steps in schedules)
    if not counts:
        raise InputError("schedules: expected at least one skip schedule")
    best = min(counts, key=lambda steps: (-counts[steps], len(steps), steps))
    return StaticSchedule.from_skipped(num_steps, best, label or "most-common")


def _check_steps(num_steps: int) -> None:
    if isinstance(num_steps, bool) or not isinstance(num_steps, int) or num_steps < 1:
        raise InputError(f"num_steps: expected an integer >= 1, got {num_steps!r}")


def _check_forced(num_steps: int, first: int, last: int) -> tuple[int, int]:
    for name, v in (("skip_first_n_steps", first), ("skip_last_n_steps", last)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise InputError(f"{name}: expected an integer >= 0, got {v!r}")
    first = max(first, 1)  # step 0 is always computed
    if first + last > num_steps:
        raise InputError(f"skip_first_n_steps + skip_last_n_steps: {first} + {last} exceed the {num_steps} steps")
    return first, last


# What the controller reads from its GateConfig while a schedule decides: enabled (so the proxy is
# installed) and nothing else; the threshold and rescale function are never evaluated.
_PLACEHOLDER = GateConfig(
    rel_l1_thresh=1.0,
    rescale=RescaleFunction((0.0,), provenance={"source": "unused: a static schedule decides"}),
    skip_first_n_steps=0,
    skip_last_n_steps=0,
)


class ScheduleGate:
    """Follows a :class:`StaticSchedule`; the ``decide()`` interface of :class:`teacache.gate.Gate`."""

    config = _PLACEHOLDER

    def __init__(self, schedule: StaticSchedule) -> None:
        if not isinstance(schedule, StaticSchedule):
            raise InputTypeError(f"schedule: expected a StaticSchedule, got {type(schedule).__name__}")
        self.schedule = schedule
        self.reset()

    def reset(self) -> None:
        self.log: list[StepDecision] = []

    def reads_signal(self, step: int, num_steps: int) -> bool:
        """Never: a fixed schedule decides without the signal, so it is read after each step, for the log."""
        return False

    def decide(self, step: int, num_steps: int, x: float | None, sigma: float | None = None) -> StepDecision:
        if num_steps != self.schedule.num_steps:
            raise InputError(
                f"schedule: made for {self.schedule.num_steps} steps, this generation has {num_steps}; "
                "build the schedule for the generation's step count"
            )
        compute = self.schedule.compute[step]
        decision = StepDecision.made(step, num_steps, x, sigma, compute, REASON_SCHEDULED if compute else REASON_SKIP)
        self.log.append(decision)
        return decision


class ScheduleHandle(TeaCacheHandle):
    """A :class:`teacache.handle.TeaCacheHandle` whose decisions come from a fixed schedule."""

    def __init__(self, model, adapter, controller, variant, restore_fn, schedule: StaticSchedule) -> None:
        super().__init__(model, adapter, controller, variant, restore_fn)
        self.schedule = schedule

    @property
    def rel_l1_thresh(self) -> float:
        return math.nan  # no threshold: the schedule decides

    @property
    def rescale(self):
        return None

    def __repr__(self) -> str:
        state = "active" if self.active else "restored"
        return f"ScheduleHandle(variant={self.variant!r}, schedule={self.schedule.label!r}, {state})"


def apply_schedule(model, schedule: StaticSchedule, forecast: bool = False):
    """Put a fixed schedule on an mflux pipeline through TeaCache's adapter; returns a restoring handle.

    The handle is a :class:`ScheduleHandle`: ``stats`` and ``history`` as for TeaCache, ``schedule``
    instead of a threshold. ``forecast``: as :func:`teacache.apply_teacache`'s (extrapolate, do not reuse).
    """
    forecast = check_flag(forecast, "forecast")
    from teacache.adapters import adapter_for  # the adapters import mflux: only when a pipeline is given

    check_mflux_version()
    adapter = adapter_for(model)
    if is_applied(model) or adapter.is_applied(model):
        raise StateError("model: TeaCache is already applied to this pipeline; restore() the first handle")
    gate = ScheduleGate(schedule)
    controller = StepController(gate.config, gate=gate, forecast=forecast)
    restore = adapter.install(model, controller)
    return ScheduleHandle(model, adapter, controller, adapter.variant(model), restore, schedule)
