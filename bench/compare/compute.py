"""What compare-hardware says about two hardware, computed from their campaigns: one dict, compare.json's body.

For every variant both measured: the fits and how each scores on the other's traces, the skip schedules,
quality and speedups at the thresholds both swept, and the generated tolerance constants side by side.
Pure computation over what ``bench.compare.input`` reads; nothing here formats or writes.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from bench.compare.input import (
    PROJECT_ROOT,
    CompareError,
    find_campaigns,
    fit_summary,
    hardware_label,
    provenance_summary,
    tolerance_source,
)
from bench.report.input import ReportInputError, load_sweep
from bench.report.stats import distribution, parse_steps, quantile, recommend, teacache_runs, thresholds
from bench.tolerances.derive import load_module, prefix
from calib.fit.result import FitResult
from calib.fit.selection import compare
from calib.traces.errors import TraceError
from calib.traces.reader import load_traces
from teacache.io import FORMAT_VERSION, file_sha256

KIND = "teacache-bench compare-hardware"
QUALITY = ("ssim", "psnr", "cosine")
CROSS_MARGIN = 0.10  # a fit "transfers" when its RMSE on the other hardware's traces is within 10% of the refit


def _finite(value):
    """JSON-safe number: None for NaN, the string 'inf' for infinity."""
    if value is None:
        return None
    value = float(value)
    if math.isnan(value):
        return None
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return value


def cross_score(fit_path: Path, traces_path: Path, other_fit_path: Path) -> dict | None:
    """One hardware's selected rescale function scored on the other hardware's traces (the rows its fit used)."""
    if not (fit_path.is_file() and traces_path.is_file() and other_fit_path.is_file()):
        return None

    fit, other = FitResult.read(fit_path), FitResult.read(other_fit_path)
    options = other.options or {}
    try:
        traces = load_traces([traces_path], branch=options.get("branch"))
    except TraceError as exc:  # refused as every command that reads traces refuses it
        raise CompareError(f"{traces_path}: {exc}") from None
    frame = traces.frame
    min_step = int(options.get("min_step") or 1)
    frame = frame[frame["step"] >= min_step]
    result = compare(fit.rescale, str(fit_path), frame, other.selected, CROSS_MARGIN)
    excess = result.get("excess")
    return {
        "rmse": result["rmse"],
        "r2": result["r2"],
        "refit_cv_rmse": result["new_cv_rmse"],
        "excess": excess,
        "rows_outside_x_range": result["rows_outside_x_range"],
        "transfers": excess is not None and excess <= CROSS_MARGIN,
    }


def per_step_ms(runs: pd.DataFrame) -> float:
    """Median over pairs of the vanilla denoising loop time divided by its steps, in ms (timed after warm-up)."""
    vanilla = runs[runs["kind"] == "vanilla"]
    per_step = pd.to_numeric(vanilla["wall_s_median"], errors="coerce") / pd.to_numeric(vanilla["num_steps"])
    return 1000.0 * quantile(per_step.to_numpy(dtype=float), 0.5)


def _at(runs: pd.DataFrame, threshold: float) -> pd.DataFrame:
    tc = teacache_runs(runs)
    return tc[np.isclose(tc["threshold"].astype(float), threshold)]


def schedule_rows(runs_a: pd.DataFrame, runs_b: pd.DataFrame, common: list[float]) -> list[dict]:
    """Per common threshold: median skipped on each side and how many shared (prompt, seed) runs skip the same steps."""
    rows = []
    for t in common:
        a, b = _at(runs_a, t), _at(runs_b, t)
        steps_a = {(r.prompt_id, int(r.seed)): parse_steps(r.skipped_steps) for r in a.itertuples()}
        steps_b = {(r.prompt_id, int(r.seed)): parse_steps(r.skipped_steps) for r in b.itertuples()}
        shared = sorted(set(steps_a) & set(steps_b))
        same = sum(steps_a[k] == steps_b[k] for k in shared)
        rows.append({
            "threshold": t,
            "skipped_median_a": quantile(a["skipped"].to_numpy(dtype=float), 0.5),
            "skipped_median_b": quantile(b["skipped"].to_numpy(dtype=float), 0.5),
            "runs_compared": len(shared),
            "identical_schedules": same,
            "identical_fraction": same / len(shared) if shared else None,
        })  # fmt: skip
    return rows


def quality_rows(runs_a: pd.DataFrame, runs_b: pd.DataFrame, common: list[float]) -> list[dict]:
    rows = []
    for t in common:
        row: dict = {"threshold": t}
        for side, runs in (("a", runs_a), ("b", runs_b)):
            at = _at(runs, t)
            for metric in QUALITY:
                values = pd.to_numeric(at[metric], errors="coerce").to_numpy(dtype=float)
                row[f"{metric}_median_{side}"] = quantile(values, 0.5)
                row[f"{metric}_p5_{side}"] = quantile(values, 0.05)
        rows.append(row)
    return rows


def speedup_rows(runs: pd.DataFrame) -> list[dict]:
    """Per swept threshold: median speedup, median ideal bound N/(N-k), and the median of speedup/ideal per run."""
    rows = []
    for t in thresholds(runs):
        at = _at(runs, t)
        speed = pd.to_numeric(at["speedup"], errors="coerce").to_numpy(dtype=float)
        ideal = pd.to_numeric(at["ideal_speedup"], errors="coerce").to_numpy(dtype=float)
        rows.append({
            "threshold": t,
            "n": int(len(at)),
            "speedup_median": quantile(speed, 0.5),
            "speedup_p5": quantile(speed, 0.05),
            "speedup_p95": quantile(speed, 0.95),
            "ideal_median": quantile(ideal, 0.5),
            "ratio_median": quantile(speed / ideal, 0.5),
        })  # fmt: skip
    return rows


def recommended(runs: pd.DataFrame, floor: float) -> dict:
    rec = recommend(distribution(runs, ("ssim",)), "ssim", floor)
    out = {"threshold": rec.threshold, "reason": rec.reason, "floor": floor}
    if rec.threshold is not None:
        row = next(r for r in speedup_rows(runs) if np.isclose(r["threshold"], rec.threshold))
        out.update(speedup=row["speedup_median"], ideal=row["ideal_median"], ratio=row["ratio_median"])
    return out


def _constants(module, variant: str) -> dict:
    p = prefix(variant) + "_"
    out = {}
    for name in sorted(vars(module)):
        if not name.startswith(p) or not name.isupper() or name.endswith("_CASES"):
            continue  # the cases a module was measured on are compared as "sweep prompts x seeds"
        value = getattr(module, name)
        if isinstance(value, dict):
            for key in sorted(value):
                if key != "rescale":  # the fitted function: compared in its own table
                    out[f"{name}.{key}"] = value[key]
        else:
            out[name] = value
    return out


def _difference(a, b) -> tuple[bool, object, object]:
    """(same, difference b - a, relative difference) for two constants of one name."""
    if isinstance(a, bool) or isinstance(b, bool) or isinstance(a, str) or isinstance(b, str):
        return a == b, None, None
    numbers = (int, float)
    if (
        isinstance(a, tuple | list)
        and isinstance(b, tuple | list)
        and len(a) == len(b)
        and all(isinstance(v, numbers) and not isinstance(v, bool) for v in (*a, *b))
    ):
        diff = [float(y) - float(x) for x, y in zip(a, b, strict=True)]
        return all(d == 0 for d in diff), diff, None
    if isinstance(a, int | float) and isinstance(b, int | float):
        diff = float(b) - float(a)
        rel = diff / abs(float(a)) if a and math.isfinite(float(a)) else None
        return diff == 0, diff, rel
    return a == b, None, None


def tolerance_rows(path_a: Path | None, path_b: Path | None, variant: str) -> tuple[list[dict], dict]:
    sources = {"a": _shown(path_a), "b": _shown(path_b)}
    missing = [side.upper() for side, path in (("a", path_a), ("b", path_b)) if path is None]
    if missing:
        return [], sources, f"no generated tolerance module for {' and '.join(missing)}"
    try:
        const_a = _constants(load_module(path_a), variant)
        const_b = _constants(load_module(path_b), variant)
    except Exception as exc:  # noqa: BLE001 - a broken generated module is one input error
        raise CompareError(f"cannot import a tolerance module ({path_a}, {path_b}): {exc}") from None
    empty = [side.upper() for side, const in (("a", const_a), ("b", const_b)) if not const]
    if empty:
        return [], sources, f"the tolerance module of {' and '.join(empty)} has no {variant} constants"
    rows = []
    for name in sorted(set(const_a) | set(const_b)):
        if name not in const_a or name not in const_b:
            where = "only in A" if name in const_a else "only in B"
            rows.append({"constant": name, "a": const_a.get(name), "b": const_b.get(name), "same": False,
                         "difference": None, "relative": None, "note": where})  # fmt: skip
            continue
        same, diff, rel = _difference(const_a[name], const_b[name])
        rows.append({"constant": name, "a": const_a[name], "b": const_b[name], "same": same,
                     "difference": diff, "relative": rel, "note": ""})  # fmt: skip
    return rows, sources, ""


def _shown(path: Path | None) -> str | None:
    """A path as the report shows it: relative to the project when inside it."""
    if path is None:
        return None
    try:
        return str(Path(path).resolve().relative_to(PROJECT_ROOT))
    except ValueError:
        return str(path)


# the files of a campaign a comparison reads, besides the tolerance module
INPUTS = (
    "sweep/runs.parquet",
    "sweep/provenance.json",
    "fit/fit.json",
    "traces/traces.parquet",
    "traces/provenance.json",
)


def input_hashes(campaign: Path, tolerances: Path | None) -> dict[str, str]:
    """sha256 of every file a variant's comparison reads: a rebuild from the same hashes gives the same compare.md."""
    paths = [campaign / name for name in INPUTS] + ([tolerances] if tolerances else [])
    return {_shown(p): file_sha256(p) for p in paths if p.is_file()}


def compare_variant(variant: str, camp_a: Path, camp_b: Path, label_a: str, label_b: str, floor: float) -> dict:
    out: dict = {
        "variant": variant,
        "provenance": {"a": provenance_summary(camp_a), "b": provenance_summary(camp_b)},
        "fit": {"a": fit_summary(camp_a), "b": fit_summary(camp_b)},
    }
    fit_a, fit_b = camp_a / "fit" / "fit.json", camp_b / "fit" / "fit.json"
    traces_a, traces_b = camp_a / "traces" / "traces.parquet", camp_b / "traces" / "traces.parquet"
    try:
        out["fit"]["a_on_b_traces"] = cross_score(fit_a, traces_b, fit_b)
        out["fit"]["b_on_a_traces"] = cross_score(fit_b, traces_a, fit_a)
    except CompareError:
        raise
    except Exception as exc:  # noqa: BLE001 - traces of another layout: leave the cross score out, say why
        out["fit"]["cross_score_error"] = str(exc)
    sweeps = {}
    for side, camp in (("a", camp_a), ("b", camp_b)):
        if (camp / "sweep" / "runs.parquet").is_file():
            try:
                sweeps[side] = load_sweep(camp / "sweep").runs
            except ReportInputError as exc:
                raise CompareError(f"{camp / 'sweep'}: {exc}") from None
    if len(sweeps) == 2:
        runs_a, runs_b = sweeps["a"], sweeps["b"]
        ta, tb = thresholds(runs_a), thresholds(runs_b)
        common = [t for t in ta if any(np.isclose(t, u) for u in tb)]
        out["thresholds"] = {"a": ta, "b": tb, "common": common}
        out["schedules"] = schedule_rows(runs_a, runs_b, common)
        out["quality"] = quality_rows(runs_a, runs_b, common)
        out["speedups"] = {"a": speedup_rows(runs_a), "b": speedup_rows(runs_b)}
        out["speed"] = {
            "per_step_ms_a": per_step_ms(runs_a),
            "per_step_ms_b": per_step_ms(runs_b),
            "recommended_a": recommended(runs_a, floor),
            "recommended_b": recommended(runs_b, floor),
        }
    tol_a, tol_b = tolerance_source(camp_a, label_a), tolerance_source(camp_b, label_b)
    rows, sources, note = tolerance_rows(tol_a, tol_b, variant)
    out["tolerances"] = {"sources": sources, "constants": rows, "not_compared": note}
    out["inputs"] = {"a": input_hashes(camp_a, tol_a), "b": input_hashes(camp_b, tol_b)}
    return out


def build(path_a: Path, path_b: Path, floor: float = 0.95) -> dict:
    """Everything compare.json holds; raises CompareError with one message on bad input."""
    camps_a, camps_b = find_campaigns(path_a), find_campaigns(path_b)
    for path, camps in ((path_a, camps_a), (path_b, camps_b)):
        if not camps:
            raise CompareError(
                f"{path} holds no campaign (a folder with fit/fit.json or sweep/runs.parquet, as "
                "teacache-bench campaign writes: results/<hardware>/<variant>/<mflux-version>/)"
            )
    common = sorted(set(camps_a) & set(camps_b))
    if not common:
        raise CompareError(
            f"no variant in both: {path_a} has {', '.join(sorted(camps_a))}; {path_b} has {', '.join(sorted(camps_b))}"
        )
    label_a, label_b = hardware_label(path_a, camps_a), hardware_label(path_b, camps_b)
    return {
        "format_version": FORMAT_VERSION,
        "kind": KIND,
        "a": {"label": label_a, "path": str(path_a), "campaigns": {v: str(p) for v, p in camps_a.items()}},
        "b": {"label": label_b, "path": str(path_b), "campaigns": {v: str(p) for v, p in camps_b.items()}},
        "ssim_floor": floor,
        "only_in_a": sorted(set(camps_a) - set(camps_b)),
        "only_in_b": sorted(set(camps_b) - set(camps_a)),
        "variants": {v: compare_variant(v, camps_a[v], camps_b[v], label_a, label_b, floor) for v in common},
    }


def jsonable(value):
    """compare.json's form of the result: string keys, NaN as null, infinity as 'inf', numpy scalars as Python's."""
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    if isinstance(value, float | np.floating):
        return _finite(value)
    if isinstance(value, np.integer):
        return int(value)
    return value
