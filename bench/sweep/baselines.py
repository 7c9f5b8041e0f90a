"""The arms a speed/quality front compares: TeaCache and three baselines, each run the same way.

- ``fewer-steps``: the pipeline run with N' < N steps; its image is compared with the N-step vanilla.
- ``static``: a skip schedule fixed in advance (``teacache.schedule``), run through TeaCache's own
  proxy: the same signal is measured and the same cached residual replaces the body on a skipped
  step, so static vs TeaCache isolates what adaptivity adds to caching.
- ``step-cache``: mflux's own ``StepCache`` (``mflux/models/common/step_cache``): the steps whose sigma
  changes least are chosen before the loop and reuse the previous step's model output.

mflux 0.24.0 calls ``StepCache`` in the loops of MossImage, Qwen-Image-2.1 and FIBO2 only
(:data:`STEP_CACHE_NATIVE`); none of the pipelines this toolkit supports (FLUX.1, FLUX.2 Klein,
Qwen-Image, Z-Image and the embedded models) has it. There the arm runs mflux's class unchanged
(``for_run``, ``reuse``, ``store``) through the same few loop lines those pipelines use, wrapped
around the pipeline's own predict function (compiled predicts stay compiled) or, for pipelines
that call the transformer in the loop, around the transformer (one cached output per CFG call).
"""

from __future__ import annotations

import contextlib
import json
import math
import warnings
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

import mlx.core as mx
from mlx import nn

from bench.peer import arm as peer
from bench.quality.metrics import image_metrics, latent_metrics
from calib.run.generation import generate
from calib.run.interleave import Turn, interleave
from calib.run.prompts import pair_id
from teacache import apply_teacache
from teacache.core import is_applied
from teacache.errors import InputError, StateError
from teacache.gate import GateConfig
from teacache.rescale import RescaleFunction
from teacache.schedule import StaticSchedule, apply_schedule

VANILLA = "vanilla"
TEACACHE = "teacache"
FEWER_STEPS = "fewer-steps"
STATIC = "static"
STEP_CACHE = "step-cache"
MLX_TEACACHE = "mlx-teacache"  # bench.peer: its apply_teacache with the TeaCache arm's coefficients and thresholds
BASELINES: tuple[str, ...] = (FEWER_STEPS, STATIC, STEP_CACHE, MLX_TEACACHE)
ARMS: tuple[str, ...] = (TEACACHE, *BASELINES)

# mflux 0.24.0 pipelines whose own denoising loop calls common/step_cache's StepCache (checked by
# reading every caller of mflux.models.common.step_cache in the installed package).
STEP_CACHE_NATIVE: dict[str, str] = {
    "MossImage": "mflux/models/moss_image/variants/txt2img/moss_image.py (signal: its timestep embedding)",
    "QwenImage21": "mflux/models/qwen21/variants/txt2img/qwen_image_21.py (signal: sigma)",
    "FIBO2": "mflux/models/fibo2/variants/fibo2_core.py, txt2img and edit (signal: sigma)",
}


def parse_baselines(text: str | None) -> tuple[str, ...]:
    """'fewer-steps,static,step-cache' -> the arms in that order; '' or None -> none."""
    if text is None:
        return ()
    names = [part.strip() for part in str(text).split(",") if part.strip()]
    unknown = [n for n in names if n not in BASELINES]
    if unknown:
        raise InputError(f"--baselines: unknown arm {unknown[0]!r}; expected a comma-separated subset of "
                         f"{','.join(BASELINES)}")  # fmt: skip
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise InputError(f"--baselines: {duplicates[0]!r} given twice")
    return tuple(names)


@dataclass(frozen=True)
class Arm:
    """One setting of one arm: what ``run_arm`` runs and what a row's ``arm`` / ``arm_setting`` say."""

    name: str  # VANILLA or one of ARMS
    setting: str  # "0.03" (threshold), "13" (steps), "even:13" (schedule), "0.5" (step-cache ratio)
    steps: int | None = None  # fewer-steps: the N' the pipeline runs
    gate: GateConfig | None = None  # teacache
    schedule: StaticSchedule | None = None  # static
    ratio: float | None = None  # step-cache

    def __post_init__(self) -> None:
        needs = {VANILLA: None, TEACACHE: "gate", FEWER_STEPS: "steps", STATIC: "schedule", STEP_CACHE: "ratio",
                 MLX_TEACACHE: "gate"}  # fmt: skip
        if self.name not in needs:
            raise ValueError(f"arm: expected one of {', '.join(needs)}, got {self.name!r}")
        needed = needs[self.name]
        if needed is not None and getattr(self, needed) is None:
            raise ValueError(f"arm {self.name!r}: needs {needed}")

    def to_dict(self) -> dict:
        """JSON-ready: what a fresh process (``bench.sweep.isolate``) needs to run the same arm."""
        return {
            "name": self.name,
            "setting": self.setting,
            "steps": self.steps,
            "gate": None if self.gate is None else _gate_to_dict(self.gate),
            "schedule": None if self.schedule is None else {"compute": list(self.schedule.compute),
                                                            "label": self.schedule.label},
            "ratio": self.ratio,
        }  # fmt: skip

    @classmethod
    def from_dict(cls, data: dict) -> Arm:
        gate = data.get("gate")
        schedule = data.get("schedule")
        return cls(
            name=data["name"],
            setting=data["setting"],
            steps=data.get("steps"),
            gate=None if gate is None else _gate_from_dict(gate),
            schedule=None if schedule is None else StaticSchedule(tuple(schedule["compute"]), schedule["label"]),
            ratio=data.get("ratio"),
        )


def _gate_to_dict(gate: GateConfig) -> dict:
    return {
        "rel_l1_thresh": gate.rel_l1_thresh,
        "rescale": gate.rescale.to_dict(),
        "skip_first_n_steps": gate.skip_first_n_steps,
        "skip_last_n_steps": gate.skip_last_n_steps,
        "max_consecutive_skips": gate.max_consecutive_skips,
    }


def _gate_from_dict(data: dict) -> GateConfig:
    return GateConfig(**{**data, "rescale": RescaleFunction.from_dict(data["rescale"])})


def vanilla() -> Arm:
    return Arm(VANILLA, "")


def teacache(gate: GateConfig) -> Arm:
    return Arm(TEACACHE, f"{gate.rel_l1_thresh:g}", gate=gate)


def mlx_teacache(gate: GateConfig) -> Arm:
    """mlx-teacache's apply_teacache with ``gate``'s coefficients, threshold and skip window (bench.peer)."""
    return Arm(MLX_TEACACHE, f"{gate.rel_l1_thresh:g}", gate=gate)


def fewer_steps(steps: int, num_steps: int) -> Arm:
    """The pipeline run with ``steps`` (< ``num_steps``, at least 2) steps."""
    if isinstance(steps, bool) or not isinstance(steps, int) or not 2 <= steps < num_steps:
        raise InputError(f"fewer-steps: expected a step count in 2..{num_steps - 1}, got {steps!r}")
    return Arm(FEWER_STEPS, str(steps), steps=steps)


def static(schedule: StaticSchedule) -> Arm:
    return Arm(STATIC, schedule.label, schedule=schedule)


def step_cache(ratio: float) -> Arm:
    """mflux's StepCache skipping round(ratio * N) steps (inside its protected first/last 10 %)."""
    if isinstance(ratio, bool) or not isinstance(ratio, int | float) or not 0 < ratio < 1:
        raise InputError(f"step-cache: expected a ratio in (0, 1), got {ratio!r}")
    return Arm(STEP_CACHE, f"{ratio:g}", ratio=float(ratio))


def step_grid(num_steps: int, reached: Iterable[int] = (), fractions: Iterable[float] = (0.25, 0.5, 0.75)) -> list[int]:
    """Step counts for the fewer-steps arm: those TeaCache's computed counts reach, plus a small grid.

    Every count lies in 2..num_steps-1 (fewer than N, at least two steps); returned ascending.
    """
    counts = {int(c) for c in reached} | {math.floor(num_steps * f + 0.5) for f in fractions}
    return sorted(c for c in counts if 2 <= c < num_steps)


def step_cache_ratios(num_steps: int, skipped: Iterable[int]) -> list[float]:
    """Ratios that make StepCache skip the given numbers of steps (it skips round(ratio * N))."""
    ratios = {round(k / num_steps, 6) for k in skipped if 0 < k < num_steps}
    return sorted(r for r in ratios if 0 < r < 1)


# ------------------------------------------------------------------------------------------------
# Running one arm
# ------------------------------------------------------------------------------------------------
@dataclass
class ArmResult:
    """One generation of one arm; ``skipped_steps`` as indices of the steps the pipeline ran."""

    generation: object  # calib.run.generation.Generation
    steps_run: int  # loop steps the pipeline took (fewer-steps: N')
    computed: int  # steps whose transformer body ran
    skipped_steps: list[int]
    longest_skip_streak: int
    decisions: list = field(default_factory=list)  # teacache / static: the per-step decision log


def _streak(skipped: list[int]) -> int:
    longest = run = 0
    previous = None
    for step in skipped:
        run = run + 1 if previous is not None and step == previous + 1 else 1
        longest = max(longest, run)
        previous = step
    return longest


def run_arm(model, arm: Arm, prompt: str, seed: int, steps: int, width: int, height: int, guidance: float):
    """One generation of ``arm`` (``steps`` is the vanilla step count N). Returns an :class:`ArmResult`."""
    if arm.name == VANILLA:
        gen = generate(model, prompt, seed, steps, width, height, guidance)
        return ArmResult(gen, steps, steps, [], 0)
    if arm.name == FEWER_STEPS:
        gen = generate(model, prompt, seed, arm.steps, width, height, guidance)
        return ArmResult(gen, arm.steps, arm.steps, [], 0)
    if arm.name == MLX_TEACACHE:
        result = peer.generate_with(model, peer.settings_for(arm.gate), prompt, seed, steps, width, height, guidance)
        skipped = result.skipped_steps
        return ArmResult(result.generation, steps, steps - len(skipped), skipped, _streak(skipped))
    if arm.name == STEP_CACHE:
        with apply_step_cache(model, arm.ratio) as run:
            gen = generate(model, prompt, seed, steps, width, height, guidance)
        skipped = run.history[-1]
        return ArmResult(gen, steps, steps - len(skipped), skipped, _streak(skipped))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the sweep states the recipe and floor once, in its provenance
        handle = apply_teacache(model, config=arm.gate) if arm.name == TEACACHE else apply_schedule(model, arm.schedule)
        with handle:
            gen = generate(model, prompt, seed, steps, width, height, guidance)
    stats = handle.stats
    return ArmResult(gen, steps, stats.computed, stats.skipped_steps, stats.longest_skip_streak, list(stats.log))


# ------------------------------------------------------------------------------------------------
# mflux's StepCache on pipelines whose loop does not call it
# ------------------------------------------------------------------------------------------------
class StepCacheRun:
    """mflux callback holding one ``StepCache`` per generation (and per CFG call of a step).

    ``history``: per generation, the steps (indices from 0) whose model output was reused.
    """

    def __init__(self, ratio: float) -> None:
        self.ratio = ratio
        self.history: list[list[int]] = []
        self._caches: list = []
        self._t = 0
        self._init_t = 0
        self._call = 0
        self._reused: set[int] = set()

    def call_before_loop(self, seed, prompt, latents, config, **_) -> None:
        # heavy (mflux): loaded after the arguments are checked
        from mflux.models.common.step_cache.step_cache import StepCache

        first = StepCache.for_run(config, ratio=self.ratio)
        self._caches = [first]
        self._init_t = self._t = int(config.init_time_step)
        self._call = 0
        self._reused = set()

    def call_in_loop(self, t, seed, prompt, latents, config, time_steps=None, **_) -> None:
        self._t = t + 1
        self._call = 0

    def call_after_loop(self, seed, prompt, latents, config) -> None:
        self.history.append(sorted(s - self._init_t for s in self._reused))

    def call_interrupt(self, t, seed, prompt, latents, config, time_steps=None) -> None:
        self.call_after_loop(seed, prompt, latents, config)

    def step(self, compute):
        """mflux's loop lines: reuse the stored output on a chosen step, else compute and store it."""
        # heavy (mflux): loaded after the arguments are checked
        from mflux.models.common.step_cache.step_cache import StepCache

        if not self._caches:
            raise RuntimeError("step-cache: a model call outside a generation (no before_loop callback)")
        call = self._call
        self._call += 1
        while len(self._caches) <= call:  # one cache per CFG call of a step
            self._caches.append(StepCache(self._caches[0].skip_steps))
        cache = self._caches[call]
        output = cache.reuse(self._t)
        if output is None:
            output = compute()
            cache.store(output)
        else:
            self._reused.add(self._t)
        return output


def _reusing_transformer_class():
    class ReusingTransformer(nn.Module):
        """Stands in for a pipeline's transformer: every call goes through ``StepCacheRun.step``."""

        def __init__(self, transformer, run: StepCacheRun) -> None:
            super().__init__()
            self.transformer = transformer
            self._run = run

        def __call__(self, *args, **kwargs):
            return self._run.step(lambda: self.transformer(*args, **kwargs))

    return ReusingTransformer


@contextlib.contextmanager
def apply_step_cache(model, ratio: float) -> Iterator[StepCacheRun]:
    """mflux's StepCache on ``model`` for the block; everything is put back exactly on exit.

    Pipelines with a ``_predict(transformer)`` factory (FLUX.2 Klein, Z-Image, tiny-shapes) get their
    own predict wrapped, so the reused output is the guided one, as in mflux's loops; pipelines that
    call the transformer in the loop (FLUX.1, Qwen-Image) get a wrapped transformer instead.
    """
    if is_applied(model):
        raise StateError("model: TeaCache is applied to this pipeline; restore() it before the step-cache arm")
    run = StepCacheRun(ratio)
    registry = model.callbacks
    lists = [registry.before_loop, registry.in_loop, registry.after_loop, registry.interrupt]
    registry.register(run)
    predict_factory = getattr(model, "_predict", None)
    own = vars(model) if hasattr(model, "__dict__") else {}
    had_own_predict, own_predict = "_predict" in own, own.get("_predict")
    original = model.transformer
    try:
        if callable(predict_factory):

            def factory(transformer):
                predict = predict_factory(transformer)  # the pipeline's own (compiled) predict

                def reusing(*args, **kwargs):
                    return run.step(lambda: predict(*args, **kwargs))

                return reusing

            object.__setattr__(model, "_predict", factory)
        else:
            model.transformer = _reusing_transformer_class()(original, run)
        yield run
    finally:
        model.transformer = original
        if callable(predict_factory):
            if had_own_predict:
                object.__setattr__(model, "_predict", own_predict)
            else:
                object.__delattr__(model, "_predict")
        for lst in lists:
            lst[:] = [c for c in lst if c is not run]


# ------------------------------------------------------------------------------------------------
# Every arm of one (prompt, seed) pair against one vanilla run
# ------------------------------------------------------------------------------------------------
def measure_pair(
    model, pair: tuple[str, str, int], settings: dict, arms: list[Arm], repeats: int, kept: dict | None = None
) -> list[dict]:
    """Rows for the vanilla run and every arm of one pair, all measured against that vanilla run.

    Interleaved by :func:`calib.run.interleave.interleave` (vanilla is arm 0, the order rotated from repeat to
    repeat). ``settings``: variant, model, steps, width, height, guidance.
    Each row carries ``arm``, ``arm_setting`` and its measured fields only: its speedup over the vanilla run, its
    skipped count and ideal speedup are derived from them (:func:`bench.sweep.records.derive_columns`).
    ``kept``, when given, receives each row's first :class:`ArmResult` by row index (``"results"``) and
    whether every vanilla repeat gave the same latents (``"vanilla_repeats_equal"``), for the sweep's images,
    decision log and proxy-noop record.
    """
    prompt_id, prompt, seed = pair
    pid = pair_id(prompt_id, seed)
    n = settings["steps"]
    args = (prompt, seed, n, settings["width"], settings["height"], settings["guidance"])
    order = [vanilla(), *arms]
    first: dict[int, ArmResult] = {}
    vanilla_equal: list[bool] = []

    def run(turn: Turn) -> float:
        i = turn.arm
        result = run_arm(model, order[i], *args)
        if i in first and first[i].skipped_steps != result.skipped_steps:
            raise RuntimeError(f"{pid} {order[i].name} {order[i].setting}: the skip schedule changed between repeats")
        first.setdefault(i, result)
        if i == 0:
            vanilla_equal.append(bool(mx.array_equal(result.generation.latents, first[0].generation.latents).item()))
        return result.generation.loop_s

    times = interleave(run, len(order), repeats)
    if kept is not None:
        kept["results"] = [first[i] for i in range(len(order))]
        kept["vanilla_repeats_equal"] = all(vanilla_equal)
    ref = first[0].generation
    rows = []
    for i, arm in enumerate(order):
        result = first[i]
        gen = result.generation
        rows.append({
            "pair_id": pid, "variant": settings["variant"], "model": settings["model"], "prompt_id": prompt_id,
            "prompt": prompt, "seed": seed, "num_steps": n,
            "run_id": f"{pid}-{arm.name}" + (f"-{arm.setting}" if arm.setting else ""),
            "kind": arm.name, "arm": arm.name, "arm_setting": arm.setting,
            "threshold": arm.gate.rel_l1_thresh if arm.gate is not None else float("nan"),
            "steps_run": result.steps_run, "computed": result.computed,
            "skipped_steps": json.dumps(result.skipped_steps), "longest_skip_streak": result.longest_skip_streak,
            "wall_s": times[i],
            **latent_metrics(gen.latents, ref.latents), **image_metrics(gen.image, ref.image),
        })  # fmt: skip
    return rows


def mlx_teacache_arms(configs: dict, baselines: tuple[str, ...], model, say=print) -> list:
    """The sweep's mlx-teacache arms (one per threshold) when --baselines names it and it can run here."""
    if MLX_TEACACHE not in baselines:
        return []
    config = next(iter(configs.values()))
    why = peer.refusal(model, config.rescale) or next(filter(None, (peer.refusal(threshold=t) for t in configs)), None)
    if why is not None:
        say(f"{peer.PEER} arm not run: {why}")
        return []
    return [mlx_teacache(config) for config in configs.values()]
