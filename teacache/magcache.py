"""MagCache's skip rule beside TeaCache's: skip while the accumulated error of a calibrated magnitude-ratio curve
stays small, at most K skips in a row.

MagCache (Ma et al., "MagCache: Fast Video Generation with Magnitude-Aware Cache") observes that the ratio of
the residual's magnitude at step t to that at step t-1 follows one curve per model whatever the prompt. Its
rule reads that curve, not the live generation: while skipping, the ratios multiply (``accumulated``) and
each skipped step adds ``|1 - accumulated|`` to the error; a step is computed once the error would reach the
threshold or K steps were skipped in a row, and the first ``retention_ratio`` of the schedule is always
computed. So a MagCache schedule is fixed by the curve, the threshold and the step count: it runs through
:mod:`teacache.schedule` (the same proxies, the same residual reuse), and replaying it from traces is the
live rule itself, decision for decision.

The curve is calibrated from recorded runs (:func:`ratio_curve`): the per-step ratio of the residual's mean
absolute value (``residual_norm`` in the traces ``teacache-calib record`` writes), its median over runs.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from teacache.errors import InputError, InputTypeError
from teacache.gate import check_count, check_threshold
from teacache.schedule import StaticSchedule, apply_schedule

DEFAULT_K = 3  # MagCache's K as sglang ships it (the paper uses 2-4 per model)
DEFAULT_RETENTION_RATIO = 0.2  # the paper's share of early steps always computed


@dataclass(frozen=True)
class MagCacheConfig:
    """MagCache's settings: ``threshold`` on the accumulated error (0: compute every step), ``ratios`` the
    calibrated curve (``ratios[t]``: residual magnitude at step t over step t-1, one per step of the
    calibration schedule; ``ratios[0]`` is unused), ``max_consecutive_skips`` (K), ``retention_ratio``."""

    threshold: float
    ratios: tuple[float, ...]
    max_consecutive_skips: int = DEFAULT_K
    retention_ratio: float = DEFAULT_RETENTION_RATIO
    skip_last_n_steps: int = 1

    def __post_init__(self) -> None:
        object.__setattr__(self, "threshold", check_threshold(self.threshold, "threshold"))
        if isinstance(self.ratios, str | bytes) or not isinstance(self.ratios, Sequence | np.ndarray):
            raise InputTypeError(f"ratios: expected a sequence of numbers, got {type(self.ratios).__name__}")
        ratios = tuple(self.ratios)
        if len(ratios) < 2:
            raise InputError(f"ratios: expected one ratio per step of at least 2 steps, got {len(ratios)}")
        for t, r in enumerate(ratios):
            if isinstance(r, bool) or not isinstance(r, numbers.Real):
                raise InputTypeError(f"ratios: step {t}: expected a number, got {type(r).__name__}")
            if t > 0 and not (math.isfinite(r) and r > 0):
                raise InputError(f"ratios: step {t}: expected a finite ratio > 0, got {float(r)!r}")
        object.__setattr__(self, "ratios", tuple(float(r) for r in ratios))
        object.__setattr__(
            self, "max_consecutive_skips", check_count(self.max_consecutive_skips, "max_consecutive_skips", 1)
        )
        object.__setattr__(self, "skip_last_n_steps", check_count(self.skip_last_n_steps, "skip_last_n_steps", 0))
        r = self.retention_ratio
        if isinstance(r, bool) or not isinstance(r, numbers.Real) or not (0.0 <= r < 1.0):
            raise InputError(f"retention_ratio: expected a share of the steps in [0, 1), got {r!r}")
        object.__setattr__(self, "retention_ratio", float(r))


def ratios_for(ratios: Sequence[float], num_steps: int) -> np.ndarray:
    """The curve at ``num_steps`` steps: as calibrated when the counts agree, else each step reads the calibrated
    step nearest to the same fraction of the schedule (as MagCache resamples its curve)."""
    curve = np.asarray(ratios, dtype=np.float64)
    if num_steps == len(curve):
        return curve
    if num_steps == 1:
        return curve[-1:]
    nearest = np.floor(np.arange(num_steps) * (len(curve) - 1) / (num_steps - 1) + 0.5).astype(int)  # halves up
    return curve[nearest]


def schedule(config: MagCacheConfig, num_steps: int) -> StaticSchedule:
    """The steps MagCache computes in a ``num_steps`` generation (the live rule and its replay alike)."""
    num_steps = check_count(num_steps, "num_steps", 1)
    curve = ratios_for(config.ratios, num_steps)
    keep = max(1, int(config.retention_ratio * num_steps))  # step 0 always: nothing is cached before it
    last = num_steps - config.skip_last_n_steps
    compute = []
    accumulated, error, skips = 1.0, 0.0, 0
    for t in range(num_steps):
        if config.threshold <= 0 or t < keep or t >= last:
            compute.append(True)
            accumulated, error, skips = 1.0, 0.0, 0
            continue
        ratio = accumulated * curve[t]
        step_error = error + abs(1.0 - ratio)
        if step_error < config.threshold and skips < config.max_consecutive_skips:
            compute.append(False)
            accumulated, error, skips = ratio, step_error, skips + 1
        else:
            compute.append(True)
            accumulated, error, skips = 1.0, 0.0, 0
    label = f"magcache:{config.threshold:g}/K{config.max_consecutive_skips}/r{config.retention_ratio:g}"
    return StaticSchedule(tuple(compute), label)


def ratio_curve(frame, branch: str = "cond") -> tuple[float, ...]:
    """The calibrated curve from a trace table (``teacache-calib record``): per run (prompt, seed) the ratio of
    ``residual_norm`` at step t to step t-1 of ``branch``, then the median over runs; ``ratios[0]`` is 1."""
    missing = {"prompt_id", "seed", "step", "branch", "residual_norm"} - set(frame.columns)
    if missing:
        raise InputError(
            f"traces: missing column(s) {', '.join(sorted(missing))}; record them with teacache-calib record"
        )
    rows = frame[frame["branch"] == branch]
    if rows.empty:
        raise InputError(f"traces: no rows of branch {branch!r}")
    table = rows.pivot_table(index=["prompt_id", "seed"], columns="step", values="residual_norm", aggfunc="first")
    norms = table.sort_index(axis=1).to_numpy(dtype=np.float64)
    if not np.all(np.isfinite(norms)) or not np.all(norms > 0):
        raise InputError("traces: residual_norm must be finite and > 0 at every step of every run")
    ratios = np.median(norms[:, 1:] / norms[:, :-1], axis=0)
    return (1.0, *(float(r) for r in ratios))


def apply_magcache(model, config: MagCacheConfig, num_steps: int, forecast: bool = False):
    """Put MagCache's schedule for a ``num_steps`` generation on an mflux pipeline (``teacache.schedule``'s
    handle: ``stats`` and ``history`` as for TeaCache, ``schedule`` the steps it computes); ``forecast`` as
    :func:`teacache.apply_teacache`'s."""
    return apply_schedule(model, schedule(config, num_steps), forecast=forecast)
