"""The report's plots say what the data says, checked on what they draw (matplotlib's artists), not on pixels.

A front's legend covers neither its title nor its panels and every point carries its setting; coinciding
points share one label instead of printing theirs over each other.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg

from tests import ROOT

CAMPAIGN = ROOT / "results/cpu-amd-epyc-2c/tiny-shapes/0.24.0"


def _drawn(fig):
    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    return canvas.get_renderer()


def _front_points() -> pd.DataFrame:
    from bench.report import front

    runs = pd.read_parquet(CAMPAIGN / "baselines" / "sweep" / "runs.parquet")
    return front.points(runs)


def test_a_fronts_legend_covers_neither_its_title_nor_its_panels_and_every_point_is_labelled():
    from bench.report.front_plots import front_panels

    points = _front_points()
    fig = front_panels(points, "Every arm at equal work (ideal speedup)", speed="ideal_speedup_median")
    renderer = _drawn(fig)
    legend = fig.legends[0].get_window_extent(renderer)
    title = fig._suptitle.get_window_extent(renderer)
    assert not legend.overlaps(title)
    for ax in fig.axes:
        assert not legend.overlaps(ax.get_window_extent(renderer))
        texts = " ".join(child.get_text() for child in ax.texts)
        assert texts, "a panel without setting labels"
    shown = " ".join(child.get_text() for child in fig.axes[0].texts)
    finite = points[np.isfinite(points["ssim_median"].to_numpy(dtype=float))]
    assert all(str(setting) in shown for setting in finite["arm_setting"])


def test_coinciding_points_share_one_label():
    from bench.report import plots, stats
    from bench.sweep.records import RUNS, read_table

    runs = read_table(CAMPAIGN / "sweep" / "runs.parquet", RUNS)
    fig = plots.speedup_quality(stats.distribution(runs), "ssim")
    ax = fig.axes[0]
    _drawn(fig)
    notes = [child for child in ax.texts]
    spots = [note.xy for note in notes]
    x0, x1 = ax.get_xlim()
    y0, y1 = ax.get_ylim()
    for i, (xa, ya) in enumerate(spots):
        for xb, yb in spots[i + 1 :]:
            apart = abs(xa - xb) > 0.01 * (x1 - x0) or abs(ya - yb) > 0.01 * (y1 - y0)  # 1% of the axes: apart
            assert apart, f"labels {notes[i].get_text()!r} print over each other"
    labelled = ", ".join(note.get_text() for note in notes).split(", ")
    assert sorted(labelled, key=float) == [
        f"{t:g}" for t in sorted(runs.loc[runs["kind"] == "teacache", "threshold"].unique())
    ]
