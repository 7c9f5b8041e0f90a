"""Plots of the combined speed/quality front (every arm) and of TeaCache's front per rescale function.

Each function takes the points of ``bench.report.front.points`` and returns a matplotlib Figure (no pyplot
state); ``bench.report.plots.figure_png`` turns it into reproducible PNG bytes.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from bench.report import front
from bench.report.plots import label_groups
from bench.sweep.baselines import TEACACHE

ARM_STYLE = {  # colour, marker
    "teacache": ("tab:blue", "o"),
    "fewer-steps": ("tab:orange", "s"),
    "static": ("tab:green", "^"),
    "step-cache": ("tab:purple", "D"),
    "mlx-teacache": ("tab:gray", "v"),
}
FRONT_COLOUR = "tab:red"
PANELS = (("ssim_median", "SSIM, median"), ("ssim_p5", "SSIM, p5"), ("cosine_median", "cosine, median"),
          ("psnr_median", "PSNR (dB), median"))  # fmt: skip


def _series(points: pd.DataFrame) -> list[tuple[str, pd.DataFrame, tuple[str, str]]]:
    """(legend label, its points, style) per arm; TeaCache once per rescale function when there are several."""
    out = []
    for arm, (colour, marker) in ARM_STYLE.items():
        at = points[points["arm"] == arm]
        if at.empty:
            continue
        rescales = at["rescale"].dropna().unique() if "rescale" in at.columns else []
        if arm == TEACACHE and len(rescales) > 1:
            for i, name in enumerate(sorted(rescales)):
                shade = ("tab:blue", "tab:cyan", "navy", "tab:olive", "tab:brown")[i % 5]
                out.append((f"TeaCache ({name})", at[at["rescale"] == name], (shade, "o")))
        else:
            out.append((front.ARM_LABELS.get(arm, arm), at, (colour, marker)))
    return out


SPEED_LABELS = {"speedup_median": "speedup vs paired vanilla (median, x)",
                "ideal_speedup_median": "ideal speedup N / computed steps (median, x)"}  # fmt: skip


def _draw(ax, points: pd.DataFrame, quality: str, label_settings: bool, speed: str = "speedup_median") -> None:
    finite = points[np.isfinite(points[quality].to_numpy(dtype=float))]
    for label, at, (colour, marker) in _series(finite):
        ax.scatter(at[speed], at[quality], color=colour, marker=marker, s=30, label=label, zorder=3)
        if label_settings:
            for x, y, text in label_groups(at[speed], at[quality], at["arm_setting"]):
                ax.annotate(text, (x, y), textcoords="offset points", xytext=(4, 3), fontsize=6, color=colour)
    on = front.mark_front(finite, quality=quality, speed=speed).to_numpy() if len(finite) else np.array([], bool)
    if on.any():
        best = finite[on].sort_values(speed)
        ax.plot(best[speed], best[quality], "-", color=FRONT_COLOUR, linewidth=1, label="Pareto front")
        ax.scatter(best[speed], best[quality], facecolors="none", edgecolors=FRONT_COLOUR, s=110,
                   linewidths=1.1, zorder=4)  # fmt: skip
    ax.set_xlabel(SPEED_LABELS.get(speed, speed))
    ax.ticklabel_format(axis="y", useOffset=False)
    ax.grid(alpha=0.3)


def combined_front(
    points: pd.DataFrame, quality: str = "ssim_median", title: str = "", speed: str = "speedup_median"
) -> Figure:
    """Every arm's settings at (median speedup, ``quality``); the Pareto front over all of them ringed.

    ``speed="ideal_speedup_median"`` places them at equal work instead (N over computed steps).
    """
    fig = Figure(figsize=(7.5, 5.5))
    ax = fig.add_subplot()
    _draw(ax, points, quality, label_settings=True, speed=speed)
    ax.set_ylabel(quality.replace("_", " "))
    ax.set_title(title or f"Speed/quality front, every arm ({quality.replace('_', ' ')}; labels: settings)")
    ax.legend(fontsize=8, loc="best")
    return fig


def front_panels(points: pd.DataFrame, title: str = "", speed: str = "speedup_median") -> Figure:
    """The combined front four times: SSIM median and p5, cosine, PSNR."""
    fig = Figure(figsize=(12, 9))
    axes = fig.subplots(2, 2)
    for ax, (quality, name) in zip(axes.flat, PANELS, strict=True):
        if quality in points.columns:
            _draw(ax, points, quality, label_settings=True, speed=speed)
        ax.set_ylabel(name)
    handles, labels = axes.flat[0].get_legend_handles_labels()
    fig.suptitle(title or "Speed/quality fronts of every arm (labels: settings)", y=0.995)
    # the legend in its own row under the title, above the panels: it covers neither
    fig.legend(handles, labels, loc="upper center", bbox_to_anchor=(0.5, 0.96), ncol=min(len(labels), 6), fontsize=8)
    fig.tight_layout(rect=(0, 0, 1, 0.92))
    return fig


def rescale_fronts(points: pd.DataFrame, quality: str = "ssim_median") -> Figure:
    """TeaCache's points per rescale function, each with its own front line (labels: thresholds)."""
    fig = Figure(figsize=(7.5, 5.5))
    ax = fig.add_subplot()
    tc = points[points["arm"] == TEACACHE]
    tc = tc[np.isfinite(tc[quality].to_numpy(dtype=float))]
    names = sorted(tc["rescale"].dropna().unique()) if "rescale" in tc.columns else []
    for i, name in enumerate(names or [None]):
        at = tc if name is None else tc[tc["rescale"] == name]
        colour = ("tab:blue", "tab:orange", "tab:green", "tab:purple", "tab:brown")[i % 5]
        on = front.mark_front(at, quality=quality).to_numpy()
        ax.scatter(at["speedup_median"], at[quality], color=colour, s=25, zorder=3)
        line = at[on].sort_values("speedup_median")
        ax.plot(line["speedup_median"], line[quality], "-", color=colour, label=str(name or "TeaCache") + " front")
        for _, p in at.iterrows():
            if not math.isnan(p["speedup_median"]):
                ax.annotate(str(p["arm_setting"]), (p["speedup_median"], p[quality]), textcoords="offset points",
                            xytext=(4, 3), fontsize=6, color=colour)  # fmt: skip
    ax.set_xlabel("speedup vs paired vanilla (median, x)")
    ax.set_ylabel(quality.replace("_", " "))
    ax.ticklabel_format(axis="y", useOffset=False)
    ax.set_title(f"TeaCache fronts per rescale function ({quality.replace('_', ' ')})")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="best")
    return fig
