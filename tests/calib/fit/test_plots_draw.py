"""The fit's plots say what the data says, checked on what they draw (matplotlib's artists), not on pixels.

fit_decision.png names the function the fit selected; fit_cv.png shows differences between candidates of
nearly equal error, best first.
"""

from __future__ import annotations

from matplotlib.backends.backend_agg import FigureCanvasAgg


def _drawn(fig):
    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    return canvas.get_renderer()


def _candidate(label: str, excess: float, selected: bool) -> dict:
    return {"label": label, "thresholds": [0.1, 0.2], "skipped": [2, 4], "uncomputed": [0.1, 0.3],
            "worst": [0.05, 0.1], "decision_excess": excess, "decision_excess_worst": excess,
            "selected": selected}  # fmt: skip


def test_the_decision_plot_names_what_the_fit_selected_and_what_the_score_picks():
    from calib.fit.decision_plot import decision_figure

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
    from calib.fit.plots import cv_figure

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


def test_the_cv_plot_keeps_its_x_label_whole_and_shows_the_candidates_the_console_lists(capsys):
    import json
    import re

    from calib.fit.plots import cv_figure
    from calib.fit.summary import print_summary
    from tests import ROOT

    path = ROOT / "results/cpu-amd-epyc-2c/tiny-shapes/0.24.0/fit/fit.json"
    fit = json.loads(path.read_text())
    print_summary(fit, path)
    listed = int(re.search(r"the (\d+) best of (\d+) candidates", capsys.readouterr().out).group(1))
    fig = cv_figure(fit)
    renderer = _drawn(fig)
    ax = fig.axes[0]
    assert f"{listed} best of {len(fit['candidates'])}" in ax.get_title()
    label = ax.xaxis.label.get_window_extent(renderer)
    assert fig.bbox.x0 <= label.x0 and label.x1 <= fig.bbox.x1, (label, fig.bbox)
