"""What a report says, computed from a validated sweep: distributions, the recommendation, the summary.

Pure functions of the sweep's tables (``bench.report.stats`` does the statistics); nothing here formats or writes.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass

import pandas as pd

from bench.report import stats
from bench.report.input import ReportInputError, Sweep
from calib import targets
from teacache.io import FORMAT_VERSION
from teacache.rescale import RescaleFunction

DEFAULT_FLOOR = 0.95
DEFAULT_METRIC = "ssim"
# The values a floor on each quality metric can take (SSIM, cosine and adherence are at most 1; PSNR is in dB).
FLOOR_RANGES = {"ssim": (0.0, 1.0), "cosine": (0.0, 1.0), "adherence": (0.0, 1.0), "psnr": (0.0, math.inf)}


def validate_floor(floor: float, metric: str = DEFAULT_METRIC, option: str = "--ssim-floor") -> float:
    """The floor on p5 of ``metric``: a finite number in the metric's range, else one ReportInputError."""
    if metric not in stats.QUALITY_METRICS:
        raise ReportInputError(f"--metric {metric!r}: expected one of {', '.join(stats.QUALITY_METRICS)}")
    low, high = FLOOR_RANGES[metric]
    number = isinstance(floor, numbers.Real) and not isinstance(floor, bool)
    if not number or not math.isfinite(floor) or not low <= floor <= high:
        expected = f"a number from {low:g} to {high:g}" if math.isfinite(high) else f"a finite number >= {low:g}"
        shown = repr(float(floor)) if number else repr(floor)
        raise ReportInputError(f"{option} {shown}: expected {expected} (a floor on p5 {metric})")
    return float(floor)


def rescale_floor(provenance: dict) -> float | None:
    """The rescale floor of the sweep: recorded by the sweep, or recomputed for a plain polynomial."""
    floor = provenance.get("rescale_floor")
    if floor is not None:
        return float(floor)
    data = provenance.get("rescale")
    if isinstance(data, dict):
        try:
            fn = RescaleFunction.from_dict(data)
        except (ValueError, TypeError):
            return None
        if not fn.is_time_aware:
            return fn.floor()[0]
    return None


def trace_threshold(ts: list[float], recommended: float | None, default: float | None) -> float:
    """The threshold whose per-step signal the trace plot shows: the recommended, else the default, else the middle."""
    if recommended is not None:
        return recommended
    if default is not None and default in ts:
        return float(default)
    return ts[len(ts) // 2]


def threshold_table(dist: pd.DataFrame) -> pd.DataFrame:
    """The main medians per threshold, one row each (the table of report.md and the console)."""

    def col(metric: str, name: str = "median") -> pd.Series:
        return stats.stat(dist, metric, name)

    table = pd.DataFrame(
        {
            "n": col("speedup", "n").astype(int),
            "skipped": col("skipped"),
            "speedup": col("speedup"),
            "ci_low": col("speedup", "ci_low"),
            "ci_high": col("speedup", "ci_high"),
            "ideal": col("ideal_speedup"),
            "ssim_p5": col("ssim", "p5"),
            "ssim": col("ssim"),
            "psnr": col("psnr"),
            "cosine_p5": col("cosine", "p5"),
            "adherence": col("adherence"),
        }
    )
    table.index.name = "threshold"
    return table


@dataclass(frozen=True)
class Analysis:
    """Everything a report shows, before it is drawn or formatted."""

    sweep: Sweep
    metric: str
    floor: float
    dist: pd.DataFrame
    rec: stats.Recommendation
    table: pd.DataFrame
    adherence: dict | None
    pva: pd.DataFrame
    default_threshold: float | None
    rescale_floor: float | None
    trace_threshold: float
    target: dict | None = None  # --target-speedup: the threshold nearest it and what it measured (target_speedup)

    @property
    def default_p5(self) -> float:
        """p5 of the metric at the variant's default threshold (NaN when it was not swept)."""
        return stats.stat(self.dist, self.metric, "p5").get(self.default_threshold, math.nan)


def measured_by(runs: pd.DataFrame) -> str | None:
    """Which ranks measured the rows and how many were contended (ranks sharing cores or a GPU time each
    other), or None for a run in one process."""
    if "rank" not in runs.columns or runs["rank"].isna().all():
        return None
    ranks = sorted(int(r) for r in runs["rank"].dropna().unique())
    contended = int(runs["contended"].fillna(False).astype(bool).sum()) if "contended" in runs.columns else 0
    if ranks == [0] and not contended:
        return None
    text = f"ranks {', '.join(map(str, ranks))}"
    if contended:
        text += (
            f"; {contended} of {len(runs)} rows contended: their ranks shared cores or a GPU, so their times and "
            "speedups are not what one process measures alone"
        )
    return text


def validate_target(speedup: float | None, option: str = "--target-speedup") -> float | None:
    """A speedup target > 1 (or None), else one ReportInputError."""
    if speedup is None:
        return None
    try:
        return targets.check_speedup(speedup, option)
    except targets.TargetError as exc:
        raise ReportInputError(str(exc)) from None


def target_speedup(table: pd.DataFrame, num_steps: int, speedup: float) -> dict:
    """The swept threshold whose median computed steps lie nearest N / S (calib.targets, as teacache-generate
    resolves a target), with what it measured; or why none is within one step, naming the nearest."""
    computed = num_steps - table["skipped"].to_numpy(dtype=float)
    found = {"speedup": speedup, "num_steps": num_steps, "computed_target": num_steps / speedup}
    try:
        threshold, count = targets.choose_for_speedup(
            list(table.index), computed, num_steps, speedup, arg="--target-speedup"
        )
    except targets.TargetError as exc:
        return {**found, "threshold": None, "reason": str(exc).replace("the calibration", "the sweep")}
    row = table.loc[threshold]
    names = {"skipped": "skipped", "speedup": "measured_speedup", "ci_low": "ci_low", "ci_high": "ci_high"}
    names |= {"ideal": "ideal_speedup", "ssim_p5": "ssim_p5"}
    measured = {mine: _clean(float(row[theirs])) for theirs, mine in names.items()}
    return {**found, "threshold": float(threshold), "computed": count, **measured, "reason": None}


def analyse(
    sweep: Sweep, floor: float = DEFAULT_FLOOR, metric: str = DEFAULT_METRIC, speedup: float | None = None
) -> Analysis:
    """The statistics of one sweep; raises ReportInputError when the metric has no values to put a floor on.

    ``speedup``: a speedup target (``--target-speedup``), answered from the sweep's median skipped steps.
    """
    floor = validate_floor(floor, metric)
    speedup = validate_target(speedup)
    runs = sweep.runs
    tc = stats.teacache_runs(runs)
    if pd.to_numeric(tc[metric], errors="coerce").isna().all():
        others = [
            m for m in stats.QUALITY_METRICS if m != metric and pd.to_numeric(tc[m], errors="coerce").notna().any()
        ]
        hint = f"; choose --metric {others[0]}" if others else ""
        raise ReportInputError(f"no {metric} values in runs.parquet (images not decoded or not scored){hint}")
    dist = stats.distribution(runs)
    rec = stats.recommend(dist, metric, floor)
    table = threshold_table(dist)
    default = sweep.provenance.get("default_threshold")
    default = float(default) if default is not None else None
    return Analysis(
        sweep=sweep,
        metric=metric,
        floor=floor,
        dist=dist,
        rec=rec,
        table=table,
        adherence=stats.adherence(runs, rec.threshold),
        pva=stats.predicted_vs_actual(runs),
        default_threshold=default,
        rescale_floor=rescale_floor(sweep.provenance),
        trace_threshold=trace_threshold(list(table.index), rec.threshold, default),
        target=None if speedup is None else target_speedup(table, _num_steps(sweep), speedup),
    )


def _num_steps(sweep: Sweep) -> int:
    steps = sweep.provenance.get("steps")
    return int(steps) if steps is not None else int(sweep.runs["num_steps"].median())


def _clean(value):
    """JSON-safe scalar: NaN and inf become None (strict JSON has neither)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def summary(analysis: Analysis) -> dict:
    """summary.json without its file list: the recommendation and the per-threshold medians."""
    prov, runs, rec = analysis.sweep.provenance, analysis.sweep.runs, analysis.rec
    adherence = analysis.adherence
    return {
        "format_version": FORMAT_VERSION,
        "variant": prov.get("variant") or str(runs["variant"].iloc[0]),
        "model": prov.get("model") or str(runs["model"].iloc[0]),
        "device_name": prov.get("device_name"),
        "sweep_date_utc": prov.get("date_utc"),
        "runs_sha256": analysis.sweep.runs_sha256,
        "metric": analysis.metric,
        "floor": analysis.floor,
        "recommended_threshold": rec.threshold,
        "recommended_p5": _clean(rec.p5),
        "reason": rec.reason,
        "default_threshold": analysis.default_threshold,
        "rescale_floor": analysis.rescale_floor,
        "adherence": {k: _clean(v) for k, v in adherence.items()} if adherence else None,
        **({"target_speedup": analysis.target} if analysis.target is not None else {}),
        "thresholds": [
            {"threshold": float(t), **{k: int(v) if k == "n" else _clean(float(v)) for k, v in row.items()}}
            for t, row in analysis.table.iterrows()
        ],
    }
