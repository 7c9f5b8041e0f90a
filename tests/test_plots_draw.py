"""The plots say what the data says, checked on what they draw (matplotlib's artists), not on pixels.

fit_decision.png names the function the fit selected; fit_cv.png shows differences between candidates of
nearly equal error, best first; a front's legend covers neither its title nor its panels and every point
carries its setting; coinciding points share one label instead of printing theirs over each other.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg

ROOT = Path(__file__).resolve().parents[1]
CAMPAIGN = ROOT / "results/cpu-amd-epyc-2c/tiny-shapes/0.24.0"


def _drawn(fig):
    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    return canvas.get_renderer()


def _candidate(label: str, excess: float, selected: bool) -> dict:
    return {"label": label, "thresholds": [0.1, 0.2], "skipped": [2, 4], "uncomputed": [0.1, 0.3],
            "worst": [0.05, 0.1], "decision_excess": excess, "decision_excess_worst": excess,
            "selected": selected}  # fmt: skip


def test_the_decision_plot_names_what_the_fit_selected_and_what_the_score_picks():
    from calib.decision import decision_figure

    result = {"n_runs": 4, "n_skippable": 10, "skipped_range": [1, 5], "change": "output", "n_folds": 2,
              "oracle": {"uncomputed": [0.0, 0.05, 0.1, 0.15, 0.2], "worst": [0.0, 0.02, 0.04, 0.06, 0.08]},
              "candidates": [_candidate("poly1-origin", 0.1, True), _candidate("poly4+step2", 0.4, False)],
              "selected": "poly1-origin"}  # fmt: skip
    fig = decision_figure(result, selected="poly4+step2")
    title = fig._suptitle.get_text()
    assert "fit selected poly4+step2" in title and "least excess poly1-origin" in title
    legend = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert any(t.startswith("poly4+step2") and "(selected)" in t for t in legend)
    assert any(t.startswith("poly1-origin") and "(least excess)" in t and "selected," not in t for t in legend)


def test_the_cv_plot_shows_differences_between_nearly_equal_candidates_best_first():
    from calib.fit_plots import cv_figure

    errors = {"poly2-free": 0.00275, "poly1-origin": 0.00280, "poly4+step2": 0.00271, "poly3-free": 0.00272}
    cands = [{"label": k, "rmse": v, "cv_r2": 0.9 - v, "selected": k == "poly4+step2"} for k, v in errors.items()]
    fig = cv_figure({"selected": cands[2], "candidates": cands})
    ax = fig.axes[0]
    _drawn(fig)
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert labels == sorted(errors, key=errors.get)  # best first (the axis is inverted: top to bottom)
    left = ax.get_xlim()[0]
    visible = {bar.get_width() - left for bar in ax.patches}
    assert left > 0 and max(visible) / min(visible) > 2  # 0.00280 vs 0.00271 reads as a difference


def _front_points() -> pd.DataFrame:
    from bench import front

    runs = pd.read_parquet(CAMPAIGN / "baselines" / "sweep" / "runs.parquet")
    return front.points(runs)


def test_a_fronts_legend_covers_neither_its_title_nor_its_panels_and_every_point_is_labelled():
    from bench.front_plots import front_panels

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
    from bench import plots, stats
    from bench.records import RUNS, read_table

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
