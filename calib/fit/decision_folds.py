"""The decision score beside cv R^2 in ``teacache-calib fit``: every candidate's schedules on held-out prompts.

:mod:`calib.fit.decision` replays each candidate (fitted per fold, on the same grouped folds as the cv R^2)
over the runs it did not see and charges its skips the residual drift they leave uncomputed, against an
oracle that knows the change. This module puts those scores into fit.json: per candidate, on the
selected one, on ``--compare`` coefficients, and which candidate each criterion selects.

The default selection stays cv R^2, decided on two trained models (``teacache-bench criteria`` on each,
``teacache-bench across-models``: results/comparisons/two-models/summary.md). Among safe candidates swept
at equal computed steps, neither criterion's pick measured the better front on both: on tiny-shapes the
decision score's pick (a line through the origin) beat every other candidate and the cv R^2 pick lost to
it; on tiny-scenes the cv R^2 pick (a time-aware function) tied every other and the decision score's pick
(x only) measured worse than one. ``--select decision_excess`` selects by the decision score.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

from calib.fit.candidates import CandidateSpec, FittedModel
from calib.fit.decision import CRITERION, decision_scores, decision_summary
from calib.fit.decision_plot import plot_decision_curves
from calib.fit.errors import FitError
from calib.fit.result import Candidate, FitResult
from calib.fit.selection import group_folds, is_safe
from teacache.gate import DEFAULT_MAX_CONSECUTIVE_SKIPS, DEFAULT_SKIP_LAST
from teacache.rescale import RescaleFunction

COMPARISON_LABEL = "--compare"
DEFAULT_SELECTION = "cv_r2"
SELECTIONS = (DEFAULT_SELECTION, CRITERION)
DEFAULT_SELECTION_WHY = (
    "cv R^2 stays the default: on two trained models neither criterion's safe pick measured the better front on "
    "both (tiny-shapes: the decision score's pick beat every other swept candidate, cv R^2's lost to it; "
    "tiny-scenes: cv R^2's tied every other, the decision score's measured worse than one; "
    "results/comparisons/two-models/summary.md); --select decision_excess uses the score"
)
PLOT_CURVES = 5  # best candidates by decision excess drawn in fit_decision.png, plus the cv R^2 pick and --compare


def score_fit(
    fit: FitResult,
    frame: pd.DataFrame,
    specs: Sequence[CandidateSpec],
    n_folds: int | None,
    skip_first_n_steps: int,
    comparison: RescaleFunction | None = None,
    fold_models: Mapping[str, Sequence[FittedModel]] | None = None,
    folds: np.ndarray | None = None,
) -> tuple[FitResult, dict]:
    """``fit`` with the decision score (candidates, selected, selection, ``decision``), and the full result
    (curves included) for the plot; ``fit`` itself is left as it is. The skip rules are the gate's: first
    ``skip_first_n_steps`` steps (the fit's --min-step) and the last step computed, at most the gate's
    default run of consecutive skips. A table the score cannot use leaves the reason in ``decision``.
    ``fold_models``: the candidates' models per fold as ``fit_frame`` fitted them (fitted again when None);
    ``folds``: the fold per frame row they were fitted on (dealt here from ``n_folds`` when None).
    """
    if folds is None:
        folds = group_folds(frame["prompt_id"].to_numpy(), n_folds)
    rules = {
        "skip_first_n_steps": skip_first_n_steps,
        "skip_last_n_steps": DEFAULT_SKIP_LAST,
        "max_consecutive_skips": DEFAULT_MAX_CONSECUTIVE_SKIPS,
    }
    try:
        result = decision_scores(
            frame,
            specs,
            folds,
            compare={COMPARISON_LABEL: comparison} if comparison else None,
            fold_models=fold_models,
            **rules,
        )
    except ValueError as exc:
        selection = {**fit.selection, "selected_by": {"cv_r2": fit.selected.label, CRITERION: None}}
        selection["default"] = DEFAULT_SELECTION
        decision = {"criterion": CRITERION, "error": str(exc), "rules": rules}
        return dataclasses.replace(fit, decision=decision, selection=selection), {}
    by_label = {c["label"]: c for c in result["candidates"]}

    def scored(cand: Candidate) -> Candidate:
        entry = by_label[cand.label]
        return dataclasses.replace(
            cand, decision_excess=entry["decision_excess"], decision_excess_worst=entry["decision_excess_worst"]
        )

    candidates = tuple(map(scored, fit.candidates))
    summary = decision_summary(result)
    summary["scored"] = f"all {len(specs)} candidates" + (" and --compare" if comparison is not None else "")
    allow_unsafe = bool((fit.options or {}).get("allow_unsafe"))
    summary["selected"] = best_by_decision(candidates, allow_unsafe)  # fitted candidates, not --compare
    selection = {**fit.selection, "selected_by": {"cv_r2": fit.selected.label, CRITERION: summary["selected"]}}
    selection.update(default=DEFAULT_SELECTION, default_why=DEFAULT_SELECTION_WHY)
    fit = dataclasses.replace(fit, selected=scored(fit.selected), candidates=candidates, selection=selection)
    return dataclasses.replace(fit, decision=summary), result


def comparison_scores(result: dict) -> dict:
    """The --compare coefficients' decision_excess and decision_excess_worst (empty without them)."""
    entry = next((c for c in result.get("candidates", ()) if c["label"] == COMPARISON_LABEL), None)
    return {} if entry is None else {k: entry[k] for k in ("decision_excess", "decision_excess_worst")}


def select_by(fit: FitResult, criterion: str, allow_unsafe: bool = False) -> FitResult:
    """``fit`` with ``criterion``'s pick as the selected candidate (``cv_r2``: already is; ``decision_excess``:
    the least, among the safe candidates unless ``allow_unsafe``); ``fit`` itself is left as it is."""
    if criterion == DEFAULT_SELECTION:
        return fit
    label = fit.selection["selected_by"].get(CRITERION)
    if label is None:
        raise FitError(
            "--select decision_excess: no "
            + ("" if allow_unsafe else "safe ")
            + "candidate has a decision score (see fit.json 'decision')"
        )
    candidates = tuple(dataclasses.replace(c, selected=c.label == label) for c in fit.candidates)
    selected = next(c for c in candidates if c.selected)
    selection = {**fit.selection, "default": criterion, "default_why": "chosen by --select"}
    return dataclasses.replace(
        fit, selected=selected, candidates=candidates, form=selected["form"], fitted_model=label, selection=selection
    )


def best_by_decision(candidates: Sequence[Mapping], allow_unsafe: bool = False) -> str | None:
    """Label of the candidate of least decision excess (first in list order on ties), among the safe ones
    unless ``allow_unsafe``; None when none is scored."""
    scored = [
        (c["decision_excess"], i)
        for i, c in enumerate(candidates)
        if c.get("decision_excess") is not None and (allow_unsafe or is_safe(c))
    ]
    return candidates[min(scored)[1]]["label"] if scored else None


def decision_plot(fit: Mapping, result: dict) -> bytes:
    """fit_decision.png: the best candidates by decision excess, the cv R^2 pick and --compare, with the oracle."""
    ranked = [c for c in fit["candidates"] if c.get("decision_excess") is not None]
    ranked.sort(key=lambda c: c["decision_excess"])
    labels = [c["label"] for c in ranked[:PLOT_CURVES]]
    for extra in (fit["selected"]["label"], COMPARISON_LABEL):
        if extra not in labels and any(c["label"] == extra for c in result["candidates"]):
            labels.append(extra)
    return plot_decision_curves(result, labels, selected=fit["selected"]["label"])


def report_lines(fit: Mapping) -> list[str]:
    """The fit report's lines about the decision score (printed under the candidate table)."""
    decision = fit.get("decision")
    if not decision:
        return []
    if "error" in decision:
        return [f"decision score: not computed ({decision['error']})"]
    by = fit["selection"]["selected_by"]
    excess = {c["label"]: c.get("decision_excess") for c in fit["candidates"]}
    lo, hi = decision["skipped_range"]
    lines = [
        f"decision score ({decision['change']} change left uncomputed on held-out prompts, {decision['scored']}, "
        f"area above the oracle over {lo}..{hi} of {decision['n_skippable']} skippable steps; lower is better): "
        f"selects {by[CRITERION]} (excess {_num(excess.get(by[CRITERION]))}); cv R^2 selects {by['cv_r2']} "
        f"(excess {_num(excess.get(by['cv_r2']))})",
        f"selection: {fit['selection']['default']} ({fit['selection'].get('default_why', '')})",
    ]
    comp = fit.get("comparison")
    if comp and "decision_excess" in comp:
        lines.append(f"compare {comp['source']}: decision excess {_num(comp['decision_excess'])}")
    return lines


def _num(value: float | None) -> str:
    return "n/a" if value is None or not np.isfinite(value) else f"{value:.3f}"
