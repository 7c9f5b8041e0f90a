"""``teacache-bench sweep``: threshold x prompt x seed, each TeaCache run paired with a vanilla run.

Per (prompt, seed) pair, in one process after a warm-up, interleaved: each repeat runs vanilla and
every threshold once, the order rotated from repeat to repeat (calib.run.interleave). Raw records only
(runs.parquet, decisions.parquet, noop.parquet, provenance.json; schemas in bench.sweep.records);
``teacache-bench report`` derives everything else. Resumable per pair: finished pairs live in
``DIR/pairs/<pair_id>.*.parquet`` and are never redone, as long as the settings are the same
(``DIR/fingerprint.json``); new seeds or thresholds extend the folder.

Metrics against the paired vanilla run: final latents max-abs, mean-abs, max-rel = max |a-b| / (|b| + eps)
with eps = 1e-6, cosine; decoded uint8 RGB images: SSIM (scikit-image, data_range=255,
channel_axis=-1, i.e. per-channel SSIM averaged, default 7x7 Gaussian-free window) and PSNR
(data_range=255; inf for identical images). Timing: the denoising loop (before_loop to after_loop
callbacks, one mx.eval per step); speedup = median vanilla loop time / median TeaCache loop time.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bench.common import parse_coefficients, parse_thresholds
from bench.quality.metrics import MAX_REL_EPS, SSIM_SETTINGS
from bench.quality.scorers import adherence_scorer
from bench.sweep import arms as sweep_arms
from bench.sweep.arms import TIMING_ISOLATED
from bench.sweep.baselines import STEP_CACHE_NATIVE, mlx_teacache_arms, parse_baselines
from bench.sweep.baselines import teacache as teacache_arm
from calib.run import arguments, estimate, fingerprint, shard
from calib.run.command import run_guarded
from calib.run.generation import generate, settings_fingerprint
from calib.run.progress import append_log, track
from calib.run.prompts import pair_id, parse_seeds
from teacache import apply_teacache, variants
from teacache.gate import GateConfig
from teacache.io import write_json
from teacache.loading import resolve_spec
from teacache.provenance import authorship, collect, read_previous

PROG = "teacache-bench sweep"
# What the sweep writes into its folder: --force-new removes exactly these.
LOG = "progress.log"  # a line per measured pair (calib.run.progress)
OUTPUTS = ("pairs", "images", "runs.parquet", "decisions.parquet", "noop.parquet", "provenance.json", shard.SHARDS, LOG)
# What shows that a folder holds a sweep's results (images and shard folders alone are no sweep to check)
RESULTS = ("pairs", "runs.parquet", "decisions.parquet", "noop.parquet", "provenance.json")
EXTENDABLE = ("seeds", "thresholds")  # settings a rerun may add to
# What the output rule (calib.run.outputs) lets it write: a sweep, in a folder its fingerprint names it in.
WRITES = arguments.Writes(PROG, names=(*OUTPUTS, fingerprint.FILE), marker=fingerprint.FILE)
ARMS_ONLY = ("arm", "arm_setting", "rescale", "steps_run")  # columns the plain sweep's runs table leaves out
# A pair is the unit of a sharded sweep: its parts under <folder>/pairs, its images under OUT/images
LAYOUT = shard.UnitLayout("pairs", ".runs.parquet", shared=("images/{key}-*.png",))


def setup_arg_parser() -> argparse.ArgumentParser:
    parser = arguments.CommandParser(prog=PROG, description=__doc__.split("\n\n")[0])
    arguments.add_model_arguments(parser)
    parser.add_argument("--thresholds", required=True, help="comma-separated, e.g. 0,0.1,0.2")
    parser.add_argument("--seeds", default="0,1", help="comma-separated or ranges, e.g. 0-4")
    parser.add_argument("--steps", type=int, default=None, help="default: the model's own")
    parser.add_argument("--size", default=None, help="WIDTHxHEIGHT (default: the model's own)")
    parser.add_argument("--guidance", type=float, default=None, help="default: the model's own")
    parser.add_argument("--quantize", type=int, default=None, choices=(3, 4, 5, 6, 8))
    parser.add_argument("--repeats", type=int, default=3, help="timed repeats of every run")
    parser.add_argument("--coefficients", default="packaged", help="packaged, a fit.json, or c4,...,c0")
    parser.add_argument("--x-range", default=None, metavar="LO,HI", help="calibrated x range of c4,...,c0")
    parser.add_argument("--traces", type=Path, default=None, help="trace table (any format): predict skips by replay")
    parser.add_argument(
        "--baselines",
        default=None,
        metavar="ARMS",
        help="also run these arms: fewer-steps,static,step-cache,mlx-teacache (its apply_teacache, same thresholds)",
    )
    parser.add_argument(
        "--compare-coefficients", default=None, metavar="A,B",
        help="one TeaCache arm per rescale function (each: packaged, a fit.json, ...); a rescale column per row",
    )  # fmt: skip
    parser.add_argument(
        "--isolate", action="store_true", help="time every generation in a fresh process (quality stays in-process)"
    )
    parser.add_argument("--save-images", action="store_true", help="keep every decoded image under DIR/images")
    parser.add_argument("--out", required=True, type=arguments.path_argument, help="the sweep folder")
    parser.add_argument(
        "--force-new", action="store_true", help="discard what DIR holds from an earlier sweep and start afresh"
    )
    parser.add_argument("--yes", action="store_true", help="run even if the warm-up estimates over an hour of work")
    return parser


# ---------------------------------------------------------------------------------------- adherence


def _adherence_fn(variant: str):
    if not variants.get(variant).scores_adherence:
        return None
    return adherence_scorer(variant)  # imports the variant's scorer (PIL, scipy) only now


# ---------------------------------------------------------------------------------------- settings


@dataclass(frozen=True)
class SweepSettings:
    """Everything one sweep needs, validated: built by :func:`plan`, run by :func:`run_sweep`."""

    model: str
    thresholds: list[float]
    prompts: dict[str, str]
    seeds: list[int]
    steps: int
    width: int
    height: int
    guidance: float
    repeats: int
    out: Path
    coefficients: str = "packaged"
    traces: Path | None = None
    x_range: tuple[float, float] | None = None
    base_model: str | None = None
    quantize: int | None = None
    save_images: bool = False
    force_new: bool = False
    baselines: tuple[str, ...] = ()  # bench.sweep.baselines arms besides TeaCache
    compare_coefficients: tuple[str, ...] = ()  # rescale sources besides --coefficients
    isolate: bool = False
    yes: bool = False  # run work estimated over an hour (calib.run.estimate)

    @property
    def arms_mode(self) -> bool:
        """Every pair measured by bench.sweep.baselines.measure_pair (rows carry arm, arm_setting, rescale)."""
        return bool(self.baselines or self.compare_coefficients or self.isolate)

    @property
    def rescale_sources(self) -> tuple[str, ...]:
        """--coefficients first (the one the threshold tables report), then the others to compare."""
        return (self.coefficients, *(c for c in self.compare_coefficients if c != self.coefficients))

    @property
    def extendable(self) -> tuple[str, ...]:
        # the baseline grids follow the thresholds: a new threshold would change every pair's arms
        return ("seeds",) if self.arms_mode else EXTENDABLE

    @property
    def pairs(self) -> list[tuple[str, str, int]]:
        return [(pid, text, seed) for pid, text in self.prompts.items() for seed in self.seeds]

    @property
    def generation(self) -> tuple:
        return self.steps, self.width, self.height, self.guidance


def plan(
    model: str,
    thresholds: str,
    out: Path,
    prompts: str | None = None,
    seeds: str = "0,1",
    steps: int | None = None,
    size: str | None = None,
    guidance: float | None = None,
    repeats: int = 3,
    coefficients: str = "packaged",
    traces: Path | None = None,
    base_model: str | None = None,
    quantize: int | None = None,
    save_images: bool = False,
    force_new: bool = False,
    x_range: str | None = None,
    baselines: str | None = None,
    compare_coefficients: str | None = None,
    isolate: bool = False,
    yes: bool = False,
) -> SweepSettings:
    """Check every argument (nothing is read but the prompt file, nothing loads); raise ValueError."""
    steps, width, height, guidance = arguments.generation_settings(
        model, base_model, steps, size, guidance, 3, " steps"
    )
    arguments.check_at_least(repeats, 1, "--repeats")
    parse_coefficients(coefficients)

    arms = parse_baselines(baselines)
    compare = _parse_compare(compare_coefficients)
    if compare and x_range is not None:
        raise ValueError("--x-range: applies to --coefficients numbers only; give files to --compare-coefficients")
    return SweepSettings(
        model=model,
        thresholds=parse_thresholds(thresholds),
        prompts=arguments.read_prompts(prompts, model, base_model),
        seeds=parse_seeds(seeds),
        steps=steps,
        width=width,
        height=height,
        guidance=float(guidance),
        repeats=repeats,
        out=arguments.check_out_dir(out, writes=WRITES),
        coefficients=coefficients,
        traces=traces,
        x_range=_parse_x_range(x_range),
        base_model=base_model,
        quantize=quantize,
        save_images=save_images,
        force_new=force_new,
        baselines=arms,
        compare_coefficients=compare,
        isolate=bool(isolate),
        yes=bool(yes),
    )


def _parse_compare(text: str | None) -> tuple[str, ...]:
    """'packaged,fit.json' -> the sources; each must be a source --coefficients takes (numbers: no commas)."""
    if text is None:
        return ()
    sources = tuple(part.strip() for part in str(text).split(",") if part.strip())
    if not sources:
        raise ValueError("--compare-coefficients: expected comma-separated rescale sources, e.g. packaged,fit.json")
    for source in sources:
        if source != "packaged" and not isinstance(parse_coefficients(source), Path):
            raise ValueError(
                f"--compare-coefficients: {source!r} is not 'packaged' or a file (a fit.json, a calibration .json "
                "or a .py module); coefficient numbers go to --coefficients"
            )
    if len(set(sources)) != len(sources):
        raise ValueError("--compare-coefficients: a source given twice")
    return sources


def _parse_x_range(text: str | None):
    # heavy (pandas): loaded after the arguments are checked
    from calib.fit.coefficient_sources import parse_x_range

    return parse_x_range(text) if text is not None else None


def settings_from_args(args: argparse.Namespace) -> SweepSettings:
    return plan(
        model=args.model, thresholds=args.thresholds, out=args.out, prompts=args.prompts, seeds=args.seeds,
        steps=args.steps, size=args.size, guidance=args.guidance, repeats=args.repeats,
        coefficients=args.coefficients, traces=args.traces, base_model=args.base_model, quantize=args.quantize,
        save_images=args.save_images, force_new=args.force_new, x_range=args.x_range, baselines=args.baselines,
        compare_coefficients=args.compare_coefficients, isolate=args.isolate, yes=args.yes,
    )  # fmt: skip


def read_traces(path: Path, steps: int):
    """The traces predictions replay, read and validated by the one trace reader, for runs of ``steps`` steps."""
    # heavy (pandas): loaded after the arguments are checked
    from bench.sweep.replay import read_replay_traces
    from calib.traces.reader import TraceError

    arguments.check_input_file(path, "--traces")
    try:
        return read_replay_traces([path], steps, num_steps_arg="--steps")
    except TraceError as exc:  # the reader names its input TRACES; here it is the --traces argument
        raise ValueError(f"--traces: {str(exc).removeprefix('TRACES: ')}") from None


def check_inputs(settings: SweepSettings):
    """The input files, read and checked before the model loads: (traces frame or None, fixed rescale or None)."""
    traces = read_traces(settings.traces, settings.steps) if settings.traces is not None else None
    if traces is not None:
        variant = resolve_spec(settings.model, settings.base_model).name
        others = [v for v in traces.variants if v != variant]
        if others:
            raise ValueError(
                f"--traces: {settings.traces} holds traces of {', '.join(others)}, not of {variant}: its replay "
                f"would predict nothing about this sweep; record {variant}'s traces (teacache-calib record)"
            )
    rescale = None
    if settings.coefficients != "packaged" or settings.x_range is not None:
        # heavy (pandas): loaded after the arguments are checked
        from calib.fit.coefficient_sources import resolve_coefficients

        if isinstance(parse_coefficients(settings.coefficients), Path):
            arguments.check_input_file(Path(settings.coefficients.split("#", 1)[0]), "--coefficients")
        rescale = resolve_coefficients(settings.coefficients, None, settings.x_range)[0]
    for source in settings.compare_coefficients:  # files read now; packaged ones once the variant is known
        if source != "packaged":
            # heavy (pandas): loaded after the arguments are checked
            from calib.fit.coefficient_sources import resolve_coefficients

            arguments.check_input_file(Path(source.split("#", 1)[0]), "--compare-coefficients")
            resolve_coefficients(source, None, None, arg="--compare-coefficients")
    return traces, rescale


def resolve_rescales(settings: SweepSettings, primary, variant: str) -> dict:
    """Every TeaCache arm's rescale function by source: --coefficients' (``primary``) first."""
    # heavy (pandas): loaded after the arguments are checked
    from calib.fit.coefficient_sources import resolve_coefficients

    found = {settings.coefficients: primary}
    for source in settings.rescale_sources[1:]:
        found[source] = resolve_coefficients(source, variant, None, arg="--compare-coefficients")[0]
    return found


def _rescale_settings(rescale) -> dict:
    return {k: v for k, v in rescale.to_dict().items() if k != "provenance"}


def fingerprint_settings(settings: SweepSettings, rescale=None, variant: str | None = None) -> dict:
    """What makes two sweeps the same sweep. Before the model loads the variant (and so the packaged
    coefficients) may be unknown; those keys join once it has."""
    fp = settings_fingerprint(settings, variant, thresholds=settings.thresholds, repeats=settings.repeats)
    if rescale is not None:
        fp["coefficients"] = _rescale_settings(rescale)
    # the arm settings join only when given, so a sweep without them keeps its old fingerprint
    if settings.baselines:
        fp["baselines"] = list(settings.baselines)
    if settings.compare_coefficients:
        fp["compare_coefficients"] = list(settings.compare_coefficients)
    if settings.isolate:
        fp["isolate"] = True
    return fp


# ------------------------------------------------------------------------------------------- one pair


def run_pair(model, settings: SweepSettings, pair, thresholds, configs, adherence, images_dir, variant: str):
    """Vanilla and every threshold of one (prompt, seed) pair, measured as the arms sweep measures them
    (:func:`bench.sweep.arms.run_pair_arms`), in the plain sweep's columns. Returns (runs rows, decision rows, noop).
    """
    tc_arms = [(settings.coefficients, teacache_arm(configs[t])) for t in thresholds]
    noop_config = configs[thresholds[-1]]
    rows, decisions, noop = sweep_arms.run_pair_arms(
        model, settings, pair, tc_arms, [], adherence, images_dir, variant, noop_config
    )
    return [{k: v for k, v in row.items() if k not in ARMS_ONLY} for row in rows], decisions, noop


# --------------------------------------------------------------------------------------- the folder


def _part(parts: Path, pid: str, table: str) -> Path:
    return parts / f"{pid}.{table}.parquet"


# Pair parts of earlier versions lack the predicted skips (added when the folder's table is assembled).
PART_FILL = {"predicted_skipped": float("nan")}


def read_part(path: Path, table):
    """One saved part of a pair; a damaged one is named with the way out (its pair is measured anew)."""
    # heavy (pandas): loaded after the arguments are checked
    from bench.sweep import records

    try:
        return records.read_table(path, table, fill=PART_FILL if table is records.RUNS else None)
    except records.RecordError as exc:
        raise records.RecordError(
            f"{exc} ({path}); delete that file and run the same command again: its pair is measured anew"
        ) from None


def done_thresholds(parts: Path, pairs: list[tuple[str, str, int]]) -> dict[str, set[float]]:
    """Per pair, the thresholds its finished part holds (a runs part is written last: it marks them done)."""
    # heavy (pandas): loaded after the arguments are checked
    from bench.sweep import records

    done = {}
    for prompt_id, _text, seed in pairs:
        path = _part(parts, pair_id(prompt_id, seed), "runs")
        if path.is_file():
            runs = read_part(path, records.RUNS)
            done[pair_id(prompt_id, seed)] = {float(t) for t in runs.loc[runs["kind"] == "teacache", "threshold"]}
    return done


def save_pair(parts: Path, pid: str, rows: list[dict], decisions: list[dict], noop: dict) -> None:
    """Write one pair's tables, merged with what an earlier run of the pair left (an extension by thresholds).

    Decisions and noop first, runs last: a runs part marks the pair's thresholds done, and a rerun after
    an interruption between the writes recomputes them (rows of the same run_id are replaced, not doubled).
    """
    # heavy (pandas): loaded after the arguments are checked
    import pandas as pd

    from bench.sweep import records

    new_ids = {r["run_id"] for r in rows}
    merged = {}
    for table, fresh in ((records.DECISIONS, decisions), (records.NOOP, [noop]), (records.RUNS, rows)):
        path = parts / f"{pid}.{table.file}"
        frame = records.to_frame(table, fresh)
        if path.is_file():
            old = read_part(path, table)
            if table is records.NOOP:  # the proxy-noop of the first run of the pair stays
                frame = old
            elif table is records.RUNS:
                keep = old[~old["run_id"].isin(new_ids) & (old["kind"] != "vanilla")]
                vanilla = old[old["kind"] == "vanilla"]  # the pair's reference run stays the first one measured
                teacache = pd.concat([keep, frame[frame["kind"] != "vanilla"]], ignore_index=True)
                frame = pd.concat([vanilla, teacache.sort_values("threshold", kind="stable")], ignore_index=True)
            else:
                frame = pd.concat([old[~old["run_id"].isin(new_ids)], frame], ignore_index=True)
        merged[table.file] = frame
    for table in (records.DECISIONS, records.NOOP, records.RUNS):
        records.write_table(parts / f"{pid}.{table.file}", table, merged[table.file])


def _assemble(settings: SweepSettings, locations: dict[str, Path]):
    """The tables of every pair, in plan order, each read from the folder that holds it complete."""
    # heavy (pandas): loaded after the arguments are checked
    import pandas as pd

    from bench.sweep import records

    order = [pair_id(pid, seed) for pid, _t, seed in settings.pairs]
    tables = {}
    for table in (records.RUNS, records.DECISIONS, records.NOOP):
        frames = [read_part(locations[pid] / "pairs" / f"{pid}.{table.file}", table) for pid in order]
        tables[table.file] = pd.concat(frames, ignore_index=True)
    runs = tables[records.RUNS.file]
    keep = (runs["kind"] != "teacache") | runs["threshold"].isin(settings.thresholds)
    return runs[keep].reset_index(drop=True), tables[records.DECISIONS.file], tables[records.NOOP.file]


def check_parts_agree(settings: SweepSettings, folder: Path | None = None) -> None:
    """A folder from before fingerprints: its finished pairs must say what its provenance.json says.

    An earlier version resumed under any settings and rewrote the provenance, so a provenance alone
    cannot vouch for the runs; their own steps and repeat counts can.
    """
    # heavy (pandas): loaded after the arguments are checked
    from bench.sweep import records

    folder = settings.out if folder is None else folder
    for path in sorted((folder / "pairs").glob("*.runs.parquet")):
        runs = read_part(path, records.RUNS)
        steps = sorted({int(n) for n in runs["num_steps"]})
        repeats = sorted({len(w) for w in runs["wall_s"]})
        if steps != [settings.steps] or repeats != [settings.repeats]:
            raise fingerprint.SettingsMismatch(
                f"--out: {folder} holds runs that disagree with its provenance.json ({path.name}: steps "
                f"{_joined(steps)}, repeats {_joined(repeats)}; provenance: steps {settings.steps}, repeats "
                f"{settings.repeats}); pass --force-new to start it afresh, or choose a new --out"
            )


def _joined(values) -> str:
    return ",".join(str(v) for v in values)


def todo_pairs(settings: SweepSettings, folder: Path | None = None, pairs=None):
    """The pairs with work left in ``folder`` (default: the sweep folder), each with the thresholds it lacks."""
    folder = settings.out if folder is None else folder
    pairs = settings.pairs if pairs is None else pairs
    done = done_thresholds(folder / "pairs", pairs)
    todo = []
    for pair in pairs:
        pid = pair_id(pair[0], pair[2])
        missing = [t for t in settings.thresholds if t not in done.get(pid, set())]
        if pid not in done or missing:
            todo.append((pair, missing))
    return todo


# ------------------------------------------------------------------------------------- the ranks


def agreed_settings(settings: SweepSettings, rescale=None) -> dict:
    """What every rank of a sharded sweep must share: the fingerprint without the hardware (ranks may differ)."""
    return {k: v for k, v in fingerprint_settings(settings, rescale).items() if k != "hardware"}


def sharded_run(settings: SweepSettings, world: shard.World, rescale=None) -> shard.ShardedRun:
    """The sweep's pairs spread over the ranks; a saved pair needs no more work once it has every threshold."""
    pairs = {pair_id(p, seed): (p, text, seed) for p, text, seed in settings.pairs}
    wanted = set(settings.thresholds)

    def complete(folder: Path, key: str) -> bool:
        return wanted <= done_thresholds(folder / "pairs", [pairs[key]]).get(key, set())

    return shard.ShardedRun(world, settings.out, list(pairs), LAYOUT, agreed_settings(settings, rescale), complete)


def folder_check(settings: SweepSettings, partial: dict):
    """The settings check of one folder whose pairs this sweep may resume or merge."""

    def check(folder: Path) -> None:
        state = fingerprint.check(folder, partial, RESULTS, settings.extendable, command=PROG)
        if state.status == "adopt":
            check_parts_agree(settings, folder)

    return check


def run_sweep(settings: SweepSettings, world: shard.World | None = None) -> Path | None:
    """Run (or resume, or extend) the sweep into ``settings.out``; returns runs.parquet's path.

    Under ``mlx.launch`` each rank runs its share of the pairs into ``OUT/shards/rank-<r>`` and rank 0
    merges them into OUT once every rank is through; the other ranks return None. Raises ValueError for
    bad input and FolderLocked when another process writes a folder, both before the model loads (on
    every rank: a rank's refusal stops them all); Interrupted on Ctrl-C, saying what is saved;
    ShardsIncomplete when pairs are not done, naming them.
    """
    traces, fixed_rescale = check_inputs(settings)
    world = world if world is not None else shard.connect()
    run = sharded_run(settings, world, fixed_rescale)
    if settings.force_new:
        shard.force_new(world, settings.out, run.folder, PROG, OUTPUTS)
    with contextlib.ExitStack() as stack:
        check = folder_check(settings, fingerprint_settings(settings, fixed_rescale))
        shard.claim(stack, world, settings.out, run.folder, PROG, check)
        stack.enter_context(fingerprint.withdrawn_on_failure(run.folder, RESULTS))
        measured, error = run.measure(
            functools.partial(_sweep, settings, run, fixed_rescale, traces),
            functools.partial(_interrupted_message, settings),
        )
        merge = None
        if measured is not None:
            added = len(run.todo)
            merge = functools.partial(_write_tables, settings, run, measured, traces=traces, added=added)
        return run.conclude(error, merge)


def _interrupted_message(settings: SweepSettings) -> str:
    """What a plain sweep stopped by Ctrl-C has saved."""
    saved = len(settings.pairs) - len(todo_pairs(settings))
    return (
        f"interrupted: {saved} of {len(settings.pairs)} pairs are saved in {settings.out / 'pairs'}; "
        "run the same command again to resume"
    )


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
    extending = sum(1 for (pid, _t, seed), _m in todo if _part(parts, pair_id(pid, seed), "runs").is_file())
    if world.rank == 0:
        print(
            f"sweep {settings.model}: {len(settings.pairs)} pairs ({len(settings.pairs) - len(run.todo)} done"
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


def _sweep(settings: SweepSettings, run: shard.ShardedRun, fixed_rescale, traces=None) -> Measured:
    """This rank's share of the pairs, each saved into the rank's folder as soon as it is measured."""
    world, folder, thresholds = run.world, run.folder, settings.thresholds
    by_id = {pair_id(p, seed): (p, text, seed) for p, text, seed in settings.pairs}
    todo = todo_pairs(settings, folder, [by_id[k] for k in run.share])
    _announce(settings, run, todo)
    model = arguments.load_model(settings.model, settings.base_model, settings.quantize)
    spec = variants.get(variants.variant_of(model))
    variant, default_threshold, skip_first = spec.name, spec.default_threshold, spec.skip_first_n_steps
    rescale = fixed_rescale or variants.get(variant).rescale()
    fp = fingerprint_settings(settings, rescale, variant)
    rescales = resolve_rescales(settings, rescale, variant) if settings.arms_mode else None
    if rescales is not None and len(rescales) > 1:
        fp["compare_rescales"] = {k: _rescale_settings(v) for k, v in list(rescales.items())[1:]}
    state = fingerprint.check(folder, fp, RESULTS, settings.extendable, command=PROG)
    if state.message(folder):
        print(state.message(folder))
    if todo:  # before the folder is claimed: a refusal of the work leaves it as it was
        work, warm = work_left(settings, todo), (todo[0][0][1], todo[0][0][2], *settings.generation)
        again = lambda: generate(model, *warm).total_s  # noqa: E731
        per_step, source = estimate.per_step(_warm_up(model, settings, todo[0][0], rescale), again, work, settings.yes)
        line = estimate.describe(work, per_step, source)
        print(line if world.size == 1 else f"rank {world.rank}: {line}")
        estimate.check_confirmed(work, per_step, settings.yes)
        append_log(folder / LOG, line)
    recorded = fingerprint.save(folder, PROG, fp, state)

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
    with track(label, len(todo), "pairs", log=folder / LOG) as progress:
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


def _write_tables(
    settings: SweepSettings, run: shard.ShardedRun, measured: Measured, locations, traces, added: int
) -> Path:
    """The folder's tables from every pair wherever it was saved, and provenance.json (on rank 0). A resume
    that measured nothing (``added`` 0) keeps them as they are: they describe the runs that made them."""
    # heavy (pandas): loaded after the arguments are checked
    from bench.sweep import records
    from bench.sweep.replay import predict_schedules

    out, thresholds, configs = settings.out, settings.thresholds, measured.configs
    previous = read_previous(out / "provenance.json")
    if added == 0 and previous is not None and (out / records.RUNS.file).is_file():
        print(f"nothing to measure: {out / records.RUNS.file} holds every pair; kept its tables and provenance.json")
        return out / records.RUNS.file
    recorded = measured.recorded
    if run.folder != out:  # the merged folder gets the settings its tables were made with
        recorded = fingerprint.save(
            out,
            PROG,
            measured.fingerprint,
            fingerprint.check(out, measured.fingerprint, RESULTS, settings.extendable, command=PROG),
        )
    runs, decisions, noop = _assemble(settings, locations)
    runs["predicted_skipped"] = float("nan")
    if traces is not None:
        predicted = predict_schedules(traces, configs)
        predicted["pair_id"] = [pair_id(p, s) for p, s in zip(predicted["prompt_id"], predicted["seed"], strict=True)]
        lookup = predicted.set_index(["pair_id", "threshold"])["predicted_skipped"]
        keys = list(zip(runs["pair_id"], runs["threshold"], strict=True))
        runs["predicted_skipped"] = [float(lookup.get(k, float("nan"))) for k in keys]
        if "rescale" in runs.columns:  # the replay predicts --coefficients' schedules only
            runs.loc[runs["rescale"].notna() & (runs["rescale"] != settings.coefficients), "predicted_skipped"] = np.nan
    sharding = shard.sharding_provenance(run.world, runs)
    provenance = collect(
        model=settings.model,
        variant=measured.variant,
        steps=settings.steps,
        guidance=settings.guidance,
        resolution=f"{settings.width}x{settings.height}",
        thresholds=thresholds,
        prompts=[{"id": k, "text": v} for k, v in settings.prompts.items()],
        seeds=settings.seeds,
        repeats=settings.repeats,
        max_rel_eps=MAX_REL_EPS,
        ssim=SSIM_SETTINGS,
        rescale=measured.rescale.to_dict(),
        rescale_floor=configs[thresholds[-1]].rescale_floor(settings.steps),
        default_threshold=measured.default_threshold,
        skip_first_n_steps=measured.skip_first,
        max_consecutive_skips=configs[thresholds[-1]].max_consecutive_skips,
        quantization=settings.quantize,
        timing="denoising loop, before_loop to after_loop callbacks, after a warm-up"
        + (f"; {TIMING_ISOLATED}" if settings.isolate else ""),
        traces=str(settings.traces) if settings.traces else None,
        traces_num_steps=traces.num_steps if traces is not None else None,
        settings_fingerprint=fingerprint.digest(recorded),
        history=recorded["history"],
        **sharding,
        **({"arms": measured.arms} if measured.arms is not None else {}),
    )
    provenance.update(authorship(previous, provenance, added, len(settings.pairs)))
    records.write_table(out / records.DECISIONS.file, records.DECISIONS, decisions)
    records.write_table(out / records.NOOP.file, records.NOOP, noop)
    records.write_table(out / records.RUNS.file, records.RUNS, runs)
    write_json(out / "provenance.json", provenance)
    return out / records.RUNS.file


def main(argv: list[str] | None = None) -> int:
    args = setup_arg_parser().parse_args(argv)
    code, path = run_guarded(PROG, lambda: run_sweep(settings_from_args(args)))
    if code:
        return code
    if path is None:  # a rank other than 0 under mlx.launch: rank 0 says what was merged
        return 0
    # heavy (pandas): loaded after the arguments are checked
    from bench.sweep import records
    from bench.sweep.schedules import same_schedule_warnings

    found = records.read_sweep(path.parent)
    runs = found.runs
    table = runs[runs["kind"] == "teacache"].groupby("threshold")[["skipped", "speedup", "ssim", "cosine"]].median()
    print(table.to_string(float_format=lambda v: f"{v:.4f}"))
    for warning in same_schedule_warnings(runs, found.decisions, found.provenance):
        print(f"{PROG}: warning: {warning}", file=sys.stderr)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
