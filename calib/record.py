"""``teacache-calib record``: vanilla generations that record the TeaCache signal at every step.

For every (prompt, seed) run and every gated step: x_rel_l1 (rel-L1 of block 0's modulated input
against the previous step, the gate's own function), y_rel_l1 (of the transformer output), the
cached residual's rel-L1 and the norms behind them; per CFG branch. Nothing is skipped: the recorder
is the gate's proxy in calibration mode, which is bit-exact with vanilla (tests/teacache/adapters/test_flux1.py).
Resumable per run: finished runs live in ``DIR/runs/<run_id>.parquet`` and are never redone, as long
as the settings are the same (``DIR/fingerprint.json``); new seeds extend the folder.
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
from dataclasses import dataclass
from pathlib import Path

from calib.run import arguments, estimate, fingerprint, ranks, shard, units
from calib.run.command import command
from calib.run.folder import LOG, RunFolder
from calib.run.generation import generate, implausible, paired_overhead, settings_fingerprint
from calib.run.interleave import Turn, interleave
from calib.run.prompts import pair_id
from teacache import apply_teacache, variants
from teacache.io import FORMAT_VERSION, append_log, write_json, write_parquet
from teacache.provenance import authorship, collect, read_previous

PROG = "teacache-calib record"
BRANCHES = {0: "cond", 1: "uncond"}
COLUMNS = [
    "run_id", "variant", "model", "prompt_id", "prompt", "seed", "step", "num_steps", "sigma", "branch",
    "x_rel_l1", "y_rel_l1", "residual_rel_l1", "x_norm", "y_norm", "residual_norm",
]  # fmt: skip
RESULTS = ("runs", "traces.parquet", "provenance.json")  # what shows that a folder holds a recording
OUTPUTS = (*RESULTS, units.SHARDS, LOG)  # what --force-new removes (progress.log: a line per recorded run)
# A run is the unit of a sharded recording: OUT/shards/rank-<r>/runs/<run_id>.parquet
LAYOUT = units.UnitLayout("runs", ".parquet", noun="runs")
EXTENDABLE = ("seeds",)
FOLDER = RunFolder(PROG, RESULTS, OUTPUTS, EXTENDABLE, LAYOUT)
# What the output rule (teacache.outputs) lets it write: a recording, in a folder its fingerprint names it in.
WRITES = arguments.Writes(PROG, names=(*OUTPUTS, fingerprint.FILE), marker=fingerprint.FILE)


def setup_arg_parser() -> argparse.ArgumentParser:
    parser = arguments.CommandParser(prog=PROG, description=__doc__.split("\n\n")[0])
    arguments.add_model_arguments(parser)
    arguments.add_lora_arguments(parser)
    parser.add_argument("--seeds", default="0,1,2", help="comma-separated or ranges, e.g. 0-4")
    parser.add_argument("--steps", type=int, default=None, help="default: the model's own")
    parser.add_argument("--size", default=None, help="WIDTHxHEIGHT (default: the model's own)")
    parser.add_argument("--guidance", type=float, default=None, help="default: the model's own")
    parser.add_argument("--quantize", type=int, default=None, choices=(3, 4, 5, 6, 8))
    parser.add_argument("--out", required=True, type=arguments.path_argument, help="the traces folder")
    parser.add_argument("--dry-run", action="store_true", help="check the arguments, print the plan and exit")
    parser.add_argument("--overhead-pairs", type=int, default=3, help="paired vanilla/recorded runs timed (0: skip)")
    parser.add_argument(
        "--force-new", action="store_true", help="discard what DIR holds from an earlier recording and start afresh"
    )
    parser.add_argument("--yes", action="store_true", help="run even if a timed run estimates over an hour of work")
    return parser


@dataclass(frozen=True, kw_only=True)
class RecordSettings(arguments.Generations):
    """Everything one recording needs, validated: built by :func:`plan`, run by :func:`run_record`."""

    overhead_pairs: int = 3
    # Work a caller runs after the recording on the same model (a campaign's sweep): checked against the same
    # timed run, so an oversized sweep is refused before the recording, not after it and the fit.
    then: estimate.Work | None = None
    then_name: str = "the next stage"  # what that work is, in words
    then_fewer: str = ""  # what to ask fewer of, in the caller's own option names


def plan(
    model: str,
    out: Path,
    prompts: str | None = None,
    seeds: str = "0,1,2",
    steps: int | None = None,
    size: str | None = None,
    guidance: float | None = None,
    base_model: str | None = None,
    quantize: int | None = None,
    overhead_pairs: int = 3,
    force_new: bool = False,
    yes: bool = False,
    lora_paths: list[str] | None = None,
    lora_scales: list[str] | None = None,
) -> RecordSettings:
    """Check every argument (nothing loads); raise InputError with one line naming the argument."""
    generations = arguments.checked_generations(
        model, out, prompts, seeds, steps, size, guidance, base_model, quantize, force_new, yes, lora_paths,
        lora_scales, writes=WRITES,
        why=" steps (the first and last are always computed: fewer leave no step the gate could skip)",
    )  # fmt: skip
    arguments.check_at_least(overhead_pairs, 0, "--overhead-pairs")
    return RecordSettings(**generations, overhead_pairs=overhead_pairs)


def settings_from_args(args: argparse.Namespace) -> RecordSettings:
    return plan(
        model=args.model, out=args.out, prompts=args.prompts, seeds=args.seeds, steps=args.steps, size=args.size,
        guidance=args.guidance, base_model=args.base_model, quantize=args.quantize,
        overhead_pairs=args.overhead_pairs, force_new=args.force_new, yes=args.yes, lora_paths=args.lora_paths,
        lora_scales=args.lora_scales,
    )  # fmt: skip


def fingerprint_settings(settings: RecordSettings, variant: str | None = None) -> dict:
    """What makes two recordings the same recording (the variant joins once the model has loaded)."""
    return settings_fingerprint(settings, variant)


run_id = pair_id  # a recording's run is one (prompt, seed) pair


def record_run(model, handle, settings: dict, prompt_id: str, prompt: str, seed: int, variant: str):
    """One recorded run: its rows (COLUMNS) and the generation (final latents, loop time)."""
    # heavy (pandas): loaded after the arguments are checked
    import pandas as pd

    before = len(handle.records)
    gen = generate(model, prompt, seed, settings["steps"], settings["width"], settings["height"], settings["guidance"])
    rows = handle.records[before:]
    frame = pd.DataFrame(rows)
    frame["branch"] = frame["branch"].map(BRANCHES)
    frame = frame.assign(
        run_id=run_id(prompt_id, seed), variant=variant, model=settings["model"], prompt_id=prompt_id,
        prompt=prompt, seed=seed,
    )  # fmt: skip
    return frame[COLUMNS], gen


def measure_overhead(model, settings: dict, prompt: str, pairs: int) -> dict:
    """Paired, interleaved loop times (:mod:`calib.run.interleave`): vanilla against the recorder, after a warm-up."""
    args = (settings["steps"], settings["width"], settings["height"], settings["guidance"])
    generate(model, prompt, 0, *args)
    with apply_teacache(model, calibrate=True):
        generate(model, prompt, 0, *args)

    def run(turn: Turn) -> float:
        if turn.arm == 0:
            return generate(model, prompt, 0, *args).loop_s
        with apply_teacache(model, calibrate=True):
            return generate(model, prompt, 0, *args).loop_s

    vanilla, recorded = interleave(run, 2, pairs)
    ratios = [r / v for v, r in zip(vanilla, recorded, strict=True)]
    return paired_overhead(ratios)


def _todo(settings: RecordSettings, folder: Path | None = None, runs=None) -> list[tuple[str, str, int]]:
    done = LAYOUT.saved(settings.out if folder is None else folder)  # one listing, not a stat per run
    return [item for item in (settings.pairs if runs is None else runs) if run_id(item[0], item[2]) not in done]


def describe_plan(settings: RecordSettings, todo: list) -> str:
    with_loras = f" with LoRA {settings.loras.describe()}" if settings.loras else ""
    return (
        f"record {settings.model}{with_loras}: {len(settings.prompts)} prompts x {len(settings.seeds)} seeds = "
        f"{len(settings.pairs)} runs ({len(settings.pairs) - len(todo)} already done), {settings.steps} steps, "
        f"{settings.width}x{settings.height}, guidance {settings.guidance} -> {settings.out}"
    )


def check_parts_agree(settings: RecordSettings, folder: Path | None = None) -> None:
    """A folder from before fingerprints: its finished runs must have the steps its provenance.json says
    (an earlier version resumed under any settings and rewrote the provenance)."""
    # heavy (pandas): loaded after the arguments are checked
    import pandas as pd

    folder = settings.out if folder is None else folder
    for path in sorted((folder / "runs").glob("*.parquet")):
        steps = sorted({int(n) for n in pd.read_parquet(path, columns=["num_steps"])["num_steps"]})
        if steps != [settings.steps]:
            raise fingerprint.SettingsMismatch(
                f"--out: {folder} holds runs that disagree with its provenance.json ({path.name}: steps "
                f"{','.join(map(str, steps))}; provenance: steps {settings.steps}); pass --force-new to start it "
                "afresh, or choose a new --out"
            )


def run_record(settings: RecordSettings, world: ranks.World | None = None) -> Path | None:
    """Record (or resume, or extend by seeds) into ``settings.out``; returns traces.parquet's path.

    Under ``mlx.launch`` each rank records its share of the runs into ``OUT/shards/rank-<r>`` and rank 0
    merges them (the others return None). ValueError / FolderLocked before the model loads (on every rank);
    Interrupted on Ctrl-C, saying what is saved; ShardsIncomplete naming the runs not done.
    """
    keys, fp = [run_id(p, seed) for p, _t, seed in settings.pairs], fingerprint_settings(settings)
    return FOLDER.run(
        FOLDER.sharded(settings.out, keys, fp, world), fp, settings.force_new,
        work=functools.partial(_record, settings), merge=functools.partial(_write_traces, settings),
        interrupted=functools.partial(_interrupted_message, settings),
        adopted=functools.partial(check_parts_agree, settings),
    )  # fmt: skip


def _interrupted_message(settings: RecordSettings) -> str:
    """What a plain recording stopped by Ctrl-C has saved."""
    saved = len(settings.pairs) - len(_todo(settings))
    if saved == 0:  # stopped before the first run was saved: there is no runs/ folder to name
        return f"interrupted: none of {len(settings.pairs)} runs was saved yet; run the same command again to start"
    return FOLDER.stopped(saved, len(settings.pairs), settings.out / "runs")


def _record(settings: RecordSettings, run: shard.ShardedRun) -> dict:
    """This rank's share of the runs, each saved into the rank's folder as soon as it is recorded."""
    world, folder = run.world, run.folder
    parts = folder / "runs"
    by_id = {run_id(p, seed): (p, text, seed) for p, text, seed in settings.pairs}
    todo = _todo(settings, folder, [by_id[k] for k in run.share])
    if world.rank == 0:
        print(describe_plan(settings, [by_id[k] for k in run.todo]))
        for line in (world.contention_message(), world.hardware_message()):
            if line:
                print(line)
    if world.size > 1:
        print(f"rank {world.rank} of {world.size} ({world.backend}): {len(todo)} runs: {', '.join(run.share)}")
    model = arguments.load_model(settings.model, settings.base_model, settings.quantize, settings.loras)
    variant = variants.variant_of(model)
    fp = fingerprint_settings(settings, variant)
    state = FOLDER.begin(folder, fp)
    gen_settings = {
        "model": settings.model, "steps": settings.steps, "width": settings.width, "height": settings.height,
        "guidance": settings.guidance,
    }  # fmt: skip
    if todo:  # before the folder is claimed: a refusal of the work leaves it as it was
        _confirm_work(model, settings, todo, run.todo and world.rank == 0, folder / LOG)
    recorded = FOLDER.save(folder, fp, state)
    overhead = _previous_overhead(settings.out)
    if world.rank == 0 and run.todo and settings.overhead_pairs > 0:  # one measurement, by the rank that merges
        overhead = measure_overhead(model, gen_settings, settings.pairs[0][1], settings.overhead_pairs)
        if world.contended:
            overhead = {**overhead, "contended": True}  # other ranks ran on the same cores meanwhile
        print(describe_overhead(overhead))
    fields = world.row_fields()
    label = "recording" if world.size == 1 else f"recording rank {world.rank}"
    with apply_teacache(model, calibrate=True) as handle, FOLDER.progress(folder, label, len(todo)) as progress:
        for pid, text, seed in todo:
            frame, _ = record_run(model, handle, gen_settings, pid, text, seed, variant)
            write_parquet(parts / f"{run_id(pid, seed)}.parquet", frame.assign(**fields))
            progress.advance()
    return {"variant": variant, "fingerprint": fp, "recorded": recorded, "overhead": overhead, "model": model}


def _confirm_work(model, settings: RecordSettings, todo: list, overhead: bool, log: Path) -> None:
    """Time a vanilla run of the first prompt, print and log the estimate, refuse above an hour without --yes."""
    args = (todo[0][1], todo[0][2], settings.steps, settings.width, settings.height, settings.guidance)
    overhead_runs = 2 * (settings.overhead_pairs + 1) if overhead else 0  # the overhead check's warm-up and pairs
    work = estimate.Work(len(todo) + overhead_runs, settings.steps)
    per_step, source = estimate.per_step(generate(model, *args).total_s, lambda: generate(model, *args).total_s,
                                         work, settings.yes, later=settings.then)  # fmt: skip
    line = estimate.describe(work, per_step, source)
    print(line)
    estimate.check_confirmed(work, per_step, settings.yes, fewer="prompts or seeds")
    if settings.then is not None:
        what = f"{settings.then_name} is"
        estimate.check_confirmed(settings.then, per_step, settings.yes, fewer=settings.then_fewer, what=what)
    append_log(log, line)


def _write_traces(settings: RecordSettings, run: shard.ShardedRun, measured: dict, locations) -> Path:
    """traces.parquet from every run wherever it was saved, and provenance.json (on rank 0). A resume that
    recorded nothing keeps both files as they are: they describe the runs that made them."""
    # heavy (pandas): loaded after the arguments are checked
    import pandas as pd

    out, recorded, added = settings.out, measured["recorded"], len(run.todo)
    previous = read_previous(out / "provenance.json")
    if added == 0 and previous is not None and (out / "traces.parquet").is_file():
        print(f"nothing to record: {out / 'traces.parquet'} holds every run; kept it and its provenance.json")
        return out / "traces.parquet"
    if run.folder != out:  # the merged folder gets the settings its table was made with
        recorded = FOLDER.save(out, measured["fingerprint"])
    ids = [run_id(pid, seed) for pid, _t, seed in settings.pairs]
    traces = pd.concat([pd.read_parquet(locations[i] / "runs" / f"{i}.parquet") for i in ids], ignore_index=True)
    sharding = ranks.sharding_provenance(run.world, traces)
    provenance = collect(
        model=settings.model,
        variant=measured["variant"],
        model_path=settings.model if Path(settings.model).exists() else None,
        quantization=settings.quantize,
        dtype=_dtype(),
        resolution=f"{settings.width}x{settings.height}",
        steps=settings.steps,
        guidance=settings.guidance,
        scheduler=_scheduler_name(measured["model"]),
        prompts=[{"id": k, "text": v} for k, v in settings.prompts.items()],
        seeds=settings.seeds,
        n_runs=len(settings.pairs),
        recording_overhead=measured["overhead"],
        columns=COLUMNS,
        settings_fingerprint=fingerprint.digest(recorded),
        history=recorded["history"],
        **settings.loras.recorded(),
        **sharding,
    )
    provenance.update(authorship(previous, provenance, added, len(ids)))
    write_parquet(out / "traces.parquet", traces)
    write_json(out / "provenance.json", provenance)
    print(f"wrote {out / 'traces.parquet'} ({len(traces)} rows, format_version {FORMAT_VERSION})")
    return out / "traces.parquet"


def describe_overhead(overhead: dict) -> str:
    if not overhead["reliable"]:
        return f"recording overhead: unreliable, not stored ({overhead['reason']})"
    return f"recording overhead (loop time, {overhead['pairs']} pairs): median {100 * overhead['median']:+.2f}%"


def _previous_overhead(out: Path) -> dict | None:
    """A resumed recording keeps the overhead its first run measured (a resume measures none); one an earlier
    version stored without judging it is judged now, against the same band."""
    try:
        previous = json.loads((out / "provenance.json").read_text(encoding="utf-8")).get("recording_overhead")
    except (OSError, ValueError, AttributeError):
        return None
    if not isinstance(previous, dict) or "reliable" in previous or previous.get("median") is None:
        return previous
    reason = implausible(float(previous["median"]))
    if reason is None:
        return {**previous, "reliable": True}
    return {**previous, "reliable": False, "reason": f"measured by an earlier version: {reason}", "median": None,
            "min": None, "max": None}  # fmt: skip


@command(PROG)
def main(argv: list[str] | None = None) -> int:
    args = setup_arg_parser().parse_args(argv)
    settings = settings_from_args(args)
    if not args.dry_run:
        run_record(settings)
        return 0
    if not settings.force_new:
        FOLDER.check(settings.out, fingerprint_settings(settings))
    todo = _todo(settings)
    print(describe_plan(settings, todo))
    for pid, _text, seed in todo:
        print(f"  would record {run_id(pid, seed)}")
    return 0


def _dtype() -> str:
    # heavy (mflux): loaded after the arguments are checked
    from mflux.models.common.config.model_config import ModelConfig

    return str(ModelConfig.precision)


def _scheduler_name(model) -> str:
    return getattr(model, "scheduler_name", None) or (
        "flow_match_euler_discrete" if "shapes" in str(type(model)).lower() else "linear"
    )


if __name__ == "__main__":
    sys.exit(main())
