"""First-Block Cache beside TeaCache and MagCache: compute the first block every step, skip the rest while its
residual barely changes.

First-Block Cache (ParaAttention's ``apply_cache_on_pipe``, diffusers' ``FirstBlockCacheConfig``, cache-dit's
DBCache F1B0) runs the transformer's first block at every step and takes its residual over the image stream
(block 0's output minus its input). When the relative L1 change of that residual against the one of the last
*computed* step is below the threshold, the remaining blocks are skipped: this step's block-0 output plus the
cached residual of the remaining blocks (final hidden state minus block-0 output, from the last computed step)
stands in for the body's output. Otherwise the rest runs and both caches (the block-0 residual the next steps
compare with, the remaining blocks' residual) are refreshed. There is no calibration; ParaAttention's default for
FLUX is 0.08.

Beside the reference rule this one keeps the toolkit's step rules (:mod:`teacache.gate`): the first and last steps
are always computed and at most K steps are skipped in a row. Since the anchor is the last computed step, not the
previous one, a decision reads the change against a step that depends on earlier decisions: :func:`replay_skip_masks`
replays the rule from the change of every step against every earlier one (``changes[run, t, s]``), vectorized over
runs and thresholds, and :class:`FBCacheGate` is the rule itself, decision for decision the same.

The live rule runs through each family's proxy (``FBCACHE_PROXY`` of :mod:`teacache.adapters`) and the
controller of :mod:`teacache.core`; block 0's cost counts in the ideal bound (:func:`ideal_speedup`).
``apply_fbcache(model, calibrate=True)`` computes every step and records the change table of each generation
(``handle.changes``): the input the replay needs to pick a threshold for a target speedup before a run.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import mlx.core as mx
import numpy as np
from numpy.typing import ArrayLike

from teacache._compat import check_mflux_version
from teacache.adapters._proxy import original_transformer
from teacache.core import StepController, is_applied
from teacache.errors import InputError, StateError
from teacache.gate import (
    DEFAULT_MAX_CONSECUTIVE_SKIPS,
    DEFAULT_SKIP_FIRST,
    DEFAULT_SKIP_LAST,
    REASON_CAP,
    REASON_NO_ANCHOR,
    REASON_NON_FINITE,
    REASON_THRESHOLD,
    ForcedSteps,
    GateConfig,
    StepDecision,
    check_count,
    check_flag,
    check_threshold,
)
from teacache.handle import TeaCacheHandle
from teacache.rescale import RescaleFunction
from teacache.signal import rel_l1

DEFAULT_THRESHOLD = 0.08  # ParaAttention's residual_diff_threshold for FLUX.1-dev (its docs and diffusers')


@dataclass(frozen=True)
class FBCacheConfig:
    """First-Block Cache's settings: ``threshold`` on the relative L1 change of block 0's residual against the
    last computed step's (0: compute every step), the forced first and last steps, and ``max_consecutive_skips``
    (K; 0 never skips)."""

    threshold: float = DEFAULT_THRESHOLD
    skip_first_n_steps: int = DEFAULT_SKIP_FIRST
    skip_last_n_steps: int = DEFAULT_SKIP_LAST
    max_consecutive_skips: int = DEFAULT_MAX_CONSECUTIVE_SKIPS

    def __post_init__(self) -> None:
        object.__setattr__(self, "threshold", check_threshold(self.threshold, "threshold"))
        for name in ("skip_first_n_steps", "skip_last_n_steps", "max_consecutive_skips"):
            object.__setattr__(self, name, check_count(getattr(self, name), name, 0))

    @property
    def enabled(self) -> bool:
        return self.threshold > 0


def ideal_speedup(num_steps: int, skipped: int, num_blocks: int) -> float:
    """The bound on the speedup of ``skipped`` of ``num_steps`` steps when block 0 of ``num_blocks`` equal blocks
    runs at every step: ``N / (N - k * (1 - 1/B))`` (the embeddings and the tail left out, as for TeaCache)."""
    n = check_count(num_steps, "num_steps", 1)
    k = check_count(skipped, "skipped", 0)
    b = check_count(num_blocks, "num_blocks", 1)
    if k >= n:
        raise InputError(f"skipped: expected fewer than the {n} steps, got {k}")
    return n / (n - k * (1.0 - 1.0 / b))


class FBCacheGate(ForcedSteps):
    """The rule for one generation at a time: ``decide()`` per step with the change of block 0's residual against
    the anchor (:attr:`anchor_step`, the last computed step); ``reset()`` starts a new generation."""

    def __init__(self, config: FBCacheConfig) -> None:
        if not isinstance(config, FBCacheConfig):
            raise InputError(f"config: expected an FBCacheConfig, got {type(config).__name__}")
        self.config = config
        self.reset()

    def reset(self) -> None:
        self.consecutive_skips = 0
        self.anchor_step: int | None = None  # the step the next change is measured against
        self.log: list[StepDecision] = []

    def decide(self, step: int, num_steps: int, x: float | None, sigma: float | None = None) -> StepDecision:
        """Compute ``step`` or skip it, given ``x``, the change against the anchor (None: no anchor yet)."""
        reason = self.forced_reason(step, num_steps)
        if reason is None:
            if x is None:
                reason = REASON_NO_ANCHOR
            elif not math.isfinite(x):
                reason = REASON_NON_FINITE
            elif x >= self.config.threshold:
                reason = REASON_THRESHOLD
            elif self.capped():
                reason = REASON_CAP
        decision = self.logged(step, num_steps, x, sigma, reason)
        if decision.compute:
            self.anchor_step = step
        return decision


def replay(config: FBCacheConfig, changes: ArrayLike) -> list[StepDecision]:
    """The gate stepped over one run: ``changes[t][s]`` is the change of step t's block-0 residual against step
    s's (only s < t is read); each step reads the change against the gate's anchor."""
    c = _changes(changes, 2)
    n = c.shape[0]
    gate = FBCacheGate(config)
    for step in range(n):
        anchor = gate.anchor_step
        gate.decide(step, n, None if anchor is None else float(c[step, anchor]))
    return gate.log


def replay_skip_masks(
    changes: ArrayLike,
    thresholds: ArrayLike,
    *,
    skip_first_n_steps: int = DEFAULT_SKIP_FIRST,
    skip_last_n_steps: int = DEFAULT_SKIP_LAST,
    max_consecutive_skips: int = DEFAULT_MAX_CONSECUTIVE_SKIPS,
) -> np.ndarray:
    """Which steps the rule skips: bool ``[thresholds, runs, steps]``, True where a step is skipped.

    ``changes[run, t, s]``: the relative L1 change of step t's block-0 residual against step s's, for s < t (the
    rest is not read); NaN or inf means no usable change (the rule computes there). Each row equals
    ``[not d.compute for d in replay(FBCacheConfig(t, ...), changes[run])]``. Pure numpy: only the steps are
    looped over, all runs and thresholds together.
    """
    FBCacheConfig(0.0, skip_first_n_steps, skip_last_n_steps, max_consecutive_skips)  # the same refusals
    c = _changes(changes, 3)
    ts = np.asarray([check_threshold(t, "thresholds") for t in np.atleast_1d(np.asarray(thresholds)).tolist()])
    n_runs, n = c.shape[0], c.shape[1]
    skip = np.zeros((len(ts), n_runs, n), dtype=bool)
    anchor = np.full((len(ts), n_runs), -1)
    streak = np.zeros((len(ts), n_runs), dtype=int)
    runs = np.arange(n_runs)[None, :]
    enabled = (ts > 0)[:, None]
    for t in range(n):
        if t < skip_first_n_steps or t >= n - skip_last_n_steps:
            anchor[:] = t
            streak[:] = 0
            continue
        x = np.where(anchor >= 0, c[runs, t, np.maximum(anchor, 0)], np.nan)
        with np.errstate(invalid="ignore"):
            can = enabled & np.isfinite(x) & (x < ts[:, None]) & (streak < max_consecutive_skips)
        skip[:, :, t] = can
        streak = np.where(can, streak + 1, 0)
        anchor = np.where(can, anchor, t)
    return skip


def _changes(changes: ArrayLike, ndim: int) -> np.ndarray:
    c = np.asarray(changes, dtype=float)
    if c.ndim != ndim or c.shape[-1] != c.shape[-2]:
        shape = "[steps, steps]" if ndim == 2 else "[runs, steps, steps]"
        raise InputError(f"changes: expected an array {shape} (step t against step s), got shape {c.shape}")
    return c


class FBCacheController(StepController):
    """The controller of :mod:`teacache.core` with First-Block Cache's anchor: the signal is block 0's residual,
    and the anchor it is compared with moves only on a computed step (TeaCache's moves every step).

    ``calibrate=True`` computes every step and keeps the block-0 residual of every step of the generation, so
    that each step's change against every earlier one can be recorded (the anchor of a run that skips may be
    any earlier step): memory grows with the steps, one image-stream residual per step.
    """

    def __init__(self, config: FBCacheConfig, forecast: bool = False, calibrate: bool = False) -> None:
        self.fbcache_config = config
        placeholder = GateConfig(  # what the controller reads of it: enabled (threshold > 0) and nothing else
            rel_l1_thresh=config.threshold,
            rescale=RescaleFunction((0.0,), provenance={"source": "unused: First-Block Cache decides"}),
        )
        self.change_history: list[np.ndarray] = []
        self._signals: list[mx.array] = []  # calibration: block 0's residual of every step so far
        self._rows: list[list[mx.array]] = []  # calibration: step t's change against each earlier step
        super().__init__(placeholder, calibrate=calibrate, gate=FBCacheGate(config), forecast=forecast)

    def _reset_generation(self) -> None:
        super()._reset_generation()
        self._signals, self._rows = [], []

    def _observe_signal(self, signal: mx.array, step: int) -> bool:
        """Calibration: this step's change against every earlier step's residual (lazy; evaluated with the step)."""
        self._rows.append([rel_l1(signal, earlier) for earlier in self._signals])
        self._signals.append(signal)
        return True

    def observe_output(self, branch: int, output: mx.array, residual: mx.array | None) -> None:
        """Nothing: the change table is all First-Block Cache's calibration records."""

    def carry(self, output: mx.array, branch: int) -> mx.array:
        output = super().carry(output, branch)
        fresh = (self._rows[-1] + self._signals[-1:]) if self.calibrate and self._rows else []
        return mx.depends(output, fresh) if fresh else output

    def _finish(self) -> None:
        super()._finish()
        if self.calibrate and self._rows:
            n = len(self._rows)
            table = np.full((n, n), np.nan)
            for t, row in enumerate(self._rows):
                table[t, : len(row)] = [change.item() for change in row]
            self.change_history.append(table)
            self._signals, self._rows = [], []

    def _decide(self, signal: mx.array, step: int, while_reading: Callable[[], None] | None = None) -> bool:
        anchor = self.state.anchor
        change = None if anchor is None else rel_l1(signal, anchor)
        if change is None:
            mx.async_eval(signal)  # the anchor to be: computed now, block 0's input is not held through the body
        elif not self.gate.reads_signal(step, self.num_steps):
            mx.async_eval(change)  # as TeaCache's unread signal: computed before the body, read after the step
            self.state.unread.append((len(self.gate.log), change))  # logged once the step is evaluated
            change = None
        else:
            mx.async_eval(change)  # the device computes the change while the host builds the rest's graph
            if while_reading is not None:
                while_reading()
        x = None if change is None else change.item()
        compute = self.gate.decide(step, self.num_steps, x, self.sigma).compute
        if compute:
            self.state.anchor = signal
        return compute


class FBCacheHandle(TeaCacheHandle):
    """:class:`teacache.handle.TeaCacheHandle` of a First-Block Cache run: ``stats`` and ``history`` as for
    TeaCache; ``fbcache`` its settings, ``num_blocks`` the blocks of the body (block 0 included)."""

    def __init__(self, model, adapter, controller, variant, restore_fn, num_blocks: int) -> None:
        super().__init__(model, adapter, controller, variant, restore_fn)
        self.fbcache = controller.fbcache_config
        self.num_blocks = num_blocks

    @property
    def changes(self) -> np.ndarray:
        """``calibrate=True``: the last generation's ``changes[t, s]``, the relative L1 change of step t's block-0
        residual against step s's (NaN where s >= t), as :func:`replay` and :func:`replay_skip_masks` read it."""
        history = self._controller.change_history
        if not history:
            raise StateError(
                "changes: no calibration generation yet; apply_fbcache(model, calibrate=True), then generate"
            )
        return history[-1].copy()

    @property
    def rel_l1_thresh(self) -> float:
        return self.fbcache.threshold

    @property
    def rescale(self):
        return None

    @property
    def ideal_speedup(self) -> float:
        """:func:`ideal_speedup` of the last generation's skips."""
        stats = self.stats
        return ideal_speedup(stats.computed + stats.skipped, stats.skipped, self.num_blocks)

    def __repr__(self) -> str:
        state = "active" if self.active else "restored"
        return f"FBCacheHandle(variant={self.variant!r}, threshold={self.fbcache.threshold}, {state})"


def apply_fbcache(
    model,
    threshold: float = DEFAULT_THRESHOLD,
    *,
    skip_first_n_steps: int = DEFAULT_SKIP_FIRST,
    skip_last_n_steps: int = DEFAULT_SKIP_LAST,
    max_consecutive_skips: int = DEFAULT_MAX_CONSECUTIVE_SKIPS,
    forecast: bool = False,
    calibrate: bool = False,
) -> FBCacheHandle:
    """Put First-Block Cache on an mflux pipeline; the handle restores it exactly (``restore()`` or as a context
    manager). ``threshold`` 0 computes every step and swaps nothing in (as ``apply_teacache`` at 0).
    ``forecast=True``: a skipped step extrapolates the remaining blocks' residual from the last two computed steps
    (first order) instead of reusing the last one. ``calibrate=True`` computes every step, as vanilla does, and
    records each generation's change table (``handle.changes``; the threshold is then unused). Every setting is
    checked before the pipeline is touched."""
    config = FBCacheConfig(threshold, skip_first_n_steps, skip_last_n_steps, max_consecutive_skips)
    forecast = check_flag(forecast, "forecast")
    calibrate = check_flag(calibrate, "calibrate")
    from teacache.adapters import adapter_for  # the adapters import mflux: only when a pipeline is given

    check_mflux_version()
    adapter = adapter_for(model)
    if is_applied(model) or adapter.is_applied(model):
        raise StateError("model: TeaCache is already applied to this pipeline; restore() the first handle")
    proxy = adapter.FBCACHE_PROXY
    num_blocks = proxy.count_blocks(original_transformer(model))
    controller = FBCacheController(config, forecast=forecast, calibrate=calibrate)
    restore = adapter.install(model, controller, proxy_class=proxy)
    return FBCacheHandle(model, adapter, controller, adapter.variant(model), restore, num_blocks)
