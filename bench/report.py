"""``teacache-bench report RUNS --out DIR``: distribution tables, speed/quality plots and report.md.

A report is derived: a pure function of the sweep folder (runs.parquet, decisions.parquet,
provenance.json), so DIR can be deleted and rebuilt at any time. Every output is built in memory first
and written atomically only once all of it succeeded: bad input leaves no file behind.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from bench import plots, records, stats
from teacache.io import FORMAT_VERSION, atomic_path, write_text

RUN_COLUMNS: tuple[str, ...] = records.RUNS.names
DECISION_COLUMNS: tuple[str, ...] = records.DECISIONS.required
KINDS = records.KINDS
DEFAULT_FLOOR = 0.95
DEFAULT_METRIC = "ssim"
# Every file a report can write; a rebuild removes those it no longer produces and never touches others.
OUTPUTS = frozenset(
    {
        "report.md",
        "summary.json",
        "distribution.csv",
        "predicted_vs_actual.csv",
        "speedup_vs_ssim.png",
        "speedup_vs_cosine.png",
        "skips_vs_threshold.png",
        "x_traces.png",
        "skip_heatmap.png",
    }
)


class ReportInputError(ValueError):
    """The sweep folder cannot be reported on; the message says what is wrong and what to do."""


@dataclass(frozen=True)
class Sweep:
    """The raw records of one sweep folder, validated."""

    runs: pd.DataFrame
    decisions: pd.DataFrame | None
    provenance: dict
    runs_sha256: str


# ---------------------------------------------------------------------------------------------- input


def validate_runs(runs: pd.DataFrame) -> None:
    """Refuse a runs table this tool cannot read, with one message naming the first problem found."""
    try:
        records.validate_runs(runs)
    except records.RecordError as exc:
        raise ReportInputError(str(exc)) from None


def load_sweep(runs_dir: str | Path) -> Sweep:
    """Read and validate a sweep folder (bench.records); raises ReportInputError with one clear message."""
    try:
        found = records.read_sweep(runs_dir)
    except records.RecordError as exc:
        raise ReportInputError(str(exc)) from None
    return Sweep(found.runs, found.decisions, found.provenance, found.runs_sha256)


# ------------------------------------------------------------------------------------------- helpers


def _fmt(value, digits: int = 3, kind: str = "g") -> str:
    """A number for a table: ``digits`` significant (``g``) or decimals (``f``); NaN/None -> n/a."""
    if value is None:
        return "n/a"
    value = float(value)
    if math.isnan(value):
        return "n/a"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    if kind == "g" and abs(value) >= 1e4:
        return f"{value:.3e}"
    return f"{value:.{digits}{kind}}"


def _x(value) -> str:
    """A speedup ratio: two decimals and an x."""
    text = _fmt(value, 2, "f")
    return text if text == "n/a" else f"{text}x"


def _clean(value):
    """JSON-safe scalar: NaN and inf become None (strict JSON has neither)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def rescale_floor(provenance: dict) -> float | None:
    """The rescale floor of the sweep: recorded by the sweep, or recomputed for a plain polynomial."""
    floor = provenance.get("rescale_floor")
    if floor is not None:
        return float(floor)
    data = provenance.get("rescale")
    if isinstance(data, dict):
        from teacache.rescale import RescaleFunction

        try:
            fn = RescaleFunction.from_dict(data)
        except (ValueError, TypeError):
            return None
        if not fn.is_time_aware:
            return fn.floor()[0]
    return None


def _trace_threshold(ts: list[float], recommended: float | None, default: float | None) -> float:
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


# ------------------------------------------------------------------------------------------- render


def _markdown(
    sweep: Sweep,
    table: pd.DataFrame,
    rec: stats.Recommendation,
    adherence: dict | None,
    default_threshold: float | None,
    dist: pd.DataFrame,
    pva: pd.DataFrame,
    images: dict[str, str],
    omitted: list[str],
    floor_value: float | None,
) -> str:
    prov = sweep.provenance
    runs = sweep.runs
    variant = prov.get("variant") or runs["variant"].iloc[0]
    model = prov.get("model") or runs["model"].iloc[0]
    hardware = f"{prov.get('device_name', 'unknown device')} ({prov.get('backend', 'unknown backend')})"
    versions = prov.get("versions") or {}
    git = prov.get("git") or {}
    ssim_info = prov.get("ssim") or {}
    prompts = prov.get("prompts") or sorted(runs["prompt_id"].unique())
    seeds = prov.get("seeds") or sorted(runs["seed"].unique())
    rescale = prov.get("rescale") or {}
    pairs = runs.loc[runs["kind"] == "vanilla", "pair_id"].nunique()

    lines = [
        f"# TeaCache sweep: {variant} ({model})",
        "",
        f"Hardware: {hardware}, {prov.get('os', 'unknown OS')}. Sweep date: {prov.get('date_utc', 'unknown')}.",
        "",
        "## Provenance",
        "",
        f"- Versions: mlx {versions.get('mlx')}, mflux {versions.get('mflux')}, "
        f"numpy {versions.get('numpy')}, python {versions.get('python')}",
        f"- Git: {git.get('commit')}{' (dirty work tree)' if git.get('dirty') else ''}",
        f"- Command: `{prov.get('command', 'unknown')}`",
        f"- Device: {prov.get('device_name')}, backend {prov.get('backend')}",
        f"- Runs: {len(prompts)} prompts x {len(seeds)} seeds = {pairs} vanilla pairs; "
        f"steps {prov.get('steps')}; repeats {prov.get('repeats')}; "
        f"thresholds {', '.join(_fmt(t) for t in table.index)}",
        f"- max_rel = |a-b| / (|b| + eps) with eps = {prov.get('max_rel_eps')}",
        f"- SSIM: data_range {ssim_info.get('data_range')}, channel_axis {ssim_info.get('channel_axis')}"
        + (f"; {ssim_info['note']}" if ssim_info.get("note") else ""),
        f"- Rescale: form {rescale.get('form', 'poly')}, coefficients {rescale.get('coefficients')} "
        f"(highest power first), x range {rescale.get('x_range')}; floor {_fmt(floor_value, 4)}",
        f"- Default threshold of the variant: {_fmt(default_threshold)}",
        "",
        "## Recommendation",
        "",
    ]
    if rec.threshold is None:
        lines.append(f"**Recommended threshold: none.** {rec.reason[0].upper()}{rec.reason[1:]}.")
    else:
        speed = table.loc[rec.threshold]
        lines.append(
            f"**Recommended threshold: {rec.threshold:g}**: the highest threshold whose p5 {rec.metric} "
            f"({_fmt(rec.p5, 4, 'f')}) stays at or above the floor {rec.floor:g}. "
            f"Median speedup {_x(speed['speedup'])} [95% CI {_fmt(speed['ci_low'], 2, 'f')}, "
            f"{_fmt(speed['ci_high'], 2, 'f')}], ideal {_x(speed['ideal'])}, "
            f"median skipped {_fmt(speed['skipped'])} of {prov.get('steps')} steps."
        )
        if rec.failing_below:
            lines.append(
                f"Lower thresholds {', '.join(f'{t:g}' for t in rec.failing_below)} miss the floor: "
                "the low tail is noisy, look at the distribution before relying on it."
            )
    if default_threshold is not None and default_threshold in table.index:
        p5 = stats.stat(dist, rec.metric, "p5").get(default_threshold, math.nan)
        lines += [
            "",
            f"The variant's default threshold {default_threshold:g} measures p5 {rec.metric} {_fmt(p5, 4)} "
            f"and median speedup {_x(table.loc[default_threshold, 'speedup'])}.",
        ]
    if adherence is not None:
        line = (
            "Prompt adherence (mean fraction of attributes followed): "
            f"vanilla {_fmt(adherence['vanilla_mean'])} (n={adherence['vanilla_n']})"
        )
        if "teacache_mean" in adherence:
            line += (
                f", threshold {adherence['threshold']:g}: {_fmt(adherence['teacache_mean'])} "
                f"(n={adherence['teacache_n']})"
            )
        lines += ["", line + "."]

    lines += [
        "",
        "## Per threshold (medians over prompts x seeds)",
        "",
        "| threshold | n | skipped | speedup [95% CI] | ideal | SSIM p5 / median | PSNR | cosine p5 | adherence |",
        "|---:|---:|---:|---|---:|---|---:|---:|---:|",
    ]
    for t, r in table.iterrows():
        mark = " **(rec.)**" if rec.threshold is not None and t == rec.threshold else ""
        lines.append(
            f"| {t:g}{mark} | {int(r['n'])} | {_fmt(r['skipped'])} | {_x(r['speedup'])} "
            f"[{_fmt(r['ci_low'], 2, 'f')}, {_fmt(r['ci_high'], 2, 'f')}] | {_x(r['ideal'])} | "
            f"{_fmt(r['ssim_p5'], 4, 'f')} / {_fmt(r['ssim'], 4, 'f')} | {_fmt(r['psnr'], 1, 'f')} | "
            f"{_fmt(r['cosine_p5'], 6, 'f')} | {_fmt(r['adherence'], 3, 'f')} |"
        )
    if (table["n"] < 2).any():
        lines += ["", "A threshold with n = 1 has no spread: its bootstrap interval collapses to the one value."]
    lines += [
        "",
        "Speedup: paired vanilla wall time / TeaCache wall time (median over repeats); "
        "ideal: N / (N - skipped). "
        "The full distribution of every metric (n, min, p5, median, mean, p95, max) is in "
        "[distribution.csv](distribution.csv).",
        "",
        "## Plots",
        "",
    ]
    for name, caption in images.items():
        lines += [f"### {caption}", "", f"![{caption}]({name})", ""]
    for note in omitted:
        lines += [f"- {note}"]
    if omitted:
        lines.append("")
    if not pva.empty:
        lines += [
            "## Predicted vs actual skips (gate replay of recorded traces)",
            "",
            "| threshold | n | predicted (median) | actual (median) | mean abs diff | exact match |",
            "|---:|---:|---:|---:|---:|---:|",
        ]
        for r in pva.itertuples():
            lines.append(
                f"| {r.threshold:g} | {r.n} | {_fmt(r.predicted_median)} | {_fmt(r.actual_median)} | "
                f"{_fmt(r.mean_abs_diff)} | {r.exact:.0%} |"
            )
        lines.append("")
    lines += [
        "---",
        "",
        f"Derived by `teacache-bench report` from runs.parquet (sha256 {sweep.runs_sha256}); "
        "delete this folder and rebuild it from the sweep at any time.",
        "",
    ]
    return "\n".join(lines)


def render(sweep: Sweep, floor: float = DEFAULT_FLOOR, metric: str = DEFAULT_METRIC) -> tuple[dict[str, bytes], dict]:
    """Every output file (name -> bytes) and the summary, computed in memory without writing anything."""
    if metric not in stats.QUALITY_METRICS:
        raise ReportInputError(f"--metric {metric!r}: expected one of {', '.join(stats.QUALITY_METRICS)}")
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
    adherence = stats.adherence(runs, rec.threshold)
    pva = stats.predicted_vs_actual(runs)
    prov = sweep.provenance
    default_threshold = prov.get("default_threshold")
    default_threshold = float(default_threshold) if default_threshold is not None else None
    floor_value = rescale_floor(prov)
    ts = list(table.index)

    files: dict[str, bytes] = {}
    images: dict[str, str] = {}
    omitted: list[str] = []
    for quality in ("ssim", "cosine"):
        name = f"speedup_vs_{quality}.png"
        if stats.stat(dist, quality, "n").sum() > 0:
            files[name] = plots.figure_png(plots.speedup_quality(dist, quality))
            images[name] = f"Speedup vs {quality.upper() if quality == 'ssim' else quality}"
        else:
            omitted.append(f"{name} omitted: no {quality} values in the sweep")
    files["skips_vs_threshold.png"] = plots.figure_png(plots.skips_vs_threshold(dist, floor_value))
    images["skips_vs_threshold.png"] = "Skipped steps vs threshold"
    trace_t = _trace_threshold(ts, rec.threshold, default_threshold)
    if sweep.decisions is not None and not sweep.decisions.empty:
        files["x_traces.png"] = plots.figure_png(plots.x_traces(sweep.decisions, runs, trace_t))
        images["x_traces.png"] = f"Gate signal x per step at threshold {trace_t:g}"
    else:
        omitted.append("x_traces.png omitted: the sweep folder has no decisions.parquet (or it is empty)")
    files["skip_heatmap.png"] = plots.figure_png(plots.skip_heatmap(stats.skip_pattern(runs)))
    images["skip_heatmap.png"] = "Skip pattern (fraction of runs skipping each step)"

    files["distribution.csv"] = dist.to_csv(index=False).encode("utf-8")
    if not pva.empty:
        files["predicted_vs_actual.csv"] = pva.to_csv(index=False).encode("utf-8")
    markdown = _markdown(sweep, table, rec, adherence, default_threshold, dist, pva, images, omitted, floor_value)
    files["report.md"] = markdown.encode("utf-8")

    summary = {
        "format_version": FORMAT_VERSION,
        "variant": prov.get("variant") or str(runs["variant"].iloc[0]),
        "model": prov.get("model") or str(runs["model"].iloc[0]),
        "device_name": prov.get("device_name"),
        "sweep_date_utc": prov.get("date_utc"),
        "runs_sha256": sweep.runs_sha256,
        "metric": metric,
        "floor": floor,
        "recommended_threshold": rec.threshold,
        "recommended_p5": _clean(rec.p5),
        "reason": rec.reason,
        "default_threshold": default_threshold,
        "rescale_floor": floor_value,
        "adherence": {k: _clean(v) for k, v in adherence.items()} if adherence else None,
        "thresholds": [
            {"threshold": float(t), **{k: int(v) if k == "n" else _clean(float(v)) for k, v in row.items()}}
            for t, row in table.iterrows()
        ],
    }
    summary["files"] = sorted([*files, "summary.json"])
    assert set(summary["files"]) <= OUTPUTS, "add new report files to OUTPUTS"
    files["summary.json"] = (json.dumps(summary, indent=2, sort_keys=True) + "\n").encode("utf-8")
    return files, summary


def build_report(
    runs_dir: str | Path, out_dir: str | Path, ssim_floor: float = DEFAULT_FLOOR, metric: str = DEFAULT_METRIC
) -> dict:
    """Read a sweep folder, write the report into ``out_dir`` and return its summary.

    ``ssim_floor`` is the floor for ``metric`` (SSIM by default). Raises ReportInputError on bad input,
    before anything is written.
    """
    sweep = load_sweep(runs_dir)
    files, summary = render(sweep, ssim_floor, metric)
    out_dir = Path(out_dir)
    for name, data in files.items():
        if name == "report.md":
            continue
        with atomic_path(out_dir / name) as tmp:
            tmp.write_bytes(data)
    write_text(out_dir / "report.md", files["report.md"].decode("utf-8"))  # last: its links then resolve
    for name in OUTPUTS - set(files):  # a rebuild that omits a plot must not leave the old one behind
        (out_dir / name).unlink(missing_ok=True)
    return {**summary, "out_dir": str(out_dir), "report": str(out_dir / "report.md")}


# ---------------------------------------------------------------------------------------------- CLI


def print_summary(summary: dict, console=None) -> None:
    """One screen: the per-threshold medians, the recommendation and where report.md is."""
    from rich.console import Console
    from rich.table import Table

    console = console or Console()
    table = Table(title=f"TeaCache sweep: {summary['variant']} ({summary['model']}) on {summary['device_name']}")
    for name in ("threshold", "n", "skipped", "speedup [95% CI]", "ideal", "SSIM p5", "cosine p5"):
        table.add_column(name, justify="right")
    rec = summary["recommended_threshold"]
    for row in summary["thresholds"]:
        style = "bold green" if rec is not None and row["threshold"] == rec else None
        table.add_row(
            f"{row['threshold']:g}",
            str(row["n"]),
            _fmt(row["skipped"]),
            f"{_x(row['speedup'])} [{_fmt(row['ci_low'], 2, 'f')}, {_fmt(row['ci_high'], 2, 'f')}]",
            _x(row["ideal"]),
            _fmt(row["ssim_p5"], 4, "f"),
            _fmt(row["cosine_p5"], 6, "f"),
            style=style,
        )
    console.print(table)
    if rec is None:
        console.print(f"Recommended threshold: [bold red]none[/] ({summary['reason']})")
    else:
        console.print(f"Recommended threshold: [bold green]{rec:g}[/] ({summary['reason']})")
    console.print(f"Report: {summary['report']}")


def setup_arg_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="teacache-bench report",
        description="Distribution tables, speed/quality plots and report.md from a sweep folder.",
    )
    parser.add_argument(
        "runs", metavar="RUNS", help="sweep folder with runs.parquet, decisions.parquet, provenance.json"
    )
    parser.add_argument("--out", required=True, metavar="DIR", help="folder for report.md, distribution.csv and plots")
    parser.add_argument(
        "--ssim-floor",
        "--floor",
        dest="floor",
        type=float,
        default=DEFAULT_FLOOR,
        help=f"floor on p5 of the quality metric for the recommended threshold (default {DEFAULT_FLOOR})",
    )
    parser.add_argument(
        "--metric",
        choices=stats.QUALITY_METRICS,
        default=DEFAULT_METRIC,
        help=f"quality metric the floor applies to (default {DEFAULT_METRIC})",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    args = setup_arg_parser().parse_args(argv)
    try:
        summary = build_report(args.runs, args.out, ssim_floor=args.floor, metric=args.metric)
    except ReportInputError as exc:
        print(f"teacache-bench report: {exc}", file=sys.stderr)
        return 2
    print_summary(summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
