"""The report's baselines section: every arm on one front, TeaCache against each baseline, rescale fronts,
and in-process against isolated timing.

Only for sweeps whose rows carry ``arm`` (``teacache-bench sweep --baselines/--compare-coefficients/
--isolate``); a sweep without them gets no section and its report is unchanged. Pure: runs table and
provenance in, markdown lines and file bytes out.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pandas as pd

from bench.report import front, front_plots, plots, stats
from bench.report.files import BASELINES_OUTPUTS
from bench.report.markdown import render

OUTPUTS = BASELINES_OUTPUTS  # the files this section adds to a report
SPEEDS = (("ideal_speedup_median", "equal work (ideal speedup N / computed)"),
          ("speedup_median", "measured speed (median paired speedup)"))  # fmt: skip


def has_arms(runs: pd.DataFrame) -> bool:
    return "arm" in runs.columns and runs["arm"].notna().any()


def primary_rescale(runs: pd.DataFrame, provenance: dict) -> str | None:
    arms = provenance.get("arms") or {}
    if arms.get("primary_rescale"):
        return arms["primary_rescale"]
    names = runs["rescale"].dropna().unique() if "rescale" in runs.columns else []
    return str(names[0]) if len(names) else None


def for_threshold_tables(sweep):
    """The sweep the threshold tables read (:func:`threshold_runs`)."""
    return dataclasses.replace(sweep, runs=threshold_runs(sweep.runs, sweep.provenance))


def json_ready(value):
    """NaN and infinities as None, numpy scalars as Python numbers, all the way down."""
    if isinstance(value, dict):
        return {str(k): json_ready(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_ready(v) for v in value]
    if hasattr(value, "item") and not isinstance(value, str):
        value = value.item()
    return None if isinstance(value, float) and not math.isfinite(value) else value


def threshold_runs(runs: pd.DataFrame, provenance: dict) -> pd.DataFrame:
    """The rows the threshold tables read: TeaCache with --coefficients' rescale function only."""
    if not has_arms(runs) or "rescale" not in runs.columns:
        return runs
    primary = primary_rescale(runs, provenance)
    other = (runs["kind"] == "teacache") & runs["rescale"].notna() & (runs["rescale"] != primary)
    return runs[~other].reset_index(drop=True)


def _f(value, digits: int = 3, unit: str = "") -> str:
    missing = value is None or (isinstance(value, float) and math.isnan(value))
    return "n/a" if missing else f"{value:.{digits}f}{unit}"


def _speedups(at: pd.DataFrame, vanilla: pd.DataFrame, column: str) -> np.ndarray:
    """Per repeat of every pair: the pair's median vanilla time over this repeat's time."""
    pairs = zip(vanilla["pair_id"], vanilla[column], strict=True)
    medians = {pid: float(np.median(np.asarray(w, dtype=float))) for pid, w in pairs}
    values = [medians[pid] / float(t) for pid, w in zip(at["pair_id"], at[column], strict=True) for t in w]
    return np.asarray(values, dtype=float)


def isolation(runs: pd.DataFrame) -> pd.DataFrame:
    """Per arm setting: speedup in-process and isolated, each with a bootstrap CI over repeats and pairs."""
    if "wall_s_in_process" not in runs.columns or runs["wall_s_in_process"].isna().all():
        return pd.DataFrame()
    vanilla = runs[runs["arm"] == "vanilla"]
    rows = []
    by = front.keys(runs)
    for key, at in front.arm_runs(runs).groupby(by, sort=True, dropna=False):
        key = key if isinstance(key, tuple) else (key,)
        row = dict(zip(by, key, strict=True))
        row["ideal"] = stats.quantile(pd.to_numeric(at["ideal_speedup"], errors="coerce"), 0.5)
        for name, column in (("in_process", "wall_s_in_process"), ("isolated", "wall_s")):
            values = _speedups(at, vanilla, column)
            low, high = stats.bootstrap_median_ci(values)
            row.update({f"{name}_n": int(values.size), f"{name}_median": float(np.median(values)),
                        f"{name}_ci_low": low, f"{name}_ci_high": high})  # fmt: skip
        row["agree"] = bool(row["in_process_ci_low"] <= row["isolated_ci_high"]
                            and row["isolated_ci_low"] <= row["in_process_ci_high"])  # fmt: skip
        rows.append(row)
    return pd.DataFrame(rows)


@dataclasses.dataclass
class BaselinesAnalysis:
    """What the section says, computed from the runs: no Markdown, no figures."""

    primary: str | None  # the rescale function of the threshold tables
    settings: dict  # arm -> its settings, as the sweep fixed them
    settings_from: str
    step_cache_native: list
    points: pd.DataFrame  # front.points: every arm setting's medians
    comparisons: dict  # speed -> front.compare's table
    has_baselines: bool
    views: list  # per speed: label, image, above_ideal, comparison rows, verdicts
    rescale: list  # per speed (only with several rescale functions): label, image, areas, verdict
    isolation: pd.DataFrame  # in-process against isolated timing; empty without --isolate

    @property
    def summary(self) -> dict:
        verdicts = {v["speed"]: v["verdicts"] for v in self.views if v["verdicts"]}
        found: dict = {"primary_rescale": self.primary, "verdicts": verdicts}
        if self.rescale:
            found["rescale"] = {r["speed"]: {"areas": r["areas"], "verdict": r["verdict"]} for r in self.rescale}
        if not self.isolation.empty:
            found["isolation_agree"] = bool(self.isolation["agree"].all())
        return found


def _comparison_rows(comparison: pd.DataFrame) -> list[dict]:
    rows = comparison.to_dict("records")
    for r in rows:
        r["setting"] = r["baseline_setting"] if isinstance(r["baseline_setting"], str) else "-"
        r["n"] = int(r["n_pairs"]) if not pd.isna(r["n_pairs"]) else 0
    return rows


def analyse(runs: pd.DataFrame, provenance: dict) -> BaselinesAnalysis:
    """Every number and verdict of the section for a sweep with arms."""
    arms = provenance.get("arms") or {}
    primary = primary_rescale(runs, provenance)
    pts = front.points(runs)
    comparisons = {speed: front.compare(runs, speed=speed) for speed, _ in SPEEDS}
    settings = arms.get("settings") or {}
    has_baselines = bool(settings) and bool((pts["arm"] != "teacache").any())
    views = []
    for speed, label in SPEEDS:
        above = pts[pts["speedup_median"] > pts["ideal_speedup_median"]] if speed == "speedup_median" else pts[:0]
        comparison = comparisons[speed]
        verdicts = {}
        if has_baselines:
            mine = comparison[comparison["rescale"] == primary] if "rescale" in comparison.columns else comparison
            verdicts = {baseline: front.verdict(mine, baseline) for baseline in settings}
        image = "baselines_front_ideal.png" if speed.startswith("ideal") else "baselines_front.png"
        views.append({"speed": speed, "label": label, "image": image, "above_ideal": len(above),
                      "comparison": _comparison_rows(comparison), "verdicts": verdicts})  # fmt: skip
    rescale = []
    tc = pts[pts["arm"] == "teacache"]
    if "rescale" in tc.columns and tc["rescale"].nunique() > 1:
        ideal = pts.assign(speedup_median=pts["ideal_speedup_median"])
        for speed, label, frame in (("ideal_speedup_median", "equal work", ideal), ("speedup_median", "measured speed",
                                                                                     pts)):  # fmt: skip
            areas = front.rescale_areas(frame)
            image = "rescale_fronts_ideal.png" if speed.startswith("ideal") else "rescale_fronts.png"
            verdict = front.rescale_verdict(areas, primary)
            rescale.append({"speed": speed, "label": label, "image": image, "frame": frame,
                            "areas": areas.to_dict("records"), "verdict": verdict})  # fmt: skip
    return BaselinesAnalysis(
        primary=primary, settings=settings, settings_from=str(arms.get("settings_from", "unknown source")),
        step_cache_native=list(arms.get("step_cache_native") or []), points=pts, comparisons=comparisons,
        has_baselines=has_baselines, views=views, rescale=rescale, isolation=isolation(runs),
    )  # fmt: skip


def _isolation_context(table: pd.DataFrame) -> dict:
    iso = table.to_dict("records")
    above = [r for r in iso if max(r["in_process_median"], r["isolated_median"]) > r["ideal"]]
    disagree = [f"{r['arm']} {r['arm_setting']}" for r in iso if not r["agree"]]
    return {"f": _f, "isolation": iso, "disagree": disagree, "isolation_above_ideal": len(above)}


def isolation_markdown(table: pd.DataFrame) -> str:
    """The in-process against isolated paragraph and table (``templates/baselines_isolation.md.j2``)."""
    return render("baselines_isolation.md.j2", **_isolation_context(table))


def markdown(analysis: BaselinesAnalysis) -> str:
    """The section's Markdown (``templates/baselines.md.j2``)."""
    return render("baselines.md.j2", a=analysis, labels=front.ARM_LABELS, **_isolation_context(analysis.isolation))


def section(runs: pd.DataFrame, provenance: dict) -> tuple[list[str], dict[str, bytes], dict]:
    """Markdown lines, files and a summary for a sweep with arms; nothing for one without."""
    if not has_arms(runs):
        return [], {}, {}
    analysis = analyse(runs, provenance)
    files: dict[str, bytes] = {
        "baselines_points.csv": analysis.points.to_csv(index=False).encode("utf-8"),
        "baselines_comparison.csv": pd.concat(analysis.comparisons.values(), ignore_index=True)
        .to_csv(index=False)
        .encode(),
    }
    for view in analysis.views:
        title = f"Every arm at {view['label']}"
        files[view["image"]] = plots.figure_png(front_plots.front_panels(analysis.points, title, speed=view["speed"]))
    for r in analysis.rescale:
        files[r["image"]] = plots.figure_png(front_plots.rescale_fronts(r["frame"]))
    if not analysis.isolation.empty:
        files["isolation.csv"] = analysis.isolation.to_csv(index=False).encode("utf-8")
    return markdown(analysis).split("\n"), files, analysis.summary
