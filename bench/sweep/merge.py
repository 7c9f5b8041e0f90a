"""A sweep's merged tables (runs.parquet, decisions.parquet, noop.parquet, schedules.parquet) and its provenance.json,
from every saved pair wherever it was measured (rank 0 merges the shards of a sharded sweep)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from bench.quality.metrics import MAX_REL_EPS, SSIM_SETTINGS
from bench.sweep.arms import TIMING_ISOLATED
from bench.sweep.measure import Measured
from bench.sweep.parts import discard_parts, read_part
from bench.sweep.settings import SweepSettings
from calib.run import fingerprint, ranks, shard
from calib.run.prompts import pair_id
from teacache.io import write_json
from teacache.provenance import authorship, collect, read_previous

if TYPE_CHECKING:
    from calib.traces.runs import Traces


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


def write_tables(
    settings: SweepSettings,
    run: shard.ShardedRun,
    measured: Measured,
    locations: dict[str, Path],
    traces: Traces | None,
) -> Path:
    """The folder's tables from every pair wherever it was saved, and provenance.json (on rank 0). A resume
    that measured nothing keeps them as they are: they describe the runs that made them. Then ``OUT/pairs`` goes
    (:func:`~bench.sweep.parts.discard_parts`): the tables hold its rows, and a rerun rebuilds it from them."""
    # heavy (pandas): loaded after the arguments are checked
    from bench.sweep import records
    from bench.sweep.replay import predict_schedules

    out, thresholds, configs, added = settings.out, settings.thresholds, measured.configs, len(run.todo)
    previous = read_previous(out / "provenance.json")
    if added == 0 and previous is not None and (out / records.RUNS.file).is_file():
        print(f"nothing to measure: {out / records.RUNS.file} holds every pair; kept its tables and provenance.json")
        discard_parts(out)
        return out / records.RUNS.file
    recorded = measured.recorded
    if run.folder != out:  # the merged folder gets the settings its tables were made with
        recorded = settings.folder.save(out, measured.fingerprint)
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
    sharding = ranks.sharding_provenance(run.world, runs)
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
        **settings.loras.recorded(),
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
    predicted = runs.loc[runs["predicted_skipped"].notna(), ["run_id", "predicted_skipped"]]
    records.write_table(out / records.SCHEDULES.file, records.SCHEDULES, predicted)  # empty without --traces
    records.write_table(out / records.RUNS.file, records.RUNS, runs)
    write_json(out / "provenance.json", provenance)
    discard_parts(out)  # last: every table it feeds is written
    return out / records.RUNS.file
