"""A report's files, drawn and formatted in memory: the plots, the CSV tables, report.md and summary.json.

report.md is ``bench/report/templates/report.md.j2`` filled from an Analysis; nothing here writes to disk.
"""

from __future__ import annotations

import json

from bench.report import baselines as report_baselines
from bench.report import grid, markdown, plots, stats
from bench.report.compute import Analysis, measured_by, summary
from bench.report.files import OUTPUTS
from teacache.provenance import describe_git

# OUTPUTS (bench.report.files): every file a report can write; a rebuild removes those it no longer produces.


def draw_plots(analysis: Analysis) -> tuple[dict[str, bytes], dict[str, str], list[str]]:
    """PNG bytes per file name, the caption of each, and a note for each plot left out (and why)."""
    dist, runs, decisions = analysis.dist, analysis.sweep.runs, analysis.sweep.decisions
    files: dict[str, bytes] = {}
    captions: dict[str, str] = {}
    omitted: list[str] = []
    for quality in ("ssim", "cosine"):
        name = f"speedup_vs_{quality}.png"
        if stats.stat(dist, quality, "n").sum() > 0:
            files[name] = plots.figure_png(plots.speedup_quality(dist, quality))
            captions[name] = f"Speedup vs {quality.upper() if quality == 'ssim' else quality}"
        else:
            omitted.append(f"{name} omitted: no {quality} values in the sweep")
    files["skips_vs_threshold.png"] = plots.figure_png(plots.skips_vs_threshold(dist, analysis.rescale_floor))
    captions["skips_vs_threshold.png"] = "Skipped steps vs threshold"
    if decisions is not None and not decisions.empty:
        files["x_traces.png"] = plots.figure_png(plots.x_traces(decisions, runs, analysis.trace_threshold))
        captions["x_traces.png"] = f"Gate signal x per step at threshold {analysis.trace_threshold:g}"
    else:
        omitted.append("x_traces.png omitted: the sweep folder has no decisions.parquet (or it is empty)")
    files["skip_heatmap.png"] = plots.figure_png(plots.skip_heatmap(stats.skip_pattern(runs)))
    captions["skip_heatmap.png"] = "Skip pattern (fraction of runs skipping each step)"
    draw_grids(analysis, files, captions, omitted)
    return files, captions, omitted


GRID_CAPTIONS = {
    "image_grid.png": "Images: vanilla and each threshold (SSIM against vanilla and skipped steps under each)",
    "difference_grid.png": "Differences against vanilla (per pixel, one colour scale)",
}


def draw_grids(analysis: Analysis, files: dict, captions: dict, omitted: list[str]) -> None:
    """The image and difference grids, when the sweep saved its images (a sweep without images/ gets neither)."""
    folder = analysis.sweep.folder
    if folder is None or not (folder / "images").is_dir():
        return
    runs, prov = analysis.sweep.runs, analysis.sweep.provenance
    variant = prov.get("variant") or runs["variant"].iloc[0]
    steps = prov.get("steps")
    shown = len(grid.grid_pairs(runs))
    title = f"{variant}, {steps} steps: the first {shown} prompt{'s' if shown > 1 else ''} of the sweep"
    figures = {
        "image_grid.png": grid.image_grid(runs, folder, title),
        "difference_grid.png": grid.difference_grid(runs, folder, title),
    }
    for name, fig in figures.items():
        if fig is None:
            omitted.append(f"{name} omitted: images/ lacks an image of the pairs it shows (sweep --save-images)")
            continue
        files[name] = plots.figure_png(fig)
        captions[name] = GRID_CAPTIONS[name]


def report_markdown(analysis: Analysis, captions: dict[str, str], omitted: list[str], baselines: str = "") -> str:
    """report.md: provenance, the recommendation, the per-threshold table, the plots and the replay check."""
    prov, runs = analysis.sweep.provenance, analysis.sweep.runs
    table, default = analysis.table, analysis.default_threshold
    return markdown.render(
        "report.md.j2",
        a=analysis,
        prov=prov,
        variant=prov.get("variant") or runs["variant"].iloc[0],
        model=prov.get("model") or runs["model"].iloc[0],
        versions=prov.get("versions") or {},
        git=prov.get("git") or {},
        git_state=describe_git(prov.get("git")),
        ssim=prov.get("ssim") or {},
        rescale=prov.get("rescale") or {},
        prompts=prov.get("prompts") or sorted(runs["prompt_id"].unique()),
        seeds=prov.get("seeds") or sorted(runs["seed"].unique()),
        thresholds=list(table.index),
        pairs=runs.loc[runs["kind"] == "vanilla", "pair_id"].nunique(),
        speed=table.loc[analysis.rec.threshold] if analysis.rec.threshold is not None else None,
        default_speedup=table.loc[default, "speedup"] if default is not None and default in table.index else None,
        single_run=bool((table["n"] < 2).any()),
        captions=captions,
        omitted=omitted,
        baselines=baselines,
        measured_by=measured_by(runs),
    )


def render_files(analysis: Analysis, baselines: tuple = ([], {}, {})) -> tuple[dict[str, bytes], dict]:
    """Every output file (name -> bytes) and the summary, without writing anything.

    ``baselines``: :func:`bench.report.baselines.section`'s lines, files and summary (empty for a sweep without arms).
    """
    files, captions, omitted = draw_plots(analysis)
    lines, extra_files, extra_summary = baselines
    files.update(extra_files)
    files["distribution.csv"] = analysis.dist.to_csv(index=False).encode("utf-8")
    if not analysis.pva.empty:
        files["predicted_vs_actual.csv"] = analysis.pva.to_csv(index=False).encode("utf-8")
    files["report.md"] = report_markdown(analysis, captions, omitted, "\n".join(lines)).encode("utf-8")
    data = summary(analysis)
    if extra_summary:
        data["baselines"] = report_baselines.json_ready(extra_summary)
    data["files"] = sorted([*files, "summary.json"])
    assert set(data["files"]) <= OUTPUTS, "add new report files to OUTPUTS"
    files["summary.json"] = (json.dumps(data, indent=2, sort_keys=True) + "\n").encode("utf-8")
    return files, data
