"""The sweep's pairs with baseline arms, several rescale functions or isolated timing.

``teacache-bench sweep --baselines/--compare-coefficients/--isolate`` measures every pair through
:func:`bench.sweep.baselines.measure_pair`: vanilla, one TeaCache arm per (rescale function, threshold) and
the baseline arms, interleaved (:mod:`calib.run.interleave`), all against the pair's one vanilla run. The baseline
settings are fixed once per sweep (:func:`arm_grid`) from what TeaCache does at the swept thresholds:
a warm-up probe of each threshold on the sweep's first pair, or the schedules that replaying
``--traces`` predicts. With ``--isolate`` every timed generation runs again in a fresh process
(``bench.sweep.isolate``): ``wall_s`` and ``speedup`` are those timings, the in-process ones stay beside
them, and the quality metrics come from the in-process images.
"""

from __future__ import annotations

import json
from collections import Counter

from bench.sweep import baselines as bl
from bench.sweep.isolate import job, run_isolated
from bench.sweep.pair import proxy_noop, save_run_image
from calib.run.interleave import Turn, interleave
from calib.run.prompts import pair_id
from teacache.io import FORMAT_VERSION
from teacache.schedule import StaticSchedule, most_common

TIMING_ISOLATED = (
    "isolated: each timed generation in a fresh process (bench.sweep.isolate), after one warm-up run there"
)


def arm_grid(num_steps: int, schedules: dict[float, list[list[int]]], arms: tuple[str, ...], skip_first: int):
    """The baseline arms for TeaCache's skip schedules per threshold (``{threshold: [skipped steps, ...]}``).

    fewer-steps: :func:`bench.sweep.baselines.step_grid` of the computed counts reached; static: an even
    spread of each computed count (``even:M``) plus each threshold's most common schedule; step-cache:
    :func:`bench.sweep.baselines.step_cache_ratios` of the skipped counts. Duplicates run once.
    """
    computed = sorted({num_steps - len(s) for runs in schedules.values() for s in runs})
    skipped = sorted({len(s) for runs in schedules.values() for s in runs})
    grid: list[bl.Arm] = []
    if bl.FEWER_STEPS in arms:
        grid += [bl.fewer_steps(n, num_steps) for n in bl.step_grid(num_steps, computed)]
    if bl.STATIC in arms:
        seen: set[tuple[bool, ...]] = set()
        for m in computed:
            if m < num_steps and m >= max(skip_first, 1) + 1:
                schedule = StaticSchedule.evenly(num_steps, m, skip_first_n_steps=max(skip_first, 1))
                seen.add(schedule.compute)
                grid.append(bl.static(schedule))
        for threshold, runs in sorted(schedules.items()):
            schedule = most_common(num_steps, runs, label=f"common:{threshold:g}")
            if schedule.skipped_steps and schedule.compute not in seen:
                seen.add(schedule.compute)
                grid.append(bl.static(schedule))
    if bl.STEP_CACHE in arms:
        grid += [bl.step_cache(r) for r in bl.step_cache_ratios(num_steps, skipped)]
    return grid


def probe_schedules(model, pair, generation: tuple, configs: dict) -> dict[float, list[list[int]]]:
    """TeaCache's skip schedule at every threshold on one pair (the warm-up runs of the sweep)."""
    prompt_id, prompt, seed = pair
    found = {}
    for threshold, config in configs.items():
        result = bl.run_arm(model, bl.teacache(config), prompt, seed, *generation)
        found[threshold] = [result.skipped_steps]
    return found


def replay_schedules(predicted) -> dict[float, list[list[int]]]:
    """The schedules ``bench.sweep.replay.predict_schedules`` predicts, by threshold."""
    found: dict[float, list[list[int]]] = {}
    for row in predicted.itertuples():
        found.setdefault(float(row.threshold), []).append(json.loads(row.predicted_skipped_steps))
    return found


def teacache_arms(rescales: dict, configs_for, thresholds) -> list[tuple[str, bl.Arm]]:
    """(rescale source, arm) for every rescale function and threshold; ``configs_for(rescale)`` gives the gates."""
    arms = []
    for source, rescale in rescales.items():
        configs = configs_for(rescale)
        arms += [(source, bl.teacache(configs[t])) for t in thresholds]
    return arms


def run_pair_arms(model, settings, pair, tc_arms, grid, adherence, images_dir, variant: str, noop_config):
    """One pair, every arm: (runs rows, decision rows, proxy-noop row) in the sweep's tables."""
    prompt_id, prompt, seed = pair
    pid = pair_id(prompt_id, seed)
    primary = settings.rescale_sources[0]
    arms = [arm for _source, arm in tc_arms] + list(grid)
    sources = [source for source, _arm in tc_arms] + [None] * len(grid)
    context = {"variant": variant, "model": settings.model, "steps": settings.steps, "width": settings.width,
               "height": settings.height, "guidance": settings.guidance}  # fmt: skip
    kept: dict = {}
    rows = bl.measure_pair(model, pair, context, arms, settings.repeats, kept)
    results = kept["results"]
    if settings.isolate:
        isolated_times(settings, pair, [bl.vanilla(), *arms], rows)
    ref = results[0].generation
    out, decisions = [], []
    for i, row in enumerate(rows):
        source = None if i == 0 else sources[i - 1]
        arm = row["arm"]
        if arm == bl.TEACACHE:  # the threshold tables' run ids; other rescale functions numbered after them
            j = settings.rescale_sources.index(source)
            row["run_id"] = f"{pid}-t{float(row['threshold']):g}" + (f"-r{j}" if j else "")
        elif arm == bl.VANILLA:
            row["run_id"] = f"{pid}-vanilla"
        gen = results[i].generation
        row.update(
            format_version=FORMAT_VERSION,
            rescale=source,
            adherence=adherence(gen.image, prompt) if adherence else float("nan"),
            image_path=save_run_image(images_dir, row, gen.image, ref.image),
        )
        if arm == bl.VANILLA:
            row["threshold"] = float("nan")
        out.append(row)
        decisions += [{"run_id": row["run_id"], **d.as_dict()} for d in results[i].decisions]
    base = {k: out[0][k] for k in ("format_version", "pair_id", "variant", "model", "prompt_id", "prompt", "seed",
                                   "num_steps")}  # fmt: skip
    noop = proxy_noop(model, (prompt, seed, *settings.generation), noop_config, ref, base)
    noop["vanilla_repeats_equal"] = kept["vanilla_repeats_equal"]
    assert primary == settings.coefficients
    return out, decisions, noop


def isolated_times(settings, pair, order: list, rows: list[dict]) -> None:
    """Time every arm again, each generation in a fresh process, interleaved as in-process.

    ``rows`` (measure_pair's, same order as ``order``) get the isolated ``wall_s``; the in-process ones move to
    ``wall_s_in_process`` (the speedups of both are derived on reading). A fresh process that skips
    other steps than the in-process run refuses the pair.
    """
    _prompt_id, prompt, seed = pair

    def run(turn: Turn) -> list[float]:
        spec = job(settings.model, order[turn.arm], prompt, seed, *settings.generation, base_model=settings.base_model,
                   quantize=settings.quantize, warmups=1, repeats=1, **settings.loras.kwargs())  # fmt: skip
        result = run_isolated(spec)
        if result["skipped_steps"] != json.loads(rows[turn.arm]["skipped_steps"]):
            what = rows[turn.arm]["run_id"]
            raise RuntimeError(f"{what}: the isolated run skipped other steps than the in-process one")
        return result["loop_s"]

    times = [[t for loops in arm for t in loops] for arm in interleave(run, len(order), settings.repeats)]
    for i, row in enumerate(rows):
        row["wall_s_in_process"], row["wall_s"] = row["wall_s"], times[i]


def most_common_counts(schedules: dict[float, list[list[int]]]) -> dict[float, int]:
    """Per threshold, the most common skipped count (for the provenance)."""
    return {t: Counter(len(s) for s in runs).most_common(1)[0][0] for t, runs in schedules.items()}
