"""The plots of ``teacache-calib fit``: data and selected curve, residuals by step, candidates by cv error.

Rendered in memory (PNG bytes), so nothing is written before the fit has succeeded.
"""

from __future__ import annotations

import io

import numpy as np
import pandas as pd

from calib.fit import safety
from calib.fit.files import PLOT_FILES  # noqa: F401  (re-exported: the names of the plots drawn here)
from calib.fit.result import rescale_from_fit
from calib.fit.selection import time_input
from teacache.rescale import FORM_MONO_STEP, FORM_POLY, FORM_POLY_STEP

SHOWN_BEST = 20  # candidates fit_cv.png and the console table show: the best by cv RMSE (and the selected one)


def render_plots(fit: dict, frame: pd.DataFrame) -> dict[str, bytes]:
    """PNG bytes of the three plots drawn from fit.json and the frame (the decision plot needs the curves)."""
    return {
        "scatter": _png(scatter_figure(fit, frame)),
        "residuals": _png(residuals_figure(fit, frame)),
        "cv": _png(cv_figure(fit)),
    }


def scatter_figure(fit: dict, frame: pd.DataFrame):
    """(x, y) pairs coloured by step, the selected curve solid inside the calibrated range and dashed outside.

    The pieces left and right of the range are drawn separately: one line through both would cross the
    plot and look like data.
    """
    # heavy (matplotlib): loaded after the arguments are checked
    from matplotlib.figure import Figure

    sel = fit["selected"]
    rescale = rescale_from_fit(fit)
    x = frame["x_rel_l1"].to_numpy(dtype=float)
    y = frame["y_rel_l1"].to_numpy(dtype=float)
    u = time_input(sel["form"], frame) if rescale.is_time_aware else 0.0
    lo, hi = rescale.x_range
    fig = Figure(figsize=(7.5, 5), dpi=100, layout="constrained")
    ax = fig.subplots()
    sc = ax.scatter(x, y, c=frame["step"].to_numpy(), cmap="viridis", s=12, alpha=0.8)
    fig.colorbar(sc, ax=ax, label="step")
    ax.axvspan(lo, hi, color="tab:orange", alpha=0.08, label="calibrated x range")
    span = hi - lo
    xs = np.linspace(max(0.0, lo - 0.05 * span), hi + 0.05 * span, 400)
    pieces = {"inside": (xs >= lo) & (xs <= hi), "below": xs < lo, "above": xs > hi}
    for value, name in _curve_times(sel["form"], u):
        ys = np.asarray(rescale(xs, value), dtype=float)
        inside = pieces["inside"]
        line = ax.plot(xs[inside], ys[inside], lw=2, label=f"{sel['label']}{name}")[0]
        for part in ("below", "above"):
            if pieces[part].any():
                ax.plot(xs[pieces[part]], ys[pieces[part]], lw=1, ls="--", color=line.get_color())
    ax.set_xlabel("x: rel-L1 change of the modulated input")
    ax.set_ylabel("y: rel-L1 change of the output")
    ax.set_title(_title(sel), fontsize=9)
    ax.legend(fontsize=8)
    return fig


def residuals_figure(fit: dict, frame: pd.DataFrame):
    # heavy (matplotlib): loaded after the arguments are checked
    from matplotlib.figure import Figure

    sel = fit["selected"]
    rescale = rescale_from_fit(fit)
    x = frame["x_rel_l1"].to_numpy(dtype=float)
    y = frame["y_rel_l1"].to_numpy(dtype=float)
    steps = frame["step"].to_numpy()
    u = time_input(sel["form"], frame) if rescale.is_time_aware else 0.0
    resid = y - np.asarray(rescale(x, u), dtype=float)
    fig = Figure(figsize=(7.5, 4), dpi=100, layout="constrained")
    ax = fig.subplots()
    uniq = np.unique(steps)
    ax.boxplot([resid[steps == s] for s in uniq], positions=uniq, widths=0.6, showfliers=True)
    ax.axhline(0.0, color="grey", lw=1)
    ax.set_xlabel("step")
    ax.set_ylabel("residual y - f(x)")
    ax.set_title(f"residuals of {sel['label']} by step (in-sample)", fontsize=9)
    if len(uniq) > 20:
        ax.set_xticks(uniq[:: max(1, len(uniq) // 10)])
    return fig


def cv_figure(fit: dict):
    """Cross-validated RMSE of the best candidates (at most SHOWN_BEST), the selected one highlighted."""
    # heavy (matplotlib): loaded after the arguments are checked
    from matplotlib.figure import Figure

    sel = fit["selected"]
    every = fit["candidates"]
    order = sorted(range(len(every)), key=lambda i: every[i]["rmse"])[:SHOWN_BEST]
    chosen = next((i for i, c in enumerate(every) if c["selected"]), None)
    if chosen is not None and chosen not in order:
        order[-1] = chosen
    cands = sorted((every[i] for i in order), key=lambda c: c["rmse"])  # best first: the order says which is better
    errors = np.array([c["rmse"] for c in cands])
    fig = Figure(figsize=(7.5, 1.4 + 0.28 * len(cands)), dpi=100, layout="constrained")
    ax = fig.subplots()
    pos = np.arange(len(cands))
    safe = [bool((c.get("safety") or {}).get("safe")) for c in cands]
    colors = [
        "tab:orange" if c["selected"] else ("tab:blue" if ok else "lightgrey")
        for c, ok in zip(cands, safe, strict=True)
    ]
    ax.barh(pos, errors, color=colors, hatch=[None if ok else "//" for ok in safe])  # bars from 0
    for p, c in zip(pos, cands, strict=True):
        ax.text(
            c["rmse"],
            p,
            f" cv R^2 {c['cv_r2']:.4f}  {safety.short(c['safety']) if 'safety' in c else 'safety not checked'}"
            + ("  selected" if c["selected"] else ""),
            va="center",
            fontsize=7,
        )
    ax.set_yticks(pos, [c["label"] for c in cands], fontsize=8)
    ax.invert_yaxis()
    # the bars start just left of the best, not at 0: candidates within 1% of each other stay apart; the
    # room on the right holds each bar's cv R^2 and safety
    spread = float(errors.max() - errors.min())
    left = errors.min() - max(spread * 0.15, errors.min() * 1e-3)
    right = errors.max() + max(spread, errors.min() * 1e-3) * 0.8
    ceiling = fit.get("ceiling")
    if ceiling:  # the least cv RMSE any function non-decreasing in x reached on these folds
        ax.axvline(ceiling["rmse"], color="tab:green", linestyle="--", linewidth=1)
        left = min(left, ceiling["rmse"] - max(spread * 0.05, ceiling["rmse"] * 1e-3))
        right = max(right, ceiling["rmse"] + max(spread, errors.min() * 1e-3) * 0.8)
    ax.set_xlim(left, right)
    shown = f"{len(cands)} best of {len(every)}" if len(cands) < len(every) else f"{len(every)}"
    ax.set_xlabel(  # two lines: one is wider than the figure
        "cross-validated RMSE (prompts held out; lower is better)\nthe axis starts near the best; hatched: unsafe"
    )
    title = f"candidates ({shown}), selected {sel['label']} (cv R^2 {sel['cv_r2']:.4f})"
    if ceiling:
        d = ceiling["distance"]
        title += f"\ndashed: monotone ceiling, cv R^2 {ceiling['cv_r2']:.4f} (selected {abs(d):.4f} "
        title += ("below" if d > 0 else "above") + " it)"
    ax.set_title(title, fontsize=9)
    return fig


def _title(sel: dict) -> str:
    checked = f"  {safety.short(sel['safety'])}" if "safety" in sel else ""
    return f"{sel['label']}  R^2 {sel['r2']:.4f}  cv R^2 {sel['cv_r2']:.4f}  ({sel['n_prompts']} prompts){checked}"


def _curve_times(form: str, u) -> list[tuple[float, str]]:
    if form == FORM_POLY:
        return [(0.0, "")]
    name = "step fraction" if form in (FORM_POLY_STEP, FORM_MONO_STEP) else "sigma"
    values = np.quantile(np.asarray(u, dtype=float), [0.0, 0.5, 1.0])
    return [(float(v), f" at {name} {v:.2f}") for v in values]


def _png(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue()
