"""``teacache-bench compare-hardware``: two hardware's campaigns side by side.

A and B are hardware folders (``results/<hardware>/``, holding ``<variant>/<mflux-version>/``
campaigns), variant folders or campaign folders (``teacache-bench campaign`` output: ``fit/``,
``sweep/``, ``tolerances.py``). For every variant present in both it compares the fitted rescale
functions and their cross-validated R^2 (and how each fit scores on the other hardware's traces),
the skip schedules at the thresholds both swept, the quality distributions, the per-step time and the
speedups against the ideal bound N/(N-k), and the generated tolerance constants: which differ and by
how much. Writes ``compare.md``, ``compare.json`` and ``speedup_vs_threshold.png`` into ``--out``
(default ``results/comparisons/<A>-vs-<B>/``), each atomically and only when every input reads.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from bench.report import ReportInputError, load_sweep
from bench.stats import distribution, parse_steps, quantile, recommend, teacache_runs, thresholds
from teacache.io import FORMAT_VERSION, write_json, write_text

PROJECT_ROOT = Path(__file__).resolve().parent.parent
KIND = "teacache-bench compare-hardware"
PLOT = "speedup_vs_threshold.png"
QUALITY = ("ssim", "psnr", "cosine")
STAGES = ("traces", "fit", "sweep", "report", "tolerances.py", "gapcheck")
CROSS_MARGIN = 0.10  # a fit "transfers" when its RMSE on the other hardware's traces is within 10% of the refit


class CompareError(ValueError):
    """An input this command cannot compare; the message says which and why."""


# ---------------------------------------------------------------------------------------------- input


def _is_campaign(folder: Path) -> bool:
    return (folder / "sweep" / "runs.parquet").is_file() or (folder / "fit" / "fit.json").is_file()


def _version_key(name: str):
    try:
        from packaging.version import Version

        return (0, Version(name))
    except Exception:  # noqa: BLE001 - not a version string: sort it before every real version
        return (-1, name)


def _read_json(path: Path) -> dict:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise CompareError(f"cannot read {path}: {exc}") from None
    if not isinstance(data, dict):
        raise CompareError(f"{path}: expected a JSON object")
    return data


def _variant_of(campaign: Path) -> str:
    for path in (campaign / "sweep" / "provenance.json", campaign / "fit" / "fit.json"):
        if path.is_file():
            variant = _read_json(path).get("variant")
            if isinstance(variant, str) and variant:
                return variant
    return campaign.parent.name


def find_campaigns(root: Path) -> dict[str, Path]:
    """variant -> campaign folder under a hardware, variant or campaign folder (newest mflux version wins)."""
    root = Path(root)
    if not root.is_dir():
        raise CompareError(f"{root} is not a folder")
    if _is_campaign(root):
        return {_variant_of(root): root}
    found: dict[str, list[Path]] = {}
    for child in sorted(p for p in root.iterdir() if p.is_dir()):
        candidates = [child] if _is_campaign(child) else sorted(p for p in child.iterdir() if p.is_dir())
        for folder in candidates:
            if _is_campaign(folder):
                found.setdefault(_variant_of(folder), []).append(folder)
    return {v: max(paths, key=lambda p: _version_key(p.name)) for v, paths in sorted(found.items())}


def hardware_label(root: Path, campaigns: dict[str, Path]) -> str:
    """The hardware's folder name (results/<hardware>/<variant>/<version>), else one built from the provenance."""
    root = Path(root).resolve()
    found = [p.resolve() for p in campaigns.values()]
    if _is_campaign(root):
        if root.parent.name == _variant_of(root):
            return root.parent.parent.name
    elif all(len(p.relative_to(root).parts) == 2 for p in found):
        return root.name
    elif all(len(p.relative_to(root).parts) == 1 for p in found) and root.name in campaigns:
        return root.parent.name
    prov = _campaign_provenance(found[0])
    name = "".join(c if c.isalnum() else "-" for c in str(prov.get("device_name", "unknown")).lower())
    return f"{prov.get('backend', 'unknown')}-" + "-".join(p for p in name.split("-") if p)


def _campaign_provenance(campaign: Path) -> dict:
    for path in (campaign / "sweep" / "provenance.json", campaign / "traces" / "provenance.json"):
        if path.is_file():
            return _read_json(path)
    fit = campaign / "fit" / "fit.json"
    if fit.is_file():
        return _read_json(fit).get("provenance") or {}
    return {}


def tolerance_source(campaign: Path, label: str) -> Path | None:
    """The campaign's own tolerances.py, else the hardware's generated tests/tolerances/<hardware>.py."""
    own = campaign / "tolerances.py"
    if own.is_file():
        return own
    from teacache.provenance import tolerance_module_name

    generated = PROJECT_ROOT / "tests" / "tolerances" / f"{tolerance_module_name(label)}.py"
    return generated if generated.is_file() else None


# ---------------------------------------------------------------------------------------------- pieces


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


def _pairs_measured(campaign: Path, planned: int) -> str | None:
    """'n of planned' (prompt, seed) pairs in the sweep's runs table: an interrupted sweep shows here."""
    runs = campaign / "sweep" / "runs.parquet"
    if not runs.is_file():
        return None
    try:
        n = int(pd.read_parquet(runs, columns=["pair_id"])["pair_id"].nunique())
    except Exception:  # noqa: BLE001 - a damaged table is reported by load_sweep with its own message
        return None
    return f"{n} of {planned}" if planned else str(n)


def provenance_summary(campaign: Path) -> dict:
    prov = _campaign_provenance(campaign)
    versions = prov.get("versions") or {}
    traces_prov = campaign / "traces" / "provenance.json"
    overhead = None
    if traces_prov.is_file():
        overhead = (_read_json(traces_prov).get("recording_overhead") or {}).get("median")
    prompts = prov.get("prompts") or []
    seeds = prov.get("seeds") or []
    return {
        "path": str(campaign),
        "backend": prov.get("backend"),
        "device_name": prov.get("device_name"),
        "os": prov.get("os"),
        "mlx": versions.get("mlx"),
        "mflux": versions.get("mflux"),
        "python": versions.get("python"),
        "numpy": versions.get("numpy"),
        "date_utc": prov.get("date_utc"),
        "git_commit": (prov.get("git") or {}).get("commit"),
        "steps": prov.get("steps"),
        "resolution": prov.get("resolution"),
        "guidance": prov.get("guidance"),
        "sweep_prompts_x_seeds": f"{len(prompts)} x {len(seeds)}" if prompts else None,
        "sweep_pairs_measured": _pairs_measured(campaign, len(prompts) * len(seeds)),
        "stages": [name for name in STAGES if (campaign / name).exists()],
        "repeats": prov.get("repeats"),
        "default_threshold": prov.get("default_threshold"),
        "recording_overhead_median": overhead,
    }


def fit_summary(campaign: Path) -> dict | None:
    path = campaign / "fit" / "fit.json"
    if not path.is_file():
        return None
    fit = _read_json(path)
    sel = fit.get("selected")
    if not isinstance(sel, dict):
        raise CompareError(f"{path}: no 'selected' candidate (not a teacache-calib fit output)")
    return {
        "label": sel.get("label"),
        "form": sel.get("form"),
        "coefficients": list(sel.get("coefficients") or []),
        "time_coefficients": list(sel.get("time_coefficients") or []),
        "x_range": list(sel.get("x_range") or []),
        "r2": sel.get("r2"),
        "cv_r2": sel.get("cv_r2"),
        "cv_rmse": sel.get("rmse"),
        "n_pairs": sel.get("n_pairs"),
        "n_prompts": sel.get("n_prompts"),
        "candidates_cv_r2": {c["label"]: c.get("cv_r2") for c in fit.get("candidates") or [] if "label" in c},
        "options": fit.get("options") or {},
    }


def cross_score(fit_path: Path, traces_path: Path, other_fit_path: Path) -> dict | None:
    """One hardware's selected rescale function scored on the other hardware's traces (the rows its fit used)."""
    if not (fit_path.is_file() and traces_path.is_file() and other_fit_path.is_file()):
        return None
    from calib.fit import compare, read_fit, rescale_from_fit
    from calib.traces import TraceError, load_traces

    fit, other = read_fit(fit_path), read_fit(other_fit_path)
    options = other.get("options") or {}
    try:
        traces = load_traces([traces_path], branch=options.get("branch"))
    except TraceError as exc:  # refused as every command that reads traces refuses it
        raise CompareError(f"{traces_path}: {exc}") from None
    frame = traces.frame
    min_step = int(options.get("min_step") or 1)
    frame = frame[frame["step"] >= min_step]
    result = compare(rescale_from_fit(fit), str(fit_path), frame, other["selected"], CROSS_MARGIN)
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
    from bench.tolerances import prefix

    p = prefix(variant) + "_"
    out = {}
    for name in sorted(vars(module)):
        if not name.startswith(p) or not name.isupper():
            continue
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
    if isinstance(a, tuple | list) and isinstance(b, tuple | list) and len(a) == len(b):
        diff = [float(y) - float(x) for x, y in zip(a, b, strict=True)]
        return all(d == 0 for d in diff), diff, None
    if isinstance(a, int | float) and isinstance(b, int | float):
        diff = float(b) - float(a)
        rel = diff / abs(float(a)) if a and math.isfinite(float(a)) else None
        return diff == 0, diff, rel
    return a == b, None, None


def tolerance_rows(path_a: Path | None, path_b: Path | None, variant: str) -> tuple[list[dict], dict]:
    from bench.tolerances import load_module

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
    rows, sources, note = tolerance_rows(tolerance_source(camp_a, label_a), tolerance_source(camp_b, label_b), variant)
    out["tolerances"] = {"sources": sources, "constants": rows, "not_compared": note}
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


# ---------------------------------------------------------------------------------------------- output


def _f(value, digits: int = 4) -> str:
    if value is None or value == "":
        return "n/a"
    if isinstance(value, str):
        return value
    value = float(value)
    if math.isnan(value):
        return "n/a"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return f"{value:.{digits}g}"


def _pair(a, b, digits: int = 4) -> str:
    return f"{_f(a, digits)} / {_f(b, digits)}"


def _pct(value) -> str:
    return "n/a" if value is None else f"{100 * float(value):+.1f}%"


def _cell(value) -> str:
    return ", ".join(map(str, value)) if isinstance(value, list) else _value(value)


def _share(value) -> str:
    return "n/a" if value is None else f"{100 * float(value):.0f}%"


def _value(value) -> str:
    if isinstance(value, float):
        return _f(value, 6)
    if isinstance(value, tuple | list):
        return "(" + ", ".join(_value(v) for v in value) + ")"
    return "n/a" if value is None else str(value)


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    return lines + ["| " + " | ".join(str(c).replace("|", "\\|") for c in row) + " |" for row in rows]


PROVENANCE_FIELDS = (
    ("backend", "backend"),
    ("device_name", "device"),
    ("os", "OS"),
    ("mlx", "mlx"),
    ("mflux", "mflux"),
    ("python", "python"),
    ("numpy", "numpy"),
    ("date_utc", "sweep date (UTC)"),
    ("git_commit", "git commit"),
    ("steps", "steps"),
    ("resolution", "resolution"),
    ("guidance", "guidance"),
    ("sweep_prompts_x_seeds", "sweep prompts x seeds"),
    ("sweep_pairs_measured", "sweep pairs measured"),
    ("stages", "campaign stages present"),
    ("repeats", "timed repeats"),
    ("default_threshold", "variant default threshold"),
)


def render_markdown(result: dict) -> str:
    la, lb = result["a"]["label"], result["b"]["label"]
    lines = [
        f"# TeaCache on two hardware: {la} (A) vs {lb} (B)",
        "",
        f"A: `{result['a']['path']}`; B: `{result['b']['path']}`. Written by `teacache-bench compare-hardware`.",
        "Speedups are denoising-loop times after a warm-up, TeaCache against the paired vanilla run; the ideal",
        "bound is N/(N-k) for k skipped of N steps. The recommended threshold is the highest whose p5 SSIM stays",
        f"at or above {result['ssim_floor']:g}.",
        "",
    ]
    if result["only_in_a"] or result["only_in_b"]:
        only_a, only_b = ", ".join(result["only_in_a"]) or "none", ", ".join(result["only_in_b"]) or "none"
        lines += [f"Only in A: {only_a}; only in B: {only_b} (not compared).", ""]
    for variant, v in result["variants"].items():
        lines += _variant_markdown(variant, v, la, lb)
    return "\n".join(lines).rstrip() + "\n"


def _variant_markdown(variant: str, v: dict, la: str, lb: str) -> list[str]:
    pa, pb = v["provenance"]["a"], v["provenance"]["b"]
    lines = [f"## {variant}", "", "### Provenance", ""]
    rows = [[name, _cell(pa.get(key)), _cell(pb.get(key))] for key, name in PROVENANCE_FIELDS]
    rows.append(["campaign folder", f"`{pa['path']}`", f"`{pb['path']}`"])
    lines += _table(["", f"A: {la}", f"B: {lb}"], rows) + [""]

    if "speed" in v:
        s = v["speed"]
        ra, rb = s["recommended_a"], s["recommended_b"]
        ms_a, ms_b = s["per_step_ms_a"], s["per_step_ms_b"]
        lines += ["### Speed", ""]
        rows = [
            ["per-step time, vanilla loop (median over pairs, ms)", _f(ms_a), _f(ms_b),
             _f(ms_a / ms_b, 3) if ms_b else "n/a"],
            ["recording overhead (record stage, median)", _pct(pa.get("recording_overhead_median")),
             _pct(pb.get("recording_overhead_median")), ""],
            ["recommended threshold", _f(ra["threshold"]), _f(rb["threshold"]), ""],
            ["median speedup there", _f(ra.get("speedup"), 3), _f(rb.get("speedup"), 3), ""],
            ["median ideal bound there", _f(ra.get("ideal"), 3), _f(rb.get("ideal"), 3), ""],
            ["speedup / ideal (median per run)", _f(ra.get("ratio"), 3), _f(rb.get("ratio"), 3), ""],
        ]  # fmt: skip
        lines += _table(["", "A", "B", "A / B"], rows) + [""]

    fa, fb = v["fit"]["a"], v["fit"]["b"]
    if fa or fb:
        lines += ["### Fitted rescale function (teacache-calib fit, selected candidate)", ""]

        def g(fit, key, digits=4):
            return "n/a" if fit is None else _f(fit.get(key), digits)

        def coeffs(fit, key):
            return "n/a" if fit is None else "[" + ", ".join(f"{c:.6g}" for c in fit.get(key) or []) + "]"

        rows = [
            ["selected", fa["label"] if fa else "n/a", fb["label"] if fb else "n/a"],
            ["coefficients (highest power first)", coeffs(fa, "coefficients"), coeffs(fb, "coefficients")],
            ["time coefficients", coeffs(fa, "time_coefficients"), coeffs(fb, "time_coefficients")],
            ["x range", coeffs(fa, "x_range"), coeffs(fb, "x_range")],
            ["R^2", g(fa, "r2"), g(fb, "r2")],
            ["cv R^2 (prompts held out)", g(fa, "cv_r2"), g(fb, "cv_r2")],
            ["cv RMSE", g(fa, "cv_rmse"), g(fb, "cv_rmse")],
            ["pairs (prompts)", f"{g(fa, 'n_pairs')} ({g(fa, 'n_prompts')})",
             f"{g(fb, 'n_pairs')} ({g(fb, 'n_prompts')})"],
        ]  # fmt: skip
        if fa and fb:
            rows.append([
                f"cv R^2 of the other's selection ({fb['label']} on A, {fa['label']} on B)",
                _f(fa["candidates_cv_r2"].get(fb["label"])), _f(fb["candidates_cv_r2"].get(fa["label"])),
            ])  # fmt: skip
        for key, name, col in (
            ("b_on_a_traces", "B's fit on A's traces", 1),
            ("a_on_b_traces", "A's fit on B's traces", 2),
        ):
            cross = v["fit"].get(key)
            if cross:
                cell = (f"RMSE {_f(cross['rmse'])} vs refit cv {_f(cross['refit_cv_rmse'])} ({_pct(cross['excess'])}): "
                        + ("transfers" if cross["transfers"] else "refit needed"))  # fmt: skip
                row = [name, "", ""]
                row[col] = cell
                rows.append(row)
        lines += _table(["", "A", "B"], rows) + [""]

    if "schedules" in v:
        lines += ["### Skip schedules at the thresholds both swept", ""]
        rows = [
            [_f(r["threshold"]), _f(r["skipped_median_a"]), _f(r["skipped_median_b"]), str(r["runs_compared"]),
             f"{r['identical_schedules']} ({_share(r['identical_fraction'])})"]
            for r in v["schedules"]
        ]  # fmt: skip
        lines += _table(
            ["threshold", "median skipped A", "median skipped B", "(prompt, seed) runs in both",
             "identical skipped steps"],
            rows,
        ) + [""]  # fmt: skip
        lines += ["### Quality against vanilla (A / B)", ""]
        rows = [
            [_f(r["threshold"])] + [_pair(r[f"{m}_{s}_a"], r[f"{m}_{s}_b"], 5 if m != "psnr" else 4)
                                     for m in QUALITY for s in ("median", "p5")]
            for r in v["quality"]
        ]  # fmt: skip
        header = ["threshold"] + [
            f"{m.upper() if m != 'cosine' else 'cosine'} {s}" for m in QUALITY for s in ("median", "p5")
        ]
        lines += _table(header, rows) + [""]
        lines += ["### Speedup and the ideal bound", ""]
        by_t = {}
        for side in ("a", "b"):
            for r in v["speedups"][side]:
                by_t.setdefault(round(r["threshold"], 12), {})[side] = r
        rows = []
        for t in sorted(by_t):
            cells = [_f(t)]
            for side in ("a", "b"):
                r = by_t[t].get(side)
                cells += ["-", "-", "-"] if r is None else [
                    f"{_f(r['speedup_median'], 3)}x", f"{_f(r['ideal_median'], 3)}x", _f(r["ratio_median"], 3)
                ]  # fmt: skip
            rows.append(cells)
        lines += _table(
            ["threshold", "speedup A", "ideal A", "speedup/ideal A", "speedup B", "ideal B", "speedup/ideal B"], rows
        ) + [""]  # fmt: skip

    tol = v["tolerances"]
    lines += ["### Tolerance constants", ""]
    if not tol["constants"]:
        lines += [f"Not compared: {tol['not_compared'] or 'no constants on either side'}.", ""]
        lines += [f"A: `{tol['sources']['a']}`; B: `{tol['sources']['b']}`.", ""]
    else:
        lines += [f"A: `{tol['sources']['a']}`; B: `{tol['sources']['b']}`.", ""]
        rows = []
        for r in tol["constants"]:
            if r["note"]:
                verdict = r["note"]
            elif r["same"]:
                verdict = "same"
            elif r["relative"] is not None:
                verdict = f"differs ({r['relative'] * 100:+.3g}%)"
            else:
                verdict = "differs"
            rows.append([f"`{r['constant']}`", _value(r["a"]), _value(r["b"]), _value(r["difference"]), verdict])
        lines += _table(["constant", "A", "B", "B - A", ""], rows) + [""]
        n_diff = sum(not r["same"] for r in tol["constants"])
        lines += [f"{n_diff} of {len(tol['constants'])} constants differ.", ""]
    return lines


def render_plot(result: dict) -> bytes | None:
    variants = [(name, v) for name, v in result["variants"].items() if "speedups" in v]
    if not variants:
        return None
    from matplotlib.figure import Figure

    from bench.plots import figure_png

    fig = Figure(figsize=(5.0 * len(variants), 4.0), layout="constrained")
    axes = np.atleast_1d(fig.subplots(1, len(variants)))
    for ax, (name, v) in zip(axes, variants, strict=True):
        for side, color in (("a", "tab:blue"), ("b", "tab:orange")):
            rows = v["speedups"][side]
            t = [r["threshold"] for r in rows]
            med = np.array([r["speedup_median"] for r in rows])
            err = np.vstack([med - [r["speedup_p5"] for r in rows], [r["speedup_p95"] for r in rows] - med]).clip(0)
            label = result[side]["label"]
            ax.errorbar(t, med, yerr=err, marker="o", color=color, capsize=3, label=f"{label} (p5-p95)")
            ax.plot(t, [r["ideal_median"] for r in rows], ls="--", color=color, alpha=0.7, label=f"{label} ideal")
        ax.axhline(1.0, color="grey", lw=0.8)
        ax.set_xlabel("threshold")
        ax.set_ylabel("median speedup over vanilla")
        ax.set_title(name, fontsize=10)
        ax.legend(fontsize=7)
    return figure_png(fig)


def _jsonable(value):
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, float | np.floating):
        return _finite(value)
    if isinstance(value, np.integer):
        return int(value)
    return value


def default_out(result: dict) -> Path:
    return PROJECT_ROOT / "results" / "comparisons" / f"{result['a']['label']}-vs-{result['b']['label']}"


# ---------------------------------------------------------------------------------------------- CLI


def setup_arg_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=KIND, description=__doc__.split("\n\n")[0])
    parser.add_argument("a", type=Path, metavar="A", help="hardware folder (results/<hardware>) or campaign folder")
    parser.add_argument("b", type=Path, metavar="B", help="the other hardware or campaign folder")
    parser.add_argument("--out", type=Path, default=None, help="default: results/comparisons/<A>-vs-<B>/")
    parser.add_argument("--ssim-floor", type=float, default=0.95, help="floor for the recommended threshold")
    parser.add_argument("--no-plot", action="store_true")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = setup_arg_parser().parse_args(argv)
    try:
        result = build(args.a, args.b, args.ssim_floor)
    except (CompareError, ReportInputError) as exc:
        print(f"{KIND}: {exc}", file=sys.stderr)
        return 2
    out = args.out or default_out(result)
    if out.exists() and not out.is_dir():
        print(f"{KIND}: --out {out} exists and is not a folder", file=sys.stderr)
        return 2
    text = render_markdown(result)
    png = None if args.no_plot else render_plot(result)
    data = _jsonable(result)
    data["files"] = ["compare.md", "compare.json"] + ([PLOT] if png else [])
    from teacache.provenance import collect

    data["provenance"] = collect([KIND, *(argv if argv is not None else sys.argv[1:])])
    if png:
        from teacache.io import atomic_path

        with atomic_path(out / PLOT) as tmp:
            tmp.write_bytes(png)
    write_json(out / "compare.json", data)
    write_text(out / "compare.md", text)
    for variant, v in result["variants"].items():
        s = v.get("speed")
        if s:
            print(f"{variant}: {s['per_step_ms_a']:.3g} ms/step ({result['a']['label']}) vs "
                  f"{s['per_step_ms_b']:.3g} ms/step ({result['b']['label']})")  # fmt: skip
    print(f"wrote {out / 'compare.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
