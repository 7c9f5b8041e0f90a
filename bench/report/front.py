"""Speed/quality fronts over every arm of a sweep: pure functions from the runs table to tables and words.

Rows are runs; ``arm`` and ``arm_setting`` name what ran (``bench.sweep.baselines``), ``pair_id`` the
(prompt, seed) pair whose vanilla run every arm of that pair is measured against, so two arms are
compared pair by pair. An optional ``rescale`` column tells TeaCache arms with different rescale
functions apart.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pandas as pd

from bench.report import stats
from bench.sweep.baselines import BASELINES, TEACACHE, VANILLA

QUALITIES: tuple[str, ...] = ("ssim", "cosine", "psnr")
KEYS: tuple[str, ...] = ("arm", "rescale", "arm_setting")  # what one point of a front is
ARM_LABELS = {TEACACHE: "TeaCache", "fewer-steps": "fewer steps", "static": "a static schedule",
              "step-cache": "mflux's step cache", "mlx-teacache": "mlx-teacache"}  # fmt: skip


def keys(runs: pd.DataFrame) -> list[str]:
    return [k for k in KEYS if k in runs.columns]


def arm_runs(runs: pd.DataFrame) -> pd.DataFrame:
    """Every run that is not a vanilla reference."""
    kind = runs["kind"] if "kind" in runs.columns else runs["arm"]
    return runs[(runs["arm"] != VANILLA) & (kind != VANILLA)]


def points(runs: pd.DataFrame, qualities: Sequence[str] = QUALITIES) -> pd.DataFrame:
    """One row per arm setting: n pairs, speedup (median, p5, p95, CI of the median), ideal speedup,
    computed steps, and median and p5 of every quality metric."""
    rows = []
    by = keys(runs)
    for key, at in arm_runs(runs).groupby(by, sort=True, dropna=False):
        key = key if isinstance(key, tuple) else (key,)
        speed = pd.to_numeric(at["speedup"], errors="coerce").to_numpy(dtype=float)
        summary = stats.summarize(speed)
        low, high = stats.bootstrap_median_ci(speed)
        row = dict(zip(by, key, strict=True))
        row.update(
            n=summary["n"], speedup_median=summary["median"], speedup_p5=summary["p5"],
            speedup_p95=summary["p95"], speedup_ci_low=low, speedup_ci_high=high,
            ideal_speedup_median=stats.quantile(pd.to_numeric(at["ideal_speedup"], errors="coerce"), 0.5),
            computed_median=stats.quantile(pd.to_numeric(at["computed"], errors="coerce"), 0.5),
        )  # fmt: skip
        for metric in qualities:
            values = pd.to_numeric(at[metric], errors="coerce").to_numpy(dtype=float)
            row[f"{metric}_median"] = stats.quantile(values, 0.5)
            row[f"{metric}_p5"] = stats.quantile(values, 0.05)
        rows.append(row)
    return pd.DataFrame(rows)


def mark_front(points: pd.DataFrame, quality: str = "ssim_median", speed: str = "speedup_median") -> pd.Series:
    """True where no other point is at least as fast and as good and strictly better in one of them."""
    mask = stats.pareto_front(points[speed].to_numpy(dtype=float), points[quality].to_numpy(dtype=float))
    return pd.Series(mask, index=points.index, name="on_front")


def _paired_difference(runs: pd.DataFrame, a: dict, b: dict, metric: str) -> np.ndarray:
    """Per pair: metric of setting a minus metric of setting b (pairs both ran)."""

    def select(point: dict) -> pd.Series:
        at = arm_runs(runs)
        for k in keys(runs):
            value = point.get(k)
            at = at[at[k].isna()] if value is None or (isinstance(value, float) and math.isnan(value)) else at[
                at[k] == value]  # fmt: skip
        return pd.to_numeric(at.set_index("pair_id")[metric], errors="coerce")

    left, right = select(a), select(b)
    common = left.index.intersection(right.index)
    return (left.loc[common] - right.loc[common]).to_numpy(dtype=float)


COMPARISON_COLUMNS: tuple[str, ...] = (
    "speed", "rescale", "threshold", "teacache_speedup", "teacache_quality", "baseline_arm", "baseline_setting",
    "baseline_speedup", "baseline_quality", "n_pairs", "difference", "ci_low", "ci_high", "outcome",
)  # fmt: skip


def compare(
    runs: pd.DataFrame,
    baselines: Sequence[str] = BASELINES,
    quality: str = "ssim",
    speed: str = "speedup_median",
) -> pd.DataFrame:
    """For each TeaCache setting and baseline arm: the best baseline setting at equal or greater speed.

    ``speed``: the measured median speedup, or ``"ideal_speedup_median"`` (N over computed steps) to
    compare at equal work where timings are too noisy to order the settings.
    Best: highest median ``quality`` (ties: the faster). ``difference``: median over pairs of TeaCache's
    quality minus the baseline's, with a bootstrap CI (``bench.report.stats.bootstrap_median_ci``);
    ``outcome``: "beats" (CI above 0), "loses" (CI below 0), "tie" (CI holds 0), or "no baseline"
    when no setting of that arm is as fast.
    """
    pts = points(runs, (quality,))
    column = f"{quality}_median"
    rows = []
    if pts.empty:
        return pd.DataFrame(columns=list(COMPARISON_COLUMNS))
    tc = pts[pts["arm"] == TEACACHE]
    for _, point in tc.iterrows():
        for arm in baselines:
            candidates = pts[(pts["arm"] == arm) & (pts[speed] >= point[speed])]
            row = {
                "speed": speed, "rescale": point.get("rescale"), "threshold": float(point["arm_setting"]),
                "teacache_speedup": point[speed], "teacache_quality": point[column], "baseline_arm": arm,
            }  # fmt: skip
            candidates = candidates[candidates[column].notna()]
            if candidates.empty:
                if (pts["arm"] == arm).any():
                    rows.append({**row, "n_pairs": 0, "outcome": "no baseline"})
                continue
            best = candidates.sort_values([column, speed], ascending=False).iloc[0]
            diff = _paired_difference(runs, point.to_dict(), best.to_dict(), quality)
            diff = diff[~np.isnan(diff)]
            low, high = stats.bootstrap_median_ci(diff)
            outcome = "beats" if low > 0 else "loses" if high < 0 else "tie"
            rows.append({
                **row, "baseline_setting": best["arm_setting"], "baseline_speedup": best[speed],
                "baseline_quality": best[column], "n_pairs": int(diff.size),
                "difference": float(np.median(diff)) if diff.size else math.nan,
                "ci_low": low, "ci_high": high, "outcome": outcome if diff.size else "no baseline",
            })  # fmt: skip
    frame = pd.DataFrame(rows, columns=list(COMPARISON_COLUMNS))
    return frame.sort_values(["baseline_arm", "rescale", "threshold"], na_position="first", ignore_index=True)


def verdict(comparison: pd.DataFrame, baseline: str = "fewer-steps", quality: str = "ssim") -> str:
    """The comparison with one baseline arm in plain words, one clause per TeaCache threshold."""
    label = ARM_LABELS.get(baseline, baseline)
    at = comparison[comparison["baseline_arm"] == baseline]
    if at.empty:
        return f"No {baseline} runs to compare TeaCache with."
    compared = at[at["outcome"] != "no baseline"]
    uncompared = at[at["outcome"] == "no baseline"]

    def clause(row) -> str:
        sign = "+" if row["difference"] >= 0 else ""
        x = "x ideal" if row.get("speed") == "ideal_speedup_median" else "x"
        return (
            f"{sign}{row['difference']:.3f} {quality} (95% CI {row['ci_low']:.3f}..{row['ci_high']:.3f}, "
            f"n={row['n_pairs']}) at {row['teacache_speedup']:.2f}{x} (threshold {row['threshold']:g}, against "
            f"{baseline} {row['baseline_setting']} at {row['baseline_speedup']:.2f}{x})"
        )

    beats = compared[compared["outcome"] == "beats"]
    parts = []
    if len(compared) and len(beats) == len(compared):
        parts.append(f"On this model TeaCache beats {label} at every threshold compared: by "
                     + "; by ".join(clause(r) for _, r in beats.iterrows()) + ".")  # fmt: skip
    elif len(beats):
        parts.append(f"On this model TeaCache beats {label} at {len(beats)} of {len(compared)} thresholds compared: "
                     + "; ".join(clause(r) for _, r in beats.iterrows()) + ".")  # fmt: skip
    elif len(compared):
        parts.append(f"On this model TeaCache does not beat {label} at any threshold compared.")
    others = compared[compared["outcome"] != "beats"]
    for _, row in others.iterrows():
        how = "loses to" if row["outcome"] == "loses" else "cannot be told apart from"
        parts.append(f"At threshold {row['threshold']:g} it {how} {label}: {clause(row)}.")
    if len(uncompared):
        listed = ", ".join(f"{t:g}" for t in uncompared["threshold"])
        parts.append(f"No {baseline} setting was as fast as TeaCache at threshold {listed}: not compared there.")
    return " ".join(parts)


def hypervolume(speed, quality, ref_speed: float = 1.0, ref_quality: float = 0.0) -> float:
    """Area that the points dominate above (ref_speed, ref_quality): one number per front, larger is better.

    The union of the rectangles from the reference corner to each point; NaN points and points not
    beyond the reference in both coordinates add nothing.
    """
    s = np.asarray(speed, dtype=float)
    q = np.asarray(quality, dtype=float)
    keep = ~(np.isnan(s) | np.isnan(q)) & (s > ref_speed) & (q > ref_quality)
    area, reached = 0.0, ref_quality
    for i in np.argsort(-s[keep], kind="stable"):  # fastest first: each higher point adds a strip
        if q[keep][i] > reached:
            area += (s[keep][i] - ref_speed) * (q[keep][i] - reached)
            reached = q[keep][i]
    return float(area)


def rescale_areas(points: pd.DataFrame, quality: str = "ssim_median", speed: str = "speedup_median") -> pd.DataFrame:
    """Per rescale function: the area its TeaCache front dominates (common reference: speed 1 and the
    lowest quality of any of their points) and how many of its settings are on the joint front."""
    tc = points[points["arm"] == TEACACHE]
    if tc.empty or "rescale" not in tc.columns:
        return pd.DataFrame(columns=["rescale", "settings", "area", "on_joint_front"])
    ref_quality = float(np.nanmin(tc[quality].to_numpy(dtype=float)))
    joint = mark_front(tc, quality=quality, speed=speed)
    rows = []
    for name, at in tc.groupby("rescale", sort=True):
        rows.append({
            "rescale": name, "settings": len(at),
            "area": hypervolume(at[speed], at[quality], 1.0, ref_quality),
            "on_joint_front": int(joint.loc[at.index].sum()),
        })  # fmt: skip
    return pd.DataFrame(rows).sort_values("area", ascending=False, ignore_index=True)


def rescale_verdict(table: pd.DataFrame, selected: str, quality: str = "ssim_median") -> str:
    """Does the rescale function chosen by cross-validation also give the better front?"""
    if table.empty or selected not in set(table["rescale"]):
        return f"No TeaCache runs with the rescale function {selected!r} to compare fronts with."
    best = table.iloc[0]
    mine = table[table["rescale"] == selected].iloc[0]
    if best["rescale"] == selected:
        others = ", ".join(f"{r['rescale']} {r['area']:.4g}" for _, r in table.iloc[1:].iterrows())
        return (f"The rescale function selected by cross-validation ({selected}) also gives the best front: area "
                f"{mine['area']:.4g} in speedup x {quality}" + (f" against {others}." if others else "."))  # fmt: skip
    return (f"The rescale function selected by cross-validation ({selected}) does not give the best front: "
            f"{best['rescale']} dominates more (area {best['area']:.4g} against {mine['area']:.4g} in speedup x "
            f"{quality}).")  # fmt: skip
