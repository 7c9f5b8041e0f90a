"""``teacache-bench fullsize``'s tables: runs.csv (the raw table, one row per generation, at full precision),
summary.csv (derived from it by :func:`summarize`) and provenance.json, merged into OUT after each model so a
configuration measured again replaces its rows and the others are kept."""

from __future__ import annotations

import hashlib
import json
import math
import statistics
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd

import calib
import teacache
from bench.timing.fullsize_records import CONFIG_KEY, RUNS, SUMMARY, read_table, write_table
from calib.targets import ideal_bound
from teacache.io import FORMAT_VERSION, project_root, write_json
from teacache.models.fullsize import MEANINGLESS

PROJECT_ROOT = project_root()
SUMMARY_COLUMNS = SUMMARY.names
RUN_COLUMNS = RUNS.names  # runs.csv: one row per generation (or per arm that could not run: note)


def summarize(runs: pd.DataFrame) -> pd.DataFrame:
    """summary.csv from runs.csv: per configuration, one row per arm (in the order of its first repeat).

    Speedups are medians over repeats of vanilla / arm of the same repeat, with min and max; ideal is
    N / (N - skipped); the proxy's overhead is proxy-all against vanilla of the same repeat. Peaks are
    medians over repeats too: on CUDA one arm's peak jumps between allocator levels from run to run (1.6 GiB
    apart for vanilla FLUX.1 on the H200, results/cuda-nvidia-h200/proxy-cost-flux1/RUN.md), so a maximum
    compares the levels two arms happened to hit, not what each holds.
    """
    runs = runs.assign(_key=config_keys(runs))
    rows = [row for _key, config in runs.groupby("_key", sort=False) for row in _summary_rows(config)]
    return pd.DataFrame(rows, columns=SUMMARY_COLUMNS)


def _summary_rows(config: pd.DataFrame) -> list[dict]:
    timed = config[config["note"].isna()] if "note" in config.columns else config
    refused = config[config["note"].notna()] if "note" in config.columns else config[:0]
    first = timed.iloc[0]
    steps = int(first["steps"])
    by_arm = {name: runs.sort_values("repeat") for name, runs in timed.groupby("arm", sort=False)}
    order = timed[timed["repeat"] == timed["repeat"].min()].sort_values("position")["arm"]
    vanilla_loops = list(by_arm["vanilla"]["loop_s"])
    proxy = by_arm["proxy-all"]
    overheads = [100 * (p / v - 1) for p, v in zip(proxy["loop_s"], vanilla_loops, strict=True)]
    common = {
        **{k: first[k] for k in ("family", "model", "variant", "params_b", "dtype", "quantize", "resolution",
                                 "steps", "guidance", "tag", "hardware")},
        "branches": proxy["branches"].iloc[0],
        "vanilla_ms_per_step": 1000 * statistics.median(vanilla_loops) / steps,
        "vanilla_ms_per_step_min": 1000 * min(vanilla_loops) / steps,
        "vanilla_ms_per_step_max": 1000 * max(vanilla_loops) / steps,
        "proxy_overhead_pct": statistics.median(overheads), "proxy_overhead_pct_min": min(overheads),
        "proxy_overhead_pct_max": max(overheads),
        "vanilla_peak_memory_gib": statistics.median(by_arm["vanilla"]["peak_memory_gib"]),
        "repeats": len(vanilla_loops), "full_size": bool(first["full_size"]), "rescale": first["rescale"],
    }  # fmt: skip
    rows = []
    for name in order:
        if name == "vanilla":
            continue
        runs = by_arm[name]
        loops = list(runs["loop_s"])
        ratios = [v / r for r, v in zip(loops, vanilla_loops, strict=True)]
        skipped = int(statistics.median(runs["skipped"]))
        blocks = runs["blocks"].iloc[0] if "blocks" in runs.columns else None
        ideal = ideal_bound(steps, steps - skipped, None if pd.isna(blocks) else int(blocks))
        speedup = statistics.median(ratios)
        rows.append({
            **common, "arm": runs["kind"].iloc[0], "threshold": runs["threshold"].iloc[0], "skipped": skipped,
            "predicted_skipped": runs["predicted_skipped"].iloc[0], "speedup": speedup, "speedup_min": min(ratios),
            "speedup_max": max(ratios), "ideal": ideal, "ratio_to_ideal": speedup / ideal,
            "arm_ms_per_step": 1000 * statistics.median(loops) / steps,
            "peak_memory_gib": statistics.median(runs["peak_memory_gib"]),
            "cache_memory_mib": max(runs["cache_memory_mib"]),
            "noop_exact": all(_true(v) for v in runs["exact"]) if skipped == 0 else None,
            "max_abs_diff": max(runs["max_abs_diff"]),
        })  # fmt: skip
    rows += [{**common, "arm": r["kind"], "threshold": r["threshold"], "note": r["note"]}
             for r in refused.to_dict("records")]  # fmt: skip
    return rows


def _true(value) -> bool:
    """An ``exact`` cell, from this run (a bool) or read back from runs.csv (a bool or its spelling)."""
    return value is True or value == "True" or (isinstance(value, bool | np.bool_) and bool(value))


def code_digest() -> str:
    """sha256 of the Python sources of teacache, bench and calib as imported: which tree measured, also
    where no git checkout travels with the code."""
    digest = hashlib.sha256()
    for package in (teacache, sys.modules["bench"], calib):
        root = Path(package.__file__).parent
        for path in sorted(root.rglob("*.py")):
            digest.update(str(path.relative_to(root.parent)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def key_text(value: object) -> str:
    """One spelling per key value, whether it comes from this run or back from a CSV (4, 4.0, "" or NaN)."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def config_keys(frame: pd.DataFrame) -> list[tuple[str, ...]]:
    """Each row's configuration (CONFIG_KEY), spelled by :func:`key_text`: the key rows are merged and summarized by."""
    return [tuple(key_text(v) for v in row) for row in frame[list(CONFIG_KEY)].itertuples(index=False, name=None)]


def _merge(path: Path, new: pd.DataFrame) -> pd.DataFrame:
    """OUT's rows with those of the configurations in ``new`` replaced by ``new``'s."""
    if path.exists():
        old = read_table(path, RUNS)
        replaced = set(config_keys(new))
        keep = [key not in replaced for key in config_keys(old)]
        new = pd.concat([old[keep], new], ignore_index=True)
    return new.reindex(columns=list(RUN_COLUMNS))


def checkout_of_this_code(git: dict) -> dict:
    """The git fields, when the sources are the root of their checkout; else nulls (code copied into a
    folder of another checkout: that checkout's commit says nothing about this code; code_sha256 does)."""
    try:
        top = subprocess.run(
            ["git", "rev-parse", "--show-toplevel"], cwd=PROJECT_ROOT, capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return {"commit": None, "dirty": None}
    return git if Path(top).resolve() == PROJECT_ROOT.resolve() else {"commit": None, "dirty": None}


def write_outputs(out: Path, run_rows: list[dict], models: dict[str, dict]) -> pd.DataFrame:
    """Merge ``run_rows`` into OUT's runs.csv (a configuration measured again replaces its rows), rebuild
    summary.csv from it and add the provenance. Returns the summary.

    runs.csv is the raw table, at full precision; summary.csv is derived from it. Configurations whose runs
    predate the raw fields (``kind``, ``exact``, ...: the committed H200 campaign) keep the summary rows
    they were written with.
    """
    runs = _merge(out / RUNS.file, pd.DataFrame(run_rows, columns=RUN_COLUMNS))
    raw = runs["kind"].notna()
    summary = summarize(runs[raw])
    if (out / SUMMARY.file).exists():
        legacy = read_table(out / SUMMARY.file, SUMMARY)
        rebuilt = set(config_keys(runs[raw]))
        legacy = legacy[[key not in rebuilt for key in config_keys(legacy)]]
        summary = pd.concat([legacy.reindex(columns=SUMMARY_COLUMNS), summary], ignore_index=True)
    write_table(out / RUNS.file, RUNS, runs)
    write_table(out / SUMMARY.file, SUMMARY, summary)

    existing = {}
    if (out / "provenance.json").exists():
        existing = json.loads((out / "provenance.json").read_text(encoding="utf-8")).get("models", {})
    existing.update(models)
    write_json(out / "provenance.json", {"format_version": FORMAT_VERSION, "note": MEANINGLESS, "models": existing})
    return summary
