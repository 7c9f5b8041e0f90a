"""What ``teacache-calib fit`` prints: the best candidates, the selection and why, safety, the monotone ceiling,
the --compare verdict and the decision score's lines."""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path

from rich.console import Console
from rich.table import Table

from calib.fit import safety
from calib.fit.decision_folds import report_lines
from calib.fit.plots import SHOWN_BEST
from calib.fit.result import thaw
from calib.traces.runs import loras_note


def print_summary(fit: Mapping, path: Path) -> None:
    """The fit's report on the console: the candidate table, the selection and what it means for the gate."""
    fit = thaw(fit)  # plain lists and dicts, printed as fit.json holds them
    console = Console(width=max(100, Console().width))
    data = fit["data"]
    cands = fit["candidates"]
    best = sorted(cands, key=lambda c: c["rmse"])[:SHOWN_BEST]  # as many as fit_cv.png shows
    by = fit["selection"].get("selected_by") or {}
    picks = [c for c in cands if c not in best and (c["selected"] or c["label"] == by.get("decision_excess"))]
    shown = best + picks
    more = f"; the {len(best)} best of {len(cands)} candidates by cv RMSE" if len(best) < len(cands) else ""
    table = Table(
        title=f"{data['n_pairs']} pairs, {data['n_prompts']} prompts, {fit['selection']['cv']}{more}",
        title_justify="left",
    )
    for name, justify in (
        ("candidate", "left"),
        ("k", "right"),
        ("R^2", "right"),
        ("cv R^2", "right"),
        ("cv RMSE", "right"),
        ("decision", "right"),
        ("safety", "left"),
        ("", "left"),
    ):
        table.add_column(name, justify=justify)
    for c in shown:
        table.add_row(
            c["label"],
            str(c["n_params"]),
            f"{c['r2']:.4f}",
            f"{c['cv_r2']:.4f}",
            f"{c['rmse']:.4g}",
            "n/a" if c.get("decision_excess") is None else f"{c['decision_excess']:.3f}",
            safety.short(c["safety"]) if "safety" in c else "not checked",
            _picks(c, by),
        )
    console.print(table)
    sel = fit["selected"]
    console.print(
        f"selected {sel['label']} ({_why_selected(fit)}): coefficients {sel['coefficients']}"
        + (f", time coefficients {sel['time_coefficients']}" if sel["time_coefficients"] else "")
        + (f", x*u coefficients {sel['interaction_coefficients']}" if sel.get("interaction_coefficients") else "")
        + f", x range {sel['x_range'][0]:.4g}..{sel['x_range'][1]:.4g}",
        highlight=False,
    )
    console.print(_safety_line(fit), highlight=False)
    loras = loras_note((fit.get("input") or {}).get("loras") or [], len((fit.get("input") or {}).get("files") or []))
    if loras:
        console.print(f"traces: {loras}", highlight=False)
    if "ceiling" in fit:
        console.print(ceiling_line(fit["ceiling"]), highlight=False)
    comp = fit.get("comparison")
    if comp:
        console.print(
            f"compare {comp['source']}: R^2 {comp['r2']:.4f}, RMSE {comp['rmse']:.4g} vs new cv RMSE "
            f"{comp['new_cv_rmse']:.4g} ({_pct(comp['excess'])}, margin {comp['margin']:.0%}): "
            f"{comp['verdict']}",
            highlight=False,
        )
        if comp.get("numeric_change"):
            console.print(f"compare {comp['source']}: {comp['numeric_change']}", highlight=False)
        if "safety" in comp:
            where = safety.describe_intervals(comp["unsafe_intervals"])
            console.print(
                f"compare {comp['source']}: {safety.describe(comp['safety'])} on {comp['safety']['grid']}"
                + (f": {where}" if where else ""),
                highlight=False,
            )
    for line in report_lines(fit):
        console.print(line, highlight=False)
    console.print(f"wrote {path}", highlight=False, soft_wrap=True)


def ceiling_line(ceiling: dict) -> str:
    """The selection against the monotone ceiling, in one line."""
    return (
        f"monotone ceiling (isotonic in x, {ceiling['bins']} step bin(s), same folds): cv R^2 {ceiling['cv_r2']:.4f}; "
        f"selected {ceiling['selected_cv_r2']:.4f}, "
        + (f"{ceiling['distance']:.4f} below it" if ceiling["distance"] > 0 else f"{-ceiling['distance']:.4f} above it")
    )


def _safety_line(fit: dict) -> str:
    """Which candidates could be selected, and what the cv R^2 pick among all of them would have been."""
    rule = fit["selection"].get("safety") or {}
    line = (
        f"safety: {rule.get('n_safe', '?')} of {rule.get('n_candidates', '?')} candidates safe; selected from "
        f"{rule.get('rule', 'all candidates')}"
    )
    free = fit["selection"].get("unconstrained")
    if free and free["label"] != fit["selection"]["selected_by"].get("cv_r2", fit["selected"]["label"]):
        line += f" (among all, cv R^2 would select {free['label']}, cv R^2 {free['cv_r2']:.4f}, unsafe)"
    return line


def _why_selected(fit: dict) -> str:
    if fit["selection"].get("default", "cv_r2") != "cv_r2":
        return f"least decision excess, {fit['selected'].get('decision_excess', math.nan):.3f}"
    best = fit["selection"].get("best_cv_r2", fit["selected"]["cv_r2"])
    return f"fewest parameters within one standard error of the best cv R^2 {best:.4f}"


def _picks(cand: dict, selected_by: dict) -> str:
    """'selected' for the selection, and which criterion picks the candidate when the decision score is known."""
    words = ["selected"] if cand["selected"] else []
    if selected_by.get("decision_excess") == cand["label"]:
        words.append("decision pick")
    return ", ".join(words)


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value:+.1%}"
