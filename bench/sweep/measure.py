"""This rank's share of a sweep's pairs, measured: the model loaded, warmed up, and every pair run and saved.

A plain sweep runs vanilla and every threshold of a pair (:func:`run_pair`); with ``--baselines``,
``--compare-coefficients`` or ``--isolate`` the arms sweep (:mod:`bench.sweep.arms`) runs its arms instead.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from bench.quality.scorers import adherence_scorer, scores_adherence
from bench.sweep import arms as sweep_arms
from bench.sweep.baselines import STEP_CACHE_NATIVE, mlx_teacache_arms
from bench.sweep.baselines import teacache as teacache_arm
from bench.sweep.files import LOG
from bench.sweep.inputs import resolve_rescales
from bench.sweep.parts import part_path, save_pair, todo_pairs
from bench.sweep.settings import SweepSettings, fingerprint_settings, rescale_settings
from calib.run import arguments, estimate, shard
from calib.run.generation import generate
from calib.run.prompts import pair_id
from teacache import apply_teacache, variants
from teacache.gate import GateConfig
from teacache.io import append_log

if TYPE_CHECKING:
    from calib.traces.runs import Traces
    from teacache.rescale import RescaleFunction

ARMS_ONLY = ("arm", "arm_setting", "rescale", "steps_run")  # columns the plain sweep's runs table leaves out


def _adherence_fn(variant: str):
    if not scores_adherence(variant):
        return None
    return adherence_scorer(variant)  # imports the variant's scorer (PIL, scipy) only now


@dataclass(frozen=True)
class Measured:
    """What the merge needs from the rank that loaded the model."""

    variant: str
    default_threshold: float
    skip_first: int
    rescale: object
    configs: dict
    fingerprint: dict  # the full settings, variant and coefficients included
    recorded: dict  # the fingerprint as this rank's folder holds it
    arms: dict | None = None  # --baselines/--compare-coefficients/--isolate: the arms and their settings


def _announce(settings: SweepSettings, run: shard.ShardedRun, todo: list) -> None:
    """What this sweep (and, under mlx.launch, this rank) is about to measure."""
    world, parts = run.world, run.folder / "pairs"
    extending = sum(1 for (pid, _t, seed), _m in todo if part_path(parts, pair_id(pid, seed), "runs").is_file())
    if world.rank == 0:
        print(
            f"sweep {settings.model}"
            + (f" with LoRA {settings.loras.describe()}" if settings.loras else "")
            + f": {len(settings.pairs)} pairs ({len(settings.pairs) - len(run.todo)} done"
            + (f", {extending} to extend" if extending and world.size == 1 else "")
            + f") x (vanilla + {len(settings.thresholds)} thresholds) x {settings.repeats} repeats, "
            f"{settings.steps} steps"
        )
        for line in (world.contention_message(), world.hardware_message()):
            if line:
                print(line)
    if world.size > 1:
        print(f"rank {world.rank} of {world.size} ({world.backend}): {len(todo)} pairs: {', '.join(run.share)}")


def _warm_up(model, settings: SweepSettings, pair, rescale) -> float:
    """Compile and JIT once, vanilla and TeaCache, before anything is timed; the vanilla run's seconds."""
    warm = (pair[1], pair[2], *settings.generation)
    seconds = generate(model, *warm).total_s
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with apply_teacache(model, rel_l1_thresh=max(settings.thresholds), coefficients=rescale):
            generate(model, *warm)
    return seconds


def work_left(settings: SweepSettings, todo: list) -> estimate.Work:
    """The generations left, counted from above: every arm of every pair to do, each of the full step count."""
    arms = 1 + len(settings.thresholds) * (len(settings.rescale_sources) + len(settings.baselines))
    return estimate.Work(len(todo) * arms * settings.repeats * (2 if settings.isolate else 1), settings.steps)


def _plan_arms(settings: SweepSettings, model, rescales: dict, configs_for, traces, skip_first: int):
    """--baselines/--compare-coefficients/--isolate: the TeaCache arms, the baseline grid and what the
    provenance records of them."""
    # heavy (pandas): loaded after the arguments are checked
    from bench.sweep.replay import predict_schedules

    configs = configs_for(rescales[settings.coefficients])
    tc_arms = sweep_arms.teacache_arms(rescales, configs_for, settings.thresholds)
    if traces is not None:
        schedules, grid_from = sweep_arms.replay_schedules(predict_schedules(traces, configs)), "--traces replay"
    else:
        first = settings.pairs[0]
        schedules = sweep_arms.probe_schedules(model, first, settings.generation, configs)
        grid_from = f"a probe of every threshold on the first pair ({pair_id(first[0], first[2])})"
    grid = sweep_arms.arm_grid(settings.steps, schedules, settings.baselines, skip_first)
    grid += mlx_teacache_arms(configs, settings.baselines, model)  # its apply_teacache at the same thresholds
    record = {
        "baselines": list(settings.baselines),
        "settings": {arm: [a.setting for a in grid if a.name == arm] for arm in settings.baselines},
        "settings_from": grid_from,
        "most_common_skipped": {f"{t:g}": k for t, k in sweep_arms.most_common_counts(schedules).items()},
        "rescales": {k: v.to_dict() for k, v in rescales.items()},
        "primary_rescale": settings.coefficients,
        "step_cache_native": sorted(STEP_CACHE_NATIVE),
    }
    return tc_arms, grid, record


def measure_share(
    settings: SweepSettings, run: shard.ShardedRun, fixed_rescale: RescaleFunction | None, traces: Traces | None = None
) -> Measured:
    """This rank's share of the pairs, each saved into the rank's folder as soon as it is measured."""
    world, folder, thresholds = run.world, run.folder, settings.thresholds
    by_id = {pair_id(p, seed): (p, text, seed) for p, text, seed in settings.pairs}
    todo = todo_pairs(settings, folder, [by_id[k] for k in run.share])
    _announce(settings, run, todo)
    model = arguments.load_model(settings.model, settings.base_model, settings.quantize, settings.loras)
    spec = variants.get(variants.variant_of(model))
    variant, default_threshold, skip_first = spec.name, spec.default_threshold, spec.skip_first_n_steps
    rescale = fixed_rescale or variants.get(variant).rescale()
    fp = fingerprint_settings(settings, rescale, variant)
    rescales = resolve_rescales(settings, rescale, variant) if settings.arms_mode else None
    if rescales is not None and len(rescales) > 1:
        fp["compare_rescales"] = {k: rescale_settings(v) for k, v in list(rescales.items())[1:]}
    state = settings.folder.begin(folder, fp)
    if todo:  # before the folder is claimed: a refusal of the work leaves it as it was
        work, warm = work_left(settings, todo), (todo[0][0][1], todo[0][0][2], *settings.generation)
        again = lambda: generate(model, *warm).total_s  # noqa: E731
        per_step, source = estimate.per_step(_warm_up(model, settings, todo[0][0], rescale), again, work, settings.yes)
        line = estimate.describe(work, per_step, source)
        print(line if world.size == 1 else f"rank {world.rank}: {line}")
        estimate.check_confirmed(work, per_step, settings.yes)
        append_log(folder / LOG, line)
    recorded = settings.folder.save(folder, fp, state)

    def configs_for(rescale_fn) -> dict:
        return {t: GateConfig(t, rescale_fn, skip_first_n_steps=skip_first) for t in thresholds}

    configs = configs_for(rescale)
    adherence = _adherence_fn(variant)
    images_dir = settings.out / "images" if settings.save_images else None
    fields = world.row_fields()  # which rank measured each row, on which hardware, contended or not
    arms_record = None
    if settings.arms_mode:
        tc_arms, grid, arms_record = _plan_arms(settings, model, rescales, configs_for, traces, skip_first)
    label = "sweep" if world.size == 1 else f"sweep rank {world.rank}"
    with settings.folder.progress(folder, label, len(todo)) as progress:
        for pair, missing in todo:
            if settings.arms_mode:
                rows, decisions, noop = sweep_arms.run_pair_arms(
                    model, settings, pair, tc_arms, grid, adherence, images_dir, variant, configs[thresholds[-1]]
                )
            else:
                rows, decisions, noop = run_pair(
                    model, settings, pair, missing, configs, adherence, images_dir, variant
                )
            rows, noop = [{**row, **fields} for row in rows], {**noop, **fields}
            save_pair(folder / "pairs", pair_id(pair[0], pair[2]), rows, decisions, noop)
            progress.advance()
    return Measured(variant, default_threshold, skip_first, rescale, configs, fp, recorded, arms_record)


def run_pair(
    model,
    settings: SweepSettings,
    pair: tuple[str, str, int],
    thresholds: list[float],
    configs: dict[float, GateConfig],
    adherence: Callable | None,
    images_dir: Path | None,
    variant: str,
) -> tuple[list[dict], list[dict], dict]:
    """Vanilla and every threshold of one (prompt, seed) pair, measured as the arms sweep measures them
    (:func:`bench.sweep.arms.run_pair_arms`), in the plain sweep's columns. Returns (runs rows, decision rows, noop).
    """
    tc_arms = [(settings.coefficients, teacache_arm(configs[t])) for t in thresholds]
    noop_config = configs[thresholds[-1]]
    rows, decisions, noop = sweep_arms.run_pair_arms(
        model, settings, pair, tc_arms, [], adherence, images_dir, variant, noop_config
    )
    return [{k: v for k, v in row.items() if k not in ARMS_ONLY} for row in rows], decisions, noop
