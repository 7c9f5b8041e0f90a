"""Per-generation control shared by every variant adapter (the public handle: :mod:`teacache.handle`).

An adapter swaps a proxy in for the pipeline's transformer (wrap and swap; MLX modules have no
forward hooks) and asks a :class:`StepController` at every step whether to compute. The controller
is also an mflux callback: ``call_before_loop`` starts a generation, ``call_in_loop`` advances the
step, so the proxy never has to guess where a generation begins.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field, fields, replace

import mlx.core as mx

from teacache._warnings import warn
from teacache.errors import StateError
from teacache.gate import Gate, GateConfig, NeverSkipsWarning, StepDecision, warn_if_never_skips
from teacache.signal import mean_abs, rel_l1


class RecipeMismatchWarning(UserWarning):
    """Packaged coefficients are used with generation settings other than those they were fitted on."""


def recipe_differences(recipe: dict, config) -> list[str]:
    """What differs between a packaged RECIPE and an mflux Config (steps, guidance, resolution)."""
    found = []
    steps = recipe.get("num_steps")
    if isinstance(steps, int) and steps != config.num_inference_steps:
        found.append(f"{steps} steps, this generation {config.num_inference_steps}")
    guidance = recipe.get("guidance")
    if isinstance(guidance, int | float) and not math.isclose(float(guidance), float(config.guidance or 0.0)):
        found.append(f"guidance {guidance:g}, this generation {config.guidance:g}")
    resolution = recipe.get("resolution")
    here = f"{config.width}x{config.height}"
    if isinstance(resolution, str) and resolution != here:
        found.append(f"{resolution}, this generation {here}")
    return found


def recipe_options(config) -> str:
    """The drift options that repeat a save at this generation's recipe (steps, size, guidance)."""
    options = f"--steps {config.num_inference_steps} --size {config.width}x{config.height}"
    return options + (f" --guidance {config.guidance:g}" if config.guidance is not None else "")


@dataclass
class TeaCacheStats:
    """What happened in one generation: counts and the per-step decision log."""

    computed: int = 0
    skipped: int = 0
    log: list[StepDecision] = field(default_factory=list)

    @property
    def skipped_steps(self) -> list[int]:
        return [d.step for d in self.log if not d.compute]

    @property
    def longest_skip_streak(self) -> int:
        longest = run = 0
        for d in self.log:
            run = 0 if d.compute else run + 1
            longest = max(longest, run)
        return longest


@dataclass
class GenerationState:
    """What one generation holds: the anchor, one residual per branch, the step's decision, calibration rows.

    ``reset()`` drops all of it; the controller calls it at the start of every generation, and
    ``TeaCacheHandle.restore()`` calls it so a restored pipeline keeps no cache tensors alive.
    """

    anchor: mx.array | None = None  # the previous step's modulated input
    residuals: dict[int, mx.array] = field(default_factory=dict)  # by branch (CFG calls of one step)
    residual_steps: dict[int, int] = field(default_factory=dict)  # the step each residual was computed at
    earlier: dict[int, tuple[int, mx.array]] = field(default_factory=dict)  # forecast: (its step, the one before)
    step_decision: tuple[int, bool] | None = None  # (step, compute), taken by branch 0
    pending: list[dict] = field(default_factory=list)  # calibration rows, lazy until the generation ends
    previous_output: dict[int, mx.array] = field(default_factory=dict)  # calibration, by branch
    previous_residual: dict[int, mx.array] = field(default_factory=dict)  # calibration, by branch
    signal_row: dict = field(default_factory=dict)  # calibration: this step's input signal
    unread: list[tuple[int, mx.array]] = field(default_factory=list)  # (log index, signal) read after the step

    def reset(self) -> None:
        fresh = GenerationState()
        for f in fields(self):
            setattr(self, f.name, getattr(fresh, f.name))

    @property
    def cached(self) -> list[mx.array]:
        """The tensors the cache holds between steps (residuals, the earlier ones a forecast reads, and anchor)."""
        earlier = [residual for _, residual in self.earlier.values()]
        return list(self.residuals.values()) + earlier + ([self.anchor] if self.anchor is not None else [])


class StepController:
    """Decides per step, keeps the anchor (previous modulated input) and one residual per branch.

    ``calibrate=True`` never skips and records, per step and branch, the rel-L1 signals that
    ``teacache-calib record`` writes: the same code path as the gate, minus the skip.
    ``gate``: another decision rule with Gate's ``decide()`` and ``reads_signal()`` (a fixed schedule,
    ``teacache.schedule.ScheduleGate``); by default the TeaCache rule built from ``gate_config``.
    ``forecast``: a skipped step extrapolates the residual from the last two computed steps instead of
    reusing the last one (the cache then holds two residuals per branch).
    """

    def __init__(
        self,
        gate_config: GateConfig,
        calibrate: bool = False,
        recipe: dict | None = None,
        gate=None,
        variant: str | None = None,
        forecast: bool = False,
    ) -> None:
        self.gate_config = gate_config
        self.forecast = forecast  # a skipped step extrapolates the residual instead of reusing it
        self.variant = variant  # named in the recipe warning's drift command
        self.calibrate = calibrate
        self.recipe = recipe  # the settings packaged coefficients were fitted on (None: user coefficients)
        self.fast_path = not gate_config.enabled and not calibrate
        self.gate = Gate(gate_config) if gate is None else gate
        self.history: list[TeaCacheStats] = []
        self.records: list[dict] = []
        self._warned: set[str] = set()
        self.config = None
        self.state = GenerationState()
        self._reset_generation()

    # --- mflux callback protocol ------------------------------------------------------------------
    def call_before_loop(self, seed, prompt, latents, config, **_) -> None:
        self.begin(config)

    def call_in_loop(self, t, seed, prompt, latents, config, time_steps=None, **_) -> None:
        self._next_t = t + 1
        if self.fast_path:  # threshold 0: nothing is swapped in; only count the step
            self.stats.computed += 1

    def call_after_loop(self, seed, prompt, latents, config) -> None:
        self._finish()

    def call_interrupt(self, t, seed, prompt, latents, config, time_steps=None) -> None:
        self._finish()

    # --- generation lifecycle ---------------------------------------------------------------------
    def _reset_generation(self) -> None:
        self.gate.reset()
        self.state.reset()

    def begin(self, config) -> None:
        """Start a generation: reset every per-generation tensor and check the schedule."""
        self._reset_generation()
        self.config = config
        self._init_t = int(config.init_time_step)
        self._next_t = self._init_t
        self.num_steps = int(config.num_inference_steps) - self._init_t
        # read once: a per-step .item() would sync the device every step (costly on a GPU)
        self._sigmas = [float(s) for s in config.scheduler.sigmas.astype(mx.float32).tolist()]
        self.history.append(TeaCacheStats())
        if self.gate_config.enabled and not self.calibrate and isinstance(self.gate, Gate):
            self._check_schedule()
            self._check_recipe(config)

    def _check_schedule(self) -> None:
        cfg = self.gate_config
        active = cfg.active_steps(self.num_steps)
        if active < 1:
            self._warn_once(
                "few-steps",
                f"TeaCache cannot skip any step of this {self.num_steps}-step schedule: the first "
                f"{cfg.skip_first_n_steps} and last {cfg.skip_last_n_steps} steps are always computed. "
                f"Use at least {cfg.skip_first_n_steps + cfg.skip_last_n_steps + 2} steps, or lower "
                "skip_first_n_steps / skip_last_n_steps.",
            )
            return
        sigmas = self._sigmas[self._init_t :] if cfg.rescale.is_time_aware else None
        if "floor" not in self._warned:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                can_skip = warn_if_never_skips(cfg, self.num_steps, sigmas, where=" in this schedule")
            if not can_skip and caught:
                self._warn_once("floor", str(caught[0].message))

    def _check_recipe(self, config) -> None:
        """Coefficients reused outside the recipe they were fitted on are the first suspect of bad quality."""
        differences = recipe_differences(self.recipe or {}, config)
        model = self.variant or "MODEL"
        if differences:
            self._warn_once(
                "recipe",
                "the packaged rescale coefficients were fitted on a different recipe ("
                + "; ".join(differences)
                + f"): measure whether they serve this one with `teacache-calib drift --model {model} --save DIR`, "
                f"then `--against DIR {recipe_options(config)}` (docs/refit-and-drift.md), or refit "
                "(teacache-calib record / fit / emit)",
                RecipeMismatchWarning,
            )

    def mark_warned(self, key: str) -> None:
        self._warned.add(key)

    def _warn_once(self, key: str, message: str, category: type[Warning] = NeverSkipsWarning) -> None:
        if key not in self._warned:
            self._warned.add(key)
            warn(message, category)

    def _finish(self) -> None:
        self._read_unread()
        pending = self.state.pending
        if self.calibrate and pending:
            mx.eval([v for row in pending for v in row.values() if isinstance(v, mx.array)])
            for row in pending:
                self.records.append({k: (float(v.item()) if isinstance(v, mx.array) else v) for k, v in row.items()})
            self.state.pending = []

    # --- per step ---------------------------------------------------------------------------------
    @property
    def step(self) -> int:
        return self._next_t - self._init_t

    @property
    def sigma(self) -> float:
        return self._sigmas[self._next_t]

    @property
    def stats(self) -> TeaCacheStats:
        return self.history[-1] if self.history else TeaCacheStats()

    def _require_generation(self) -> None:
        if self.config is None:
            raise StateError(
                "TeaCache saw a transformer call outside a generation: call the pipeline's generate_image "
                "(its callbacks start every generation), not the transformer directly."
            )

    def should_compute(
        self, modulated: mx.array, branch: int = 0, while_reading: Callable[[], None] | None = None
    ) -> bool:
        """One decision per step: branch 0 decides, later branches of the same step reuse it.

        ``while_reading`` runs while the device computes a signal the decision must read back (it builds
        the body's graph then, so the host's work overlaps the device's); it runs at most once."""
        self._require_generation()
        step, state = self.step, self.state
        if state.step_decision is not None and state.step_decision[0] == step and branch != 0:
            compute = state.step_decision[1]
        elif self.calibrate:
            compute = self._observe_signal(modulated, step)
        else:
            self._read_unread()  # the previous step's, evaluated with it
            compute = self._decide(modulated, step, while_reading)
        if not compute and branch not in state.residuals:
            compute = True  # nothing cached for this branch yet
        state.step_decision = (step, compute)
        stats = self.stats
        if branch == 0:
            stats.computed += compute
            stats.skipped += not compute
            stats.log = self.gate.log
        return compute

    def _decide(self, modulated: mx.array, step: int, while_reading: Callable[[], None] | None = None) -> bool:
        anchor, self.state.anchor = self.state.anchor, modulated
        change = None if anchor is None else rel_l1(modulated, anchor)
        if change is not None and not self.gate.reads_signal(step, self.num_steps):
            # not read back mid-step (that would stall the host): started now, so the device computes the signal
            # before the body and frees what only the signal needs; the log receives it once the step is done
            mx.async_eval(change)
            self.state.unread.append((len(self.gate.log), change))
            change = None
        elif change is not None:
            # the value is needed now: start the device on it and let the host build the body meanwhile
            mx.async_eval(change)
            if while_reading is not None:
                while_reading()
        return self.gate.decide(step, self.num_steps, None if change is None else change.item(), self.sigma).compute

    def carry(self, output: mx.array, branch: int) -> mx.array:
        """``output`` of ``branch`` made to depend on the signals not read yet and on what this call may have left
        lazy in the cache (that branch's residual, the anchor), so evaluating the step evaluates them too.

        Left lazy, the cache would hold the graph behind it: the residual its two operands (the embedded input and
        the body's output with the text tokens around it), the anchor the embedded input it is modulated from.
        Evaluated with the step, it holds its own arrays and nothing else, between steps and after the loop.
        Only this branch's residual: the other branches' are the previous step's until their own call replaces
        them, and a dependency on one would keep it alive until this output is evaluated, beside the new one its
        call computes (one image-sized array above vanilla's peak under CFG).
        """
        state = self.state
        pending = [signal for _, signal in state.unread]
        pending += [a for a in (state.residuals.get(branch), state.anchor) if a is not None]
        return mx.depends(output, pending) if pending else output

    def _read_unread(self) -> None:
        """Put the signals the decisions did not need into the decision log (they are evaluated by now)."""
        unread, self.state.unread = self.state.unread, []
        if not unread:
            return
        mx.eval([signal for _, signal in unread])
        log = self.gate.log
        for index, signal in unread:
            log[index] = replace(log[index], x=float(signal.item()))

    def _observe_signal(self, modulated: mx.array, step: int) -> bool:
        anchor = self.state.anchor
        self.state.signal_row = {
            "step": step,
            "num_steps": self.num_steps,
            "sigma": self.sigma,
            "x_norm": mean_abs(modulated),
            "x_rel_l1": math.nan if anchor is None else rel_l1(modulated, anchor),
        }
        self.state.anchor = modulated
        return True

    def store_residual(self, branch: int, residual: mx.array) -> None:
        state = self.state
        if self.forecast and branch in state.residuals:
            state.earlier[branch] = (state.residual_steps[branch], state.residuals[branch])
        state.residuals[branch] = residual
        state.residual_steps[branch] = self.step

    def residual(self, branch: int) -> mx.array:
        """What a skipped step adds to its input: the last computed residual, or with ``forecast`` its first-order
        extrapolation from the last two computed ones to this step (TaylorSeer's and FoCa's first order)."""
        state = self.state
        last = state.residuals[branch]
        if not self.forecast or branch not in state.earlier:
            return last
        step_before, before = state.earlier[branch]
        step_last = state.residual_steps[branch]
        return last + (last - before) * ((self.step - step_last) / (step_last - step_before))

    def observe_output(self, branch: int, output: mx.array, residual: mx.array | None) -> None:
        """Calibration only: lazy rel-L1 of the output (and residual) against the previous step's."""
        if not self.calibrate:
            return
        state = self.state
        row = dict(state.signal_row, branch=branch, y_norm=mean_abs(output))
        prev = state.previous_output.get(branch)
        row["y_rel_l1"] = math.nan if prev is None else rel_l1(output, prev)
        state.previous_output[branch] = output
        row["residual_norm"] = row["residual_rel_l1"] = math.nan
        if residual is not None:
            prev_r = state.previous_residual.get(branch)
            row["residual_norm"] = mean_abs(residual)
            row["residual_rel_l1"] = math.nan if prev_r is None else rel_l1(residual, prev_r)
            state.previous_residual[branch] = residual
        state.pending.append(row)


def is_applied(model) -> bool:
    """True while a TeaCache controller sits in the pipeline's callbacks (every adapter registers one)."""
    registry = getattr(model, "callbacks", None)
    return registry is not None and any(isinstance(c, StepController) for c in registry.before_loop)


def register_callback(model, controller: StepController):
    """Register the controller on the pipeline's callback registry; return its exact undo."""
    registry = model.callbacks
    lists = [registry.before_loop, registry.in_loop, registry.after_loop, registry.interrupt]
    registry.register(controller)

    def undo() -> None:
        for lst in lists:
            lst[:] = [c for c in lst if c is not controller]

    return undo
