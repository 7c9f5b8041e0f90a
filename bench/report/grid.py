"""Pictures of a sweep: a grid of images (rows: a few prompts; columns: vanilla and each threshold) with SSIM and
skipped steps under each, and the same grid of differences against vanilla.

Read from the images the sweep saved (``sweep --save-images``: ``images/`` beside runs.parquet, named by the
runs' ``image_path``; a threshold-0 run equal to vanilla shows the vanilla image, :mod:`bench.sweep.images`).
Figures only; :mod:`bench.report.render` turns them into PNGs beside report.md.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import PIL.Image
from matplotlib.figure import Figure

from bench.sweep.images import image_file

ROWS = 4  # prompts shown: enough to see a pattern, small enough to read on a page
CELL_IN = 1.45  # inches per image


def grid_pairs(runs: pd.DataFrame, rows: int = ROWS) -> list[str]:
    """The pairs a grid shows: the first ``rows`` prompts in prompt order, each with its lowest seed."""
    vanilla = runs[runs["kind"] == "vanilla"].sort_values(["prompt_id", "seed"], kind="stable")
    return vanilla.drop_duplicates("prompt_id")["pair_id"].head(rows).tolist()


def grid_cells(runs: pd.DataFrame, folder: Path, rows: int = ROWS) -> tuple[list[str], list[float], dict] | None:
    """(pair ids, thresholds, {(pair, threshold or None): run row}) when every shown image is on disk, else None.

    Each row carries ``image_file``, the file that holds its image (:func:`bench.sweep.images.image_file`).
    """
    if "image_path" not in runs.columns:
        return None
    pairs = grid_pairs(runs, rows)
    teacache = runs[runs["kind"] == "teacache"]
    thresholds = sorted(float(t) for t in teacache["threshold"].dropna().unique())
    cells: dict = {}
    for pair in pairs:
        mine = runs[runs["pair_id"] == pair]
        vanilla = mine[mine["kind"] == "vanilla"]
        if vanilla.empty:
            return None
        cells[(pair, None)] = vanilla.iloc[0]
        for t in thresholds:
            row = mine[(mine["kind"] == "teacache") & (mine["threshold"] == t)]
            if row.empty:
                return None
            cells[(pair, t)] = row.iloc[0]
    for (pair, t), row in list(cells.items()):
        path = image_file(folder, row, cells[(pair, None)])
        if path is None:
            return None
        cells[(pair, t)] = row.copy()
        cells[(pair, t)]["image_file"] = path
    return pairs, thresholds, cells


def _load(row) -> np.ndarray:
    with PIL.Image.open(row["image_file"]) as image:
        return np.asarray(image.convert("RGB"), dtype=np.uint8)


def _frame(ax) -> None:
    ax.set_xticks([])
    ax.set_yticks([])
    for spine in ax.spines.values():
        spine.set_visible(False)


def _figure(n_rows: int, n_cols: int) -> tuple[Figure, np.ndarray]:
    fig = Figure(figsize=(CELL_IN * n_cols, (CELL_IN + 0.35) * n_rows + 0.4))
    axes = np.asarray(fig.subplots(n_rows, n_cols, squeeze=False))
    fig.subplots_adjust(wspace=0.06, hspace=0.32)
    return fig, axes


def _column_title(t: float | None) -> str:
    return "vanilla" if t is None else f"threshold {t:g}"


def image_grid(runs: pd.DataFrame, folder: Path, title: str, rows: int = ROWS) -> Figure | None:
    """Vanilla and every threshold side by side; SSIM against vanilla and skipped steps under each image."""
    found = grid_cells(runs, folder, rows)
    if found is None:
        return None
    pairs, thresholds, cells = found
    columns = [None, *thresholds]
    fig, axes = _figure(len(pairs), len(columns))
    for i, pair in enumerate(pairs):
        for j, t in enumerate(columns):
            ax, row = axes[i, j], cells[(pair, t)]
            ax.imshow(_load(row), interpolation="nearest")
            _frame(ax)
            if i == 0:
                ax.set_title(_column_title(t), fontsize=8)
            if j == 0:
                ax.set_ylabel(f"{row['prompt_id']} s{int(row['seed'])}", fontsize=7)
            steps = int(row["num_steps"])
            caption = (
                f"{steps} of {steps} steps"
                if t is None
                else f"SSIM {float(row['ssim']):.3f}\nskipped {int(row['skipped'])} of {steps}"
            )
            ax.set_xlabel(caption, fontsize=7, linespacing=1.1)
    fig.suptitle(title, fontsize=9)
    return fig


def difference_grid(runs: pd.DataFrame, folder: Path, title: str, rows: int = ROWS) -> Figure | None:
    """|TeaCache - vanilla| per pixel (mean over RGB), one colour scale for the whole grid; max under each."""
    found = grid_cells(runs, folder, rows)
    if found is None:
        return None
    pairs, thresholds, cells = found
    diffs = {}
    for pair in pairs:
        base = _load(cells[(pair, None)]).astype(np.float64)
        for t in thresholds:
            diffs[(pair, t)] = np.abs(_load(cells[(pair, t)]).astype(np.float64) - base).mean(axis=2)
    top = max(1.0, max(float(d.max()) for d in diffs.values()))
    fig, axes = _figure(len(pairs), len(thresholds))
    shown = None
    for i, pair in enumerate(pairs):
        for j, t in enumerate(thresholds):
            ax, diff = axes[i, j], diffs[(pair, t)]
            shown = ax.imshow(diff, cmap="magma", vmin=0.0, vmax=top, interpolation="nearest")
            _frame(ax)
            if i == 0:
                ax.set_title(_column_title(t), fontsize=8)
            if j == 0:
                ax.set_ylabel(f"{cells[(pair, t)]['prompt_id']} s{int(cells[(pair, t)]['seed'])}", fontsize=7)
            ax.set_xlabel(f"max {diff.max():.0f}\nmean {diff.mean():.1f}", fontsize=7, linespacing=1.1)
    bar = fig.colorbar(shown, ax=axes.ravel().tolist(), shrink=0.6, pad=0.02)
    bar.set_label("|TeaCache - vanilla| (0-255, mean over RGB)", fontsize=7)
    bar.ax.tick_params(labelsize=7)
    fig.suptitle(title, fontsize=9)
    return fig
