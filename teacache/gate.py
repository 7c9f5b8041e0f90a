"""The TeaCache skip rule as a pure function of numbers.

The runtime adapters and ``teacache-bench replay`` both drive this class, so a schedule predicted
from recorded traces and a schedule taken inside a generation come from the same code.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import asdict, dataclass

import numpy as np

from teacache._warnings import warn
from teacache.errors import InputError, InputTypeError
from teacache.rescale import RescaleFunction

# Why a step was computed or skipped; the decision log and reports use these names.
REASON_DISABLED = "disabled"  # threshold <= 0: the fast path, nothing is ever skipped
REASON_FIRST = "first"  # inside skip_first_n_steps
REASON_LAST = "last"  # inside skip_last_n_steps
REASON_NO_ANCHOR = "no-anchor"  # no previous modulated input to compare with
REASON_NON_FINITE = "non-finite"  # the signal was NaN/inf: compute and re-seed
REASON_ABOVE_RANGE = "above-range"  # x above the calibrated range: never extrapolate into a skip
REASON_OUTSIDE_REGION = "outside-region"  # a part of the schedule the calibration data never reached
REASON_CAP = "cap"  # max_consecutive_skips reached
REASON_THRESHOLD = "threshold"  # the accumulated change reached the threshold
REASON_SKIP = "skip"

# The rule's step settings by default: steps always computed at the start and at the end, and the most steps
# skipped in a row. GateConfig and every signature that takes these settings loose default to these.
DEFAULT_SKIP_FIRST = 1
DEFAULT_SKIP_LAST = 1
DEFAULT_MAX_CONSECUTIVE_SKIPS = 8


def check_threshold(value, name: str = "rel_l1_thresh") -> float:
    """A threshold is a finite number >= 0 (0 disables skipping); the one rule every entry point uses.
    Any real number is one (numpy's scalars too); anything else is an :class:`InputTypeError`."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise InputTypeError(f"{name}: expected a number, got {type(value).__name__}")
    if not math.isfinite(value) or value < 0:
        raise InputError(f"{name}: expected a finite number >= 0 (0 disables skipping), got {float(value)!r}")
    return float(value)


def check_count(value, name: str, minimum: int) -> int:
    """A whole number of steps (numpy's integers too) >= ``minimum``; anything else is an :class:`InputTypeError`."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise InputTypeError(f"{name}: expected an integer, got {type(value).__name__}")
    if value < minimum:
        raise InputError(f"{name}: expected an integer >= {minimum}, got {int(value)}")
    return int(value)


def check_flag(value, name: str) -> bool:
    """True or False (numpy's bool too); anything else, 0 and 1 included, is an :class:`InputTypeError`."""
    if not isinstance(value, bool | np.bool_):
        raise InputTypeError(f"{name}: expected True or False, got {type(value).__name__}")
    return bool(value)


@dataclass(frozen=True)
class GateConfig:
    """Settings of the skip rule. Validated here, so a bad value fails before any generation."""

    rel_l1_thresh: float
    rescale: RescaleFunction
    skip_first_n_steps: int = DEFAULT_SKIP_FIRST
    skip_last_n_steps: int = DEFAULT_SKIP_LAST
    max_consecutive_skips: int = DEFAULT_MAX_CONSECUTIVE_SKIPS

    def __post_init__(self) -> None:
        object.__setattr__(self, "rel_l1_thresh", check_threshold(self.rel_l1_thresh))
        for name in ("skip_first_n_steps", "skip_last_n_steps"):
            object.__setattr__(self, name, check_count(getattr(self, name), name, 0))
        object.__setattr__(
            self, "max_consecutive_skips", check_count(self.max_consecutive_skips, "max_consecutive_skips", 1)
        )
        if not isinstance(self.rescale, RescaleFunction):
            raise InputTypeError(f"rescale: expected a RescaleFunction, got {type(self.rescale).__name__}")

    @property
    def enabled(self) -> bool:
        return self.rel_l1_thresh > 0

    def active_steps(self, num_steps: int) -> int:
        """Steps the rule may skip: neither forced first nor forced last."""
        return max(0, num_steps - self.skip_first_n_steps - self.skip_last_n_steps)

    def rescale_floor(self, num_steps: int | None = None, sigmas=None) -> float:
        """Smallest amount one gated step adds to the accumulator over the calibrated range."""
        fn = self.rescale
        if not fn.is_time_aware:
            return fn.floor()[0]
        n = num_steps or 2
        if fn.form == "poly+sigma" and sigmas is None:
            return fn.floor(np.linspace(0.0, 1.0, 101))[0]  # every sigma a schedule can visit
        us = [fn.time_input(s, n, None if sigmas is None else float(sigmas[s])) for s in range(n)]
        return fn.floor(us)[0]

    def can_ever_skip(self, num_steps: int | None = None, sigmas=None) -> bool:
        return self.enabled and self.rel_l1_thresh > self.rescale_floor(num_steps, sigmas)


@dataclass(frozen=True)
class StepDecision:
    """One row of the per-step decision log."""

    step: int
    num_steps: int
    sigma: float | None
    x: float | None  # raw rel-L1 signal (None: no anchor yet)
    x_used: float | None  # after clamping to the calibrated range
    rescaled: float | None
    accumulated: float
    compute: bool
    reason: str

    def as_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def made(cls, step, num_steps, x, sigma, compute, reason, x_used=None, rescaled=None, accumulated=0.0):
        """The log row of one decision, the signal and sigma as plain floats (every gate logs the same way)."""
        sigma = None if sigma is None else float(sigma)
        x = None if x is None else float(x)
        return cls(step, num_steps, sigma, x, x_used, rescaled, accumulated, compute, reason)


class ForcedSteps:
    """The steps a gate computes whatever its signal says, for a ``config`` with ``enabled``,
    ``skip_first_n_steps`` and ``skip_last_n_steps`` (TeaCache's gate and First-Block Cache's)."""

    def forced_reason(self, step: int, num_steps: int) -> str | None:
        """Why ``step`` is computed whatever the signal says (disabled, first, last); None when the signal decides."""
        cfg = self.config
        if not cfg.enabled:
            return REASON_DISABLED
        if step < cfg.skip_first_n_steps:
            return REASON_FIRST
        if step >= num_steps - cfg.skip_last_n_steps:
            return REASON_LAST
        return None

    def reads_signal(self, step: int, num_steps: int) -> bool:
        """Whether the decision for ``step`` needs the signal's value (else it may be read after the step)."""
        return self.forced_reason(step, num_steps) is None

    def capped(self) -> bool:
        """Whether ``max_consecutive_skips`` steps have just been skipped, so this one is computed."""
        return self.consecutive_skips >= self.config.max_consecutive_skips

    def logged(self, step: int, num_steps: int, x, sigma, reason: str | None, **signal) -> StepDecision:
        """Count the run of skips, log the decision and return it; ``reason`` None means the step is skipped."""
        compute = reason is not None
        self.consecutive_skips = 0 if compute else self.consecutive_skips + 1
        decision = StepDecision.made(step, num_steps, x, sigma, compute, reason or REASON_SKIP, **signal)
        self.log.append(decision)
        return decision


class Gate(ForcedSteps):
    """Stateful skip rule for one generation at a time; ``reset()`` starts a new generation."""

    def __init__(self, config: GateConfig) -> None:
        self.config = config
        self.reset()

    def reset(self) -> None:
        self.accumulated = 0.0
        self.consecutive_skips = 0
        self.log: list[StepDecision] = []

    def decide(self, step: int, num_steps: int, x: float | None, sigma: float | None = None) -> StepDecision:
        """Decide whether ``step`` of ``num_steps`` must be computed, given the signal ``x``."""
        x_used = rescaled = None
        reason = self.forced_reason(step, num_steps)
        if reason is None:
            reason, x_used, rescaled = self._gated(step, num_steps, x, sigma)
        decision = self.logged(
            step, num_steps, x, sigma, reason, x_used=x_used, rescaled=rescaled, accumulated=self.accumulated
        )
        if decision.compute:
            self.accumulated = 0.0
        return decision

    def _gated(self, step: int, num_steps: int, x: float | None, sigma: float | None):
        """A step the signal decides: (reason to compute or None, x after clamping, rescaled x)."""
        cfg = self.config
        fn = cfg.rescale
        if x is None:
            return REASON_NO_ANCHOR, None, None
        if not math.isfinite(x):
            return REASON_NON_FINITE, None, None
        if x > fn.x_range[1]:
            return REASON_ABOVE_RANGE, None, None
        u = fn.time_input(step, num_steps, sigma)
        lo, hi = (float(b) for b in fn.x_bounds(u))  # this part of the schedule's x range
        if math.isnan(hi):
            return REASON_OUTSIDE_REGION, None, None
        if x > hi:
            return REASON_ABOVE_RANGE, None, None
        x_used = max(x, lo)
        rescaled = max(0.0, fn(x_used, u))
        self.accumulated += rescaled
        if self.capped():
            return REASON_CAP, x_used, rescaled
        if self.accumulated >= cfg.rel_l1_thresh:
            return REASON_THRESHOLD, x_used, rescaled
        return None, x_used, rescaled


def replay(config: GateConfig, xs, num_steps: int | None = None, sigmas=None) -> list[StepDecision]:
    """Run the gate over one recorded trace: ``xs[i]`` is the signal at step i (None/NaN at step 0).

    With a recorded trace the anchor always advances (vanilla computes every step), so this predicts
    the schedule under the assumption that skipping does not change later signals.
    """
    n = num_steps if num_steps is not None else len(xs)
    gate = Gate(config)
    for step, x in enumerate(xs):
        x_val = None if x is None or (step == 0 and math.isnan(float(x))) else float(x)  # step 0: no anchor
        gate.decide(step, n, x_val, None if sigmas is None else float(sigmas[step]))
    return gate.log


def warn_if_never_skips(config: GateConfig, num_steps: int | None = None, sigmas=None, where: str = "") -> bool:
    """Warn (once per call site) when the threshold can never skip; return True when it can skip."""
    if not config.enabled:
        return False
    floor = config.rescale_floor(num_steps, sigmas)
    if config.rel_l1_thresh <= floor:
        warn(
            f"rel_l1_thresh={config.rel_l1_thresh:g} can never skip a step{where}: every gated step adds at "
            f"least {floor:.4g} (the rescale function's minimum over its calibrated range "
            f"{config.rescale.x_range[0]:.4g}..{config.rescale.x_range[1]:.4g}). "
            f"Use a threshold above {floor:.4g}.",
            NeverSkipsWarning,
        )
        return False
    return True


class NeverSkipsWarning(UserWarning):
    """The configured threshold or schedule leaves the gate no chance to skip."""
