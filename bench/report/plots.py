"""Speed/quality plots of a threshold sweep. Each function returns a matplotlib Figure and saves nothing.

Figures are built with ``matplotlib.figure.Figure`` (no pyplot state), so the report command and the
notebooks can draw them side by side without touching a global backend.
"""

from __future__ import annotations

import io
import math

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from bench.report import stats

MEASURED = "tab:blue"
IDEAL = "tab:gray"
FRONT = "tab:red"
FLOOR_LABEL = "below this nothing can skip"


def figure_png(fig: Figure, dpi: int = 120) -> bytes:
    """PNG bytes of a figure, without the version stamp so a rebuild gives the same file."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi, bbox_inches="tight", metadata={"Software": None})
    return buf.getvalue()


def _asym(median: pd.Series, low: pd.Series, high: pd.Series) -> np.ndarray:
    return np.vstack([(median - low).clip(lower=0).to_numpy(), (high - median).clip(lower=0).to_numpy()])


COINCIDE = 0.02  # points closer than this fraction of both axes' spans share one label


def label_groups(xs, ys, labels, coincide: float = COINCIDE) -> list[tuple[float, float, str]]:
    """(x, y, text) per group of points that would print their labels over each other: one label each,
    the group's labels joined ("0, 0.005, 0.01"), at the group's first point. NaN points get none."""
    points = [(float(x), float(y), str(t)) for x, y, t in zip(xs, ys, labels, strict=True)]
    points = [p for p in points if math.isfinite(p[0]) and math.isfinite(p[1])]
    if not points:
        return []
    span_x = (max(p[0] for p in points) - min(p[0] for p in points)) or 1.0
    span_y = (max(p[1] for p in points) - min(p[1] for p in points)) or 1.0
    groups: list[list[tuple[float, float, str]]] = []
    for p in points:
        for group in groups:
            x0, y0, _ = group[0]
            if abs(p[0] - x0) <= coincide * span_x and abs(p[1] - y0) <= coincide * span_y:
                group.append(p)
                break
        else:
            groups.append([p])
    return [(g[0][0], g[0][1], ", ".join(t for _, _, t in g)) for g in groups]


def speedup_quality(dist: pd.DataFrame, quality: str = "ssim") -> Figure:
    """Median speedup against median quality, one point per threshold, p5-p95 bars both ways.

    Hollow markers at the median ideal speedup (N / (N - skipped)) show how much of the bound the
    measured speedup reaches; the Pareto front (higher speed, higher quality) is joined and ringed.
    """
    speed = stats.stat(dist, "speedup")
    speed_lo, speed_hi = stats.stat(dist, "speedup", "p5"), stats.stat(dist, "speedup", "p95")
    ideal = stats.stat(dist, "ideal_speedup")
    qual = stats.stat(dist, quality)
    qual_lo, qual_hi = stats.stat(dist, quality, "p5"), stats.stat(dist, quality, "p95")

    fig = Figure(figsize=(7, 5))
    ax = fig.add_subplot()
    ax.errorbar(
        speed,
        qual,
        xerr=_asym(speed, speed_lo, speed_hi),
        yerr=_asym(qual, qual_lo, qual_hi),
        fmt="o",
        color=MEASURED,
        ecolor=MEASURED,
        elinewidth=1,
        capsize=3,
        label="measured (median, p5-p95)",
        zorder=3,
    )
    ax.scatter(ideal, qual, facecolors="none", edgecolors=IDEAL, s=50, label="ideal bound N/(N-k) (median)")
    for t in speed.index:
        if not (math.isnan(ideal[t]) or math.isnan(qual[t])):
            ax.plot([speed[t], ideal[t]], [qual[t], qual[t]], ":", color=IDEAL, linewidth=0.8)
    for x, y, text in label_groups(speed, qual, [f"{t:g}" for t in speed.index]):
        ax.annotate(text, (x, y), textcoords="offset points", xytext=(5, 5), fontsize=8)
    front = stats.pareto_front(speed.to_numpy(), qual.to_numpy())
    if front.any():
        order = np.argsort(speed.to_numpy()[front])
        fx, fy = speed.to_numpy()[front][order], qual.to_numpy()[front][order]
        ax.plot(fx, fy, "-", color=FRONT, linewidth=1, label="Pareto front")
        ax.scatter(fx, fy, facecolors="none", edgecolors=FRONT, s=140, linewidths=1.2, zorder=4)
    ax.set_xlabel("speedup vs paired vanilla (x)")
    ax.set_ylabel(quality)
    ax.ticklabel_format(axis="y", useOffset=False)  # cosine near 1: plain numbers, not 1e-5 + 0.99999
    ax.set_title(f"Speedup vs {quality} per threshold (labels: threshold)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="best")
    return fig


def skips_vs_threshold(dist: pd.DataFrame, rescale_floor: float | None = None) -> Figure:
    """Median skipped steps per threshold with the min-max band, and the rescale floor as a line.

    Each gated step adds at least the floor to the accumulator, so no threshold left of it can skip.
    """
    median = stats.stat(dist, "skipped")
    low, high = stats.stat(dist, "skipped", "min"), stats.stat(dist, "skipped", "max")
    fig = Figure(figsize=(7, 4.5))
    ax = fig.add_subplot()
    x = median.index.to_numpy(dtype=float)
    ax.fill_between(x, low.to_numpy(), high.to_numpy(), color=MEASURED, alpha=0.2, label="min-max")
    ax.plot(x, median.to_numpy(), "o-", color=MEASURED, label="median")
    if rescale_floor is not None and math.isfinite(rescale_floor):
        ax.axvline(rescale_floor, color=FRONT, linestyle="--", linewidth=1)
        ax.annotate(
            f"rescale floor {rescale_floor:.3g}:\n{FLOOR_LABEL}",
            (rescale_floor, 1.0),
            xycoords=("data", "axes fraction"),
            xytext=(4, -4),
            textcoords="offset points",
            va="top",
            fontsize=8,
            color=FRONT,
        )
    ax.set_xlabel("threshold")
    ax.set_ylabel("skipped steps")
    ax.set_title("Skipped steps vs threshold")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    return fig


def x_traces(decisions: pd.DataFrame, runs: pd.DataFrame, threshold: float) -> Figure:
    """The gate's signal x (rel-L1 of the modulated input) per step for every run at one threshold.

    Thin lines are single runs, the thick line the per-step median; steps without an anchor are gaps.
    """
    ids = set(runs[(runs["kind"] == "teacache") & (runs["threshold"] == threshold)]["run_id"])
    sel = decisions[decisions["run_id"].isin(ids)]
    fig = Figure(figsize=(7, 4.5))
    ax = fig.add_subplot()
    for _, run in sel.groupby("run_id", sort=True):
        run = run.sort_values("step")
        ax.plot(run["step"], run["x"], color=MEASURED, alpha=0.3, linewidth=0.8)
    if not sel.empty:
        median = sel.groupby("step")["x"].median().sort_index()
        ax.plot(median.index, median.to_numpy(), color="black", linewidth=2, label="median")
        skipped = sel[~sel["compute"].astype(bool)]
        if not skipped.empty:
            ax.scatter(skipped["step"], skipped["x"], marker="x", s=18, color=FRONT, label="skipped step")
        ax.legend(fontsize=8)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("step")
    ax.set_ylabel("x (rel-L1 of modulated input)")
    ax.set_title(f"Gate signal per step at threshold {threshold:g} ({len(ids)} runs)")
    ax.grid(alpha=0.3)
    return fig


def skip_heatmap(pattern: pd.DataFrame) -> Figure:
    """Which steps each threshold skips: rows = thresholds, columns = steps, colour = fraction of runs."""
    fig = Figure(figsize=(max(6.0, 0.25 * pattern.shape[1] + 2), max(3.0, 0.35 * pattern.shape[0] + 1.5)))
    ax = fig.add_subplot()
    image = ax.imshow(pattern.to_numpy(), aspect="auto", cmap="viridis", vmin=0, vmax=1, interpolation="nearest")
    ax.set_yticks(range(len(pattern.index)), [f"{t:g}" for t in pattern.index])
    step_ticks = list(range(0, pattern.shape[1], max(1, pattern.shape[1] // 14)))
    ax.set_xticks(step_ticks, [str(pattern.columns[i]) for i in step_ticks])
    ax.set_xlabel("step")
    ax.set_ylabel("threshold")
    ax.set_title("Skip pattern: fraction of runs that skipped each step")
    fig.colorbar(image, ax=ax, label="fraction skipped")
    return fig
