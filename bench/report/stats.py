"""Statistics of a threshold sweep: pure functions from the raw runs table to derived tables.

Nothing here reads or writes files, so the report command and the notebooks compute the same numbers.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import stats as _scipy_stats

# Every per-run metric summarised per threshold, in report order.
METRICS: tuple[str, ...] = (
    "skipped",
    "speedup",
    "ideal_speedup",
    "max_abs",
    "mean_abs",
    "max_rel",
    "cosine",
    "ssim",
    "psnr",
    "adherence",
    "wall_s_median",
)
# Quality metrics where higher is better: the only ones a floor (p5 >= floor) makes sense for.
QUALITY_METRICS: tuple[str, ...] = ("ssim", "cosine", "psnr", "adherence")
STATS: tuple[str, ...] = ("n", "min", "p5", "median", "mean", "p95", "max", "ci_low", "ci_high")
DISTRIBUTION_COLUMNS: tuple[str, ...] = ("threshold", "metric", *STATS)

CI_CONFIDENCE = 0.95
CI_RESAMPLES = 9999
CI_SEED = 20241130  # fixed so the same runs give the same interval on every rebuild


def quantile(values: Sequence[float] | np.ndarray, q: float) -> float:
    """Linear-interpolated quantile (numpy's default) of the non-NaN values.

    Written out so that infinite values (PSNR of identical images) give inf, not NaN from inf - inf.
    """
    a = np.sort(np.asarray(values, dtype=float))
    a = a[~np.isnan(a)]
    if a.size == 0:
        return math.nan
    h = (a.size - 1) * q
    lo, hi = math.floor(h), math.ceil(h)
    if a[lo] == a[hi] or h == lo:
        return float(a[lo])
    return float(a[lo] + (h - lo) * (a[hi] - a[lo]))


def summarize(values: Sequence[float] | np.ndarray) -> dict[str, float]:
    """n, min, p5, median, mean, p95, max of the non-NaN values (NaN stats when there are none)."""
    a = np.asarray(values, dtype=float)
    a = a[~np.isnan(a)]
    if a.size == 0:
        return {"n": 0, **{k: math.nan for k in ("min", "p5", "median", "mean", "p95", "max")}}
    return {
        "n": int(a.size),
        "min": float(a.min()),
        "p5": quantile(a, 0.05),
        "median": quantile(a, 0.5),
        "mean": float(a.mean()),
        "p95": quantile(a, 0.95),
        "max": float(a.max()),
    }


def bootstrap_median_ci(
    values: Sequence[float] | np.ndarray,
    confidence: float = CI_CONFIDENCE,
    n_resamples: int = CI_RESAMPLES,
    seed: int = CI_SEED,
) -> tuple[float, float]:
    """Bootstrap confidence interval of the median, reproducible through a fixed seed.

    Percentile method: BCa's jackknife acceleration is unstable for the median of a handful of pairs.
    With one value, or all values equal, the resampled medians cannot vary: the interval is that value.
    """
    a = np.asarray(values, dtype=float)
    a = a[~np.isnan(a)]
    if a.size == 0:
        return math.nan, math.nan
    if a.size == 1 or np.all(a == a[0]):
        return float(a[0]), float(a[0])
    result = _scipy_stats.bootstrap(
        (a,),
        np.median,
        n_resamples=n_resamples,
        confidence_level=confidence,
        method="percentile",
        vectorized=True,
        axis=-1,
        rng=np.random.default_rng(seed),
    )
    return float(result.confidence_interval.low), float(result.confidence_interval.high)


def teacache_runs(runs: pd.DataFrame) -> pd.DataFrame:
    return runs[runs["kind"] == "teacache"]


def thresholds(runs: pd.DataFrame) -> list[float]:
    """The swept thresholds, ascending."""
    return sorted(float(t) for t in teacache_runs(runs)["threshold"].dropna().unique())


def distribution(runs: pd.DataFrame, metrics: Sequence[str] = METRICS) -> pd.DataFrame:
    """Tidy per-threshold distribution of every metric over the TeaCache runs (prompts x seeds).

    Only ``speedup`` gets a bootstrap interval of its median; the other rows carry NaN there.
    """
    tc = teacache_runs(runs)
    rows = []
    for threshold in thresholds(runs):
        at = tc[tc["threshold"] == threshold]
        for metric in metrics:
            values = pd.to_numeric(at[metric], errors="coerce").to_numpy(dtype=float)
            row = {"threshold": threshold, "metric": metric, **summarize(values)}
            row["ci_low"], row["ci_high"] = bootstrap_median_ci(values) if metric == "speedup" else (math.nan, math.nan)
            rows.append(row)
    frame = pd.DataFrame(rows, columns=list(DISTRIBUTION_COLUMNS))
    return frame.astype({"n": int}) if len(frame) else frame


def stat(dist: pd.DataFrame, metric: str, name: str = "median") -> pd.Series:
    """One statistic of one metric as a Series indexed by threshold (ascending)."""
    sel = dist[dist["metric"] == metric].set_index("threshold")[name]
    return sel.sort_index().astype(float)


@dataclass(frozen=True)
class Recommendation:
    """The highest threshold whose low tail (p5) of a quality metric stays at or above a floor."""

    threshold: float | None
    metric: str
    floor: float
    p5: float  # p5 of the metric at the recommended threshold, or at the smallest one when none passes
    reason: str
    failing_below: tuple[float, ...] = ()  # lower thresholds that miss the floor (a noisy tail)


def recommend(dist: pd.DataFrame, metric: str = "ssim", floor: float = 0.95) -> Recommendation:
    """Pick the highest threshold with p5(metric) >= floor; ``threshold=None`` when even the smallest fails.

    p5 rather than the median: a threshold is only safe if nearly every prompt and seed keeps its quality.
    """
    p5 = stat(dist, metric, "p5")
    if p5.empty:
        return Recommendation(None, metric, floor, math.nan, "no TeaCache runs in the sweep")
    passing = p5[p5 >= floor]
    if passing.empty:
        smallest = float(p5.index[0])
        return Recommendation(
            None,
            metric,
            floor,
            float(p5.iloc[0]),
            f"none: even the smallest threshold {smallest:g} has p5 {metric} {p5.iloc[0]:.4g} < {floor:g}",
        )
    best = float(passing.index.max())
    value = float(passing.loc[best])
    failing_below = [float(t) for t in p5.index if t < best and not p5.loc[t] >= floor]
    note = ""
    if failing_below:
        note = f" (lower thresholds {', '.join(f'{t:g}' for t in failing_below)} fail: noisy tail)"
    return Recommendation(
        best,
        metric,
        floor,
        value,
        f"highest threshold with p5 {metric} >= {floor:g}: {best:g} (p5 {value:.4g}){note}",
        tuple(failing_below),
    )


def pareto_front(speed: Sequence[float] | np.ndarray, quality: Sequence[float] | np.ndarray) -> np.ndarray:
    """Mask of points not dominated in (higher speed, higher quality).

    A point is dominated when another is at least as good in both and strictly better in one; points
    with a NaN coordinate are never on the front.
    """
    s = np.asarray(speed, dtype=float)
    q = np.asarray(quality, dtype=float)
    ok = ~(np.isnan(s) | np.isnan(q))
    front = ok.copy()
    for i in np.flatnonzero(ok):
        others = ok & (s >= s[i]) & (q >= q[i]) & ((s > s[i]) | (q > q[i]))
        if others.any():
            front[i] = False
    return front


def parse_steps(value) -> list[int]:
    """The skipped step indices of one run (a JSON list in the runs table)."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return []
    steps = json.loads(value) if isinstance(value, str) else list(value)
    return [int(s) for s in steps]


def skip_pattern(runs: pd.DataFrame) -> pd.DataFrame:
    """Fraction of runs that skipped each step: rows = thresholds, columns = step indices."""
    tc = teacache_runs(runs)
    if tc.empty:
        return pd.DataFrame()
    num_steps = int(tc["num_steps"].max())
    ts = thresholds(runs)
    counts = np.zeros((len(ts), num_steps))
    for row, threshold in enumerate(ts):
        at = tc[tc["threshold"] == threshold]
        for steps in at["skipped_steps"]:
            for step in parse_steps(steps):
                if 0 <= step < num_steps:
                    counts[row, step] += 1
        counts[row] /= max(len(at), 1)
    return pd.DataFrame(counts, index=pd.Index(ts, name="threshold"), columns=pd.RangeIndex(num_steps, name="step"))


def predicted_vs_actual(runs: pd.DataFrame) -> pd.DataFrame:
    """Per threshold: gate-replay prediction of skips against the skips measured in the sweep.

    Empty when no run has a prediction. ``exact`` is the fraction of runs where the two agree.
    """
    tc = teacache_runs(runs)
    tc = tc[pd.to_numeric(tc["predicted_skipped"], errors="coerce").notna()]
    rows = []
    for threshold in sorted(tc["threshold"].unique()):
        at = tc[tc["threshold"] == threshold]
        predicted = at["predicted_skipped"].to_numpy(dtype=float)
        actual = at["skipped"].to_numpy(dtype=float)
        diff = predicted - actual
        rows.append(
            {
                "threshold": float(threshold),
                "n": len(at),
                "predicted_median": float(np.median(predicted)),
                "actual_median": float(np.median(actual)),
                "mean_abs_diff": float(np.mean(np.abs(diff))),
                "exact": float(np.mean(np.isclose(predicted, actual))),
            }
        )
    return pd.DataFrame(rows, columns=["threshold", "n", "predicted_median", "actual_median", "mean_abs_diff", "exact"])


def adherence(runs: pd.DataFrame, threshold: float | None) -> dict[str, float] | None:
    """Mean adherence of the vanilla images against those at ``threshold``; None when nothing was scored."""
    values = pd.to_numeric(runs["adherence"], errors="coerce")
    if values.isna().all():
        return None
    vanilla = values[runs["kind"] == "vanilla"].dropna()
    out = {"vanilla_mean": float(vanilla.mean()) if len(vanilla) else math.nan, "vanilla_n": len(vanilla)}
    if threshold is not None:
        at = values[(runs["kind"] == "teacache") & (runs["threshold"] == threshold)].dropna()
        out.update(threshold=threshold, teacache_mean=float(at.mean()) if len(at) else math.nan, teacache_n=len(at))
    return out
