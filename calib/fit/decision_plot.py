"""fit_decision.png: the decision curves of a fit's candidates against the oracle's (:mod:`calib.fit.decision`)."""

from __future__ import annotations

import io
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from calib.fit.files import PLOT_FILES

if TYPE_CHECKING:
    from matplotlib.figure import Figure

PLOT_FILE = PLOT_FILES["decision"]


def plot_decision_curves(
    result: dict, labels: Sequence[str] | None = None, max_curves: int = 6, selected: str | None = None
) -> bytes:
    """PNG bytes of :func:`decision_figure`, rendered in memory so the caller writes it atomically."""
    fig = decision_figure(result, labels, max_curves, selected)
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue()


def decision_figure(
    result: dict, labels: Sequence[str] | None = None, max_curves: int = 6, selected: str | None = None
) -> Figure:
    """Uncomputed and worst-stretch change against skipped steps, candidates and the oracle.

    Shows ``labels`` (default: the ``max_curves`` best by decision_excess) and the oracle. Both axes are
    per run (totals divided by the number of runs); the shaded band is the range the scores are taken
    over. ``selected``: what the fit selected (by its criterion); the candidate of least excess is marked as
    such, since the two differ when the fit selects by cv R^2.
    """
    # heavy (matplotlib): loaded after the arguments are checked
    from matplotlib.figure import Figure

    n_runs = max(int(result["n_runs"]), 1)
    n_skippable = max(int(result["n_skippable"]), 1)
    candidates = result["candidates"]
    if labels is None:
        ranked = sorted(candidates, key=lambda c: math.inf if c["decision_excess"] is None else c["decision_excess"])
        labels = [c["label"] for c in ranked[:max_curves]]
    shown = [c for c in candidates if c["label"] in labels]
    chosen = selected or result.get("selected") or "none"
    fig = Figure(figsize=(12, 5.2), dpi=100, layout="constrained")
    axes = fig.subplots(1, 2)
    lo, hi = result["skipped_range"]
    for ax, key, score, title, ylabel in (
        (axes[0], "uncomputed", "decision_excess", "sum over skipped stretches", "uncomputed change per run"),
        (axes[1], "worst", "decision_excess_worst", "largest single stretch", "largest stretch per run"),
    ):
        oracle = np.array([np.nan if v is None else v for v in result["oracle"][key]])
        ks = np.arange(oracle.size)
        ax.plot(ks / n_skippable, oracle / n_runs, color="black", lw=2.5, label="oracle (knows the change)")
        for c in shown:
            order = np.argsort(c["thresholds"], kind="stable")
            skipped = np.asarray(c["skipped"])[order] / n_skippable
            cost = np.asarray(c[key])[order] / n_runs
            value = c[score]
            text = "n/a" if value is None else f"{value:.3f}"
            marks = [m for m, on in (("selected", c["label"] == chosen), ("least excess", c.get("selected"))) if on]
            mark = f"  ({', '.join(marks)})" if marks else ""
            ax.plot(skipped, cost, lw=1.8 if mark else 1.0, label=f"{c['label']}: excess {text}{mark}")
        if hi > lo:
            ax.axvspan(lo / n_skippable, hi / n_skippable, color="tab:orange", alpha=0.07, label="scored range")
        ax.set_xlabel("skipped steps (fraction of the steps any schedule may skip)")
        ax.set_ylabel(f"{ylabel} ({result['change']} change)")
        ax.set_title(title, fontsize=9)
        ax.legend(fontsize=7, loc="upper left")
    least = result.get("selected") or "none"
    pick = f"fit selected {chosen}, least excess {least}" if chosen != least else f"selected {least} (least excess)"
    fig.suptitle(
        f"decision score on held-out prompts ({result['n_folds']} folds, {result['n_runs']} runs; "
        f"excess = area above the oracle / oracle area): {pick}",
        fontsize=10,
    )
    return fig
