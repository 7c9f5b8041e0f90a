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

OUTPUTS = frozenset(
    {
        "baselines_front.png",
        "baselines_front_ideal.png",
        "rescale_fronts.png",
        "rescale_fronts_ideal.png",
        "baselines_comparison.csv",
        "baselines_points.csv",
        "isolation.csv",
    }
)
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


def _comparison_lines(comparison: pd.DataFrame) -> list[str]:
    lines = [
        "| rescale | threshold | TeaCache speedup | TeaCache SSIM | baseline | setting | baseline speedup | "
        "baseline SSIM | n | SSIM difference [95% CI] | outcome |",
        "|---|---:|---:|---:|---|---|---:|---:|---:|---|---|",
    ]
    for r in comparison.itertuples():
        setting = r.baseline_setting if isinstance(r.baseline_setting, str) else "-"
        lines.append(
            f"| {r.rescale} | {r.threshold:g} | {_f(r.teacache_speedup, 2, 'x')} | {_f(r.teacache_quality, 4)} | "
            f"{r.baseline_arm} | {setting} | {_f(r.baseline_speedup, 2, 'x')} | {_f(r.baseline_quality, 4)} | "
            f"{int(r.n_pairs) if not pd.isna(r.n_pairs) else 0} | {_f(r.difference, 4)} "
            f"[{_f(r.ci_low, 4)}, {_f(r.ci_high, 4)}] | {r.outcome} |"
        )
    return lines


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


def _isolation_lines(table: pd.DataFrame, provenance: dict) -> list[str]:
    if table.empty:
        return ["No isolation check in this sweep: `teacache-bench sweep --isolate` times every generation in a "
                "fresh process and keeps the in-process times beside them."]  # fmt: skip
    agree = table["agree"].all()
    lines = [
        "Every timed generation ran twice: in this process (interleaved with the others) and in a fresh process "
        "(`bench.sweep.isolate`: load, one warm-up run, one timed run). Speedup per repeat: the pair's median vanilla "
        "time over that repeat's time; 95% bootstrap CI of the median over repeats and pairs.",
        "",
        "| arm | setting | n | ideal | in-process speedup [95% CI] | isolated speedup [95% CI] | CIs overlap |",
        "|---|---|---:|---:|---|---|---|",
    ]
    for r in table.to_dict("records"):
        lines.append(
            f"| {r['arm']} | {r['arm_setting']} | {r['isolated_n']} | {_f(r['ideal'], 2, 'x')} | "
            f"{_f(r['in_process_median'], 2, 'x')} "
            f"[{_f(r['in_process_ci_low'], 2)}, {_f(r['in_process_ci_high'], 2)}] | {_f(r['isolated_median'], 2, 'x')} "
            f"[{_f(r['isolated_ci_low'], 2)}, {_f(r['isolated_ci_high'], 2)}] | {'yes' if r['agree'] else 'no'} |"
        )
    lines += [
        "",
        (
            "In-process speedups agree with isolated ones within their CIs at every setting measured."
            if agree
            else "In-process speedups do not agree with isolated ones at "
            + ", ".join(f"{r['arm']} {r['arm_setting']}" for r in table.to_dict("records") if not r["agree"])
            + ": their CIs do not overlap."
        ),
    ]
    above = [r for r in table.to_dict("records") if max(r["in_process_median"], r["isolated_median"]) > r["ideal"]]
    if above:
        lines += ["", f"{len(above)} of {len(table)} settings measure above their ideal bound N / computed: the "
                  "timings are dominated by other load on the machine, and agreement within such wide CIs says "
                  "little."]  # fmt: skip
    return lines


def section(runs: pd.DataFrame, provenance: dict) -> tuple[list[str], dict[str, bytes], dict]:
    """Markdown lines, files and a summary for a sweep with arms; nothing for one without."""
    if not has_arms(runs):
        return [], {}, {}
    arms = provenance.get("arms") or {}
    primary = primary_rescale(runs, provenance)
    pts = front.points(runs)
    files: dict[str, bytes] = {"baselines_points.csv": pts.to_csv(index=False).encode("utf-8")}
    comparisons = {speed: front.compare(runs, speed=speed) for speed, _ in SPEEDS}
    files["baselines_comparison.csv"] = pd.concat(comparisons.values(), ignore_index=True).to_csv(index=False).encode()
    lines = ["## Baselines: fewer steps, a static schedule, mflux's step cache", ""]
    settings = arms.get("settings") or {}
    if settings:
        lines.append("Arm settings (" + str(arms.get("settings_from", "unknown source")) + "): "
                     + "; ".join(f"{a} {', '.join(s) or 'none'}" for a, s in settings.items()) + ".")  # fmt: skip
    if "step-cache" in settings:
        lines.append(
            "mflux's StepCache runs natively only in "
            + ", ".join(arms.get("step_cache_native") or [])
            + "; here its class runs unchanged through the few loop lines those pipelines use "
            "(bench.sweep.baselines.apply_step_cache). It skips nothing in runs shorter than 10 steps."
        )
    lines += ["", f"Rescale function of the threshold tables above: {primary}.", ""]
    has_baselines = bool(settings) and (pts["arm"] != "teacache").any()
    summary: dict = {"primary_rescale": primary, "verdicts": {}}
    for speed, label in SPEEDS:
        name = "baselines_front_ideal.png" if speed.startswith("ideal") else "baselines_front.png"
        files[name] = plots.figure_png(front_plots.front_panels(pts, f"Every arm at {label}", speed=speed))
        lines += [f"### Every arm at {label}", "", f"![Every arm at {label}]({name})", ""]
        if speed == "speedup_median":
            above = pts[pts["speedup_median"] > pts["ideal_speedup_median"]]
            if len(above):
                what = f"{len(above)} of {len(pts)} arm settings measure a median speedup above their ideal bound"
                lines += [f"{what} N / computed: the timings here are dominated by other load on the machine.", ""]
        if not has_baselines:
            continue
        comparison = comparisons[speed]
        lines += _comparison_lines(comparison) + [""]
        mine = comparison[comparison["rescale"] == primary] if "rescale" in comparison.columns else comparison
        for baseline in settings:
            words = front.verdict(mine, baseline)
            summary["verdicts"].setdefault(speed, {})[baseline] = words
            lines += [f"- Against {front.ARM_LABELS.get(baseline, baseline)}: {words}"]
        lines.append("")
    lines += [
        "Best baseline: of that arm's settings at equal or greater speed, the one with the highest median SSIM. "
        "Difference: median over pairs of TeaCache's SSIM minus that setting's, 95% paired bootstrap CI; beats / "
        "loses when the CI excludes 0, tie when it holds 0. Measured speedups on a loaded, shared machine are "
        "noisy: equal work is the steadier comparison. Every point: [baselines_points.csv](baselines_points.csv); "
        "every comparison: [baselines_comparison.csv](baselines_comparison.csv).",
        "",
    ]
    tc = pts[pts["arm"] == "teacache"]
    if "rescale" in tc.columns and tc["rescale"].nunique() > 1:
        lines += ["### Rescale functions compared by their fronts", ""]
        ideal = pts.assign(speedup_median=pts["ideal_speedup_median"])
        for speed, label, frame in (("ideal_speedup_median", "equal work", ideal), ("speedup_median", "measured speed",
                                                                                     pts)):  # fmt: skip
            name = "rescale_fronts_ideal.png" if speed.startswith("ideal") else "rescale_fronts.png"
            files[name] = plots.figure_png(front_plots.rescale_fronts(frame))
            areas = front.rescale_areas(frame)
            words = front.rescale_verdict(areas, primary)
            summary.setdefault("rescale", {})[speed] = {"areas": areas.to_dict("records"), "verdict": words}
            lines += [f"At {label}:", "", "| rescale | settings | area | on joint front |", "|---|---:|---:|---:|"]
            lines += [f"| {r.rescale} | {r.settings} | {r.area:.4g} | {r.on_joint_front} |" for r in areas.itertuples()]
            lines += ["", words.replace("selected by cross-validation", "of --coefficients"), "",
                      f"![TeaCache fronts per rescale function at {label}]({name})", ""]  # fmt: skip
        lines += ["Area: what a rescale function's TeaCache points dominate above speed 1 and the lowest SSIM of "
                  "any of them (median SSIM; larger is better).", ""]  # fmt: skip
    iso = isolation(runs)
    lines += ["### In-process against isolated timing", ""] + _isolation_lines(iso, provenance) + [""]
    if not iso.empty:
        files["isolation.csv"] = iso.to_csv(index=False).encode("utf-8")
        summary["isolation_agree"] = bool(iso["agree"].all())
    return lines, files, summary
