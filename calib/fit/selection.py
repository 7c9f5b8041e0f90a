"""Scoring and choosing rescale functions: grouped cross-validation, the one-standard-error rule, and
scoring existing coefficients against a refit.

Prompts are held out together (a fit that memorises the calibration prompts scores well in-sample and
badly on the next prompt). Among the safe candidates (:mod:`calib.fit.safety`: positive and non-decreasing in
x on their region), the one with the fewest parameters whose cross-validated error is within one standard
error of the best safe one (and never less than a 1% band) is selected, so an extra column has to earn its
place by more than the noise of the CV estimate. Unsafe candidates are scored and reported, never selected
unless the caller allows it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

from calib.fit import safety
from calib.fit.candidates import TIME_COLUMN, CandidateSpec, FittedModel, design_matrix, fit_params
from calib.fit.errors import FitError
from calib.fit.result import Candidate, FitResult
from calib.traces.runs import step_fraction
from calib.traces.tables import finite_or_none
from teacache.rescale import FORM_MONO_STEP, FORM_POLY_SIGMA, FORM_POLY_STEP, RescaleFunction

MIN_PROMPTS = 3
LOO_MAX_PROMPTS = 20  # leave-one-prompt-out up to this many prompts, else DEFAULT_FOLDS folds
DEFAULT_FOLDS = 10
# The smallest parsimony band: cv MSE within 1% of the best one's counts as tied even when the standard
# error is smaller, so noise never buys a spurious term.
TIE_TOLERANCE = 0.01
DEFAULT_MARGIN = 0.10
VERDICT_REFIT = "refit recommended"
VERDICT_OK = "packaged coefficients still fit"
VERDICT_OK_GIVEN = "the compared coefficients still fit"  # --compare FILE or numbers: not the packaged ones


def group_folds(groups: Sequence, n_folds: int | None = None) -> np.ndarray:
    """Fold index per row, whole groups per fold (like scikit-learn's GroupKFold).

    Default: one fold per group up to LOO_MAX_PROMPTS groups, else DEFAULT_FOLDS folds; groups are
    dealt largest first to the fold with the fewest rows, so the split is deterministic.
    """
    groups = np.asarray(groups)
    names, inverse, counts = np.unique(groups, return_inverse=True, return_counts=True)
    n_groups = len(names)
    k = n_folds if n_folds is not None else (n_groups if n_groups <= LOO_MAX_PROMPTS else DEFAULT_FOLDS)
    if not 2 <= k <= n_groups:
        raise FitError(f"--folds: expected 2 to {n_groups} (the number of prompts), got {k}")
    load = np.zeros(k)
    fold_of_group = np.empty(n_groups, dtype=int)
    for g in np.argsort(-counts, kind="stable"):
        f = int(np.argmin(load))
        fold_of_group[g] = f
        load[f] += counts[g]
    return fold_of_group[inverse]


def time_input(form: str, frame: pd.DataFrame) -> np.ndarray | None:
    """The per-row time input of a form, computed as the gate computes it at run time."""
    if form in (FORM_POLY_STEP, FORM_MONO_STEP):
        if "num_steps" not in frame.columns:
            raise FitError(f"form {form!r} needs column 'num_steps'; columns found: {', '.join(_cols(frame))}")
        return step_fraction(frame)
    if form == FORM_POLY_SIGMA:
        if "sigma" not in frame.columns:
            raise FitError(
                f"form {form!r} needs column 'sigma' (finite on every row); columns found: {', '.join(_cols(frame))}"
            )
        return frame["sigma"].to_numpy(dtype=float)
    return None


def _cols(frame: pd.DataFrame) -> list[str]:
    return [str(c) for c in frame.columns if not str(c).startswith("_")]


def r2_score(y: np.ndarray, pred: np.ndarray) -> float:
    ss_tot = float(np.sum((y - np.mean(y)) ** 2))
    return 1.0 - float(np.sum((y - pred) ** 2)) / ss_tot


def rmse(y: np.ndarray, pred: np.ndarray) -> float:
    return float(np.sqrt(np.mean((y - pred) ** 2)))


def evaluate_candidate(
    spec: CandidateSpec, frame: pd.DataFrame, folds: np.ndarray, u: np.ndarray | None = None
) -> Candidate:
    """Fit on all rows (in-sample scores) and per fold (pooled out-of-fold scores and their standard error)."""
    x = frame["x_rel_l1"].to_numpy(dtype=float)
    y = frame["y_rel_l1"].to_numpy(dtype=float)
    if u is None:
        u = time_input(spec.form, frame)
    return _evaluate(spec, x, y, u, folds, int(frame["prompt_id"].nunique()))[0]


def _evaluate(spec: CandidateSpec, x, y, u, folds: np.ndarray, n_prompts: int) -> tuple[Candidate, list[FittedModel]]:
    """The candidate's entry of fit.json, and its models fitted per fold (sorted fold order)."""
    model = FittedModel.fit(spec, x, y, u)
    pred = model.predict(x, u)
    oof, fold_models = _out_of_fold(spec, x, y, u, folds)
    return Candidate(
        label=spec.label,
        function=model.function,
        **{k: getattr(spec, k) for k in ("degree", "mode", "time_degree", "interaction_degree", "n_params")},
        r2=r2_score(y, pred),
        cv_r2=r2_score(y, oof),
        cv_r2_se=cv_standard_error(y, oof, folds),
        cv_fold_loss=fold_losses(y, oof, folds),
        rmse=rmse(y, oof),
        rmse_in_sample=rmse(y, pred),
        safety=safety.check(model.function),
        n_prompts=n_prompts,
        n_pairs=len(y),
        selected=False,
    ), fold_models


def _out_of_fold(spec: CandidateSpec, x, y, u, folds: np.ndarray) -> tuple[np.ndarray, list[FittedModel]]:
    """Predictions of each fold's rows by the candidate fitted on the other folds, and those fitted models
    (sorted fold order): each is what ``FittedModel.fit`` makes of the other folds' rows."""
    oof = np.empty_like(y)
    models = []
    if spec.form == FORM_MONO_STEP:  # its knots come from the fitted rows: refit per fold, whole
        for k in np.unique(folds):
            test = folds == k
            models.append(FittedModel.fit(spec, x[~test], y[~test], u[~test]))
            oof[test] = models[-1].predict(x[test], u[test])
        return oof, models
    design = design_matrix(spec, x, u)
    for k in np.unique(folds):
        test = folds == k
        train = ~test
        u_train = None if u is None else u[train]
        params = fit_params(spec, x[train], y[train], u_train, design[train])
        oof[test] = design[test] @ params
        models.append(FittedModel.from_params(spec, params, x[train], u_train))
    return oof, models


def fold_losses(y: np.ndarray, oof: np.ndarray, folds: np.ndarray) -> list[float]:
    """Each fold's MSE over the variance of y (R^2 units), folds in sorted order: what a paired comparison of
    two candidates on the same folds reads."""
    var = float(np.mean((y - np.mean(y)) ** 2))
    return [float(np.mean((y[folds == k] - oof[folds == k]) ** 2) / var) for k in np.unique(folds)]


def paired_standard_error(a: Mapping, b: Mapping, weights: np.ndarray) -> float:
    """Standard error of the difference of two candidates' pooled cv MSE (R^2 units), from their per-fold
    differences on the same folds: prompts that are hard for one are hard for both, so this is far smaller
    than either candidate's own standard error."""
    d = np.asarray(a["cv_fold_loss"]) - np.asarray(b["cv_fold_loss"])
    k = len(d)
    if k < 2:
        return 0.0
    pooled = float(np.sum(weights * d))
    return float(np.sqrt(k / (k - 1) * np.sum(weights**2 * (d - pooled) ** 2)))


def cv_standard_error(y: np.ndarray, oof: np.ndarray, folds: np.ndarray) -> float:
    """Standard error of the pooled cv MSE over folds, in R^2 units (divided by the variance of y).

    The pooled MSE is the row-weighted mean of the fold MSEs; its standard error is estimated from
    their spread (folds hold whole prompts, so rows within a fold are not independent; folds are).
    """
    names = np.unique(folds)
    if len(names) < 2:
        return 0.0
    sq = (y - oof) ** 2
    weights = np.array([np.mean(folds == k) for k in names])
    fold_mse = np.array([sq[folds == k].mean() for k in names])
    pooled = float(np.sum(weights * fold_mse))
    var = float(len(names) / (len(names) - 1) * np.sum(weights**2 * (fold_mse - pooled) ** 2))
    return float(np.sqrt(var) / np.mean((y - np.mean(y)) ** 2))


def is_safe(candidate: Mapping) -> bool:
    """Whether a scored candidate is safe (entries without a safety check count as unsafe)."""
    return bool((candidate.get("safety") or {}).get("safe"))


def select(
    candidates: Sequence[Mapping],
    tie_tolerance: float = TIE_TOLERANCE,
    allow_unsafe: bool = True,
    fold_weights: np.ndarray | None = None,
) -> int:
    """Index of the selected candidate: the fewest parameters among those whose cv MSE (1 - cv R^2) is within
    one standard error of the best, or within ``tie_tolerance`` relative of it when that is wider; then the
    best cv R^2, then list order. Without ``allow_unsafe`` only safe candidates take part (FitError if none).
    With ``fold_weights`` (rows per fold / rows) the standard error is the paired one of each candidate's
    difference from the best (:func:`paired_standard_error`), else the best's own."""
    pool = [i for i, c in enumerate(candidates) if allow_unsafe or is_safe(c)]
    if not pool:
        raise FitError(
            f"none of the {len(candidates)} candidate(s) is safe (positive and non-decreasing in x on its region; "
            "see 'safety' per candidate): widen --mode to include monotone, or pass --allow-unsafe"
        )
    best_i = max(pool, key=lambda i: (candidates[i]["cv_r2"], -i))
    best = candidates[best_i]["cv_r2"]
    se = float(candidates[best_i].get("cv_r2_se") or 0.0)
    limit = max((1.0 - best) * (1.0 + tie_tolerance), (1.0 - best) + se) + 1e-12
    within = [i for i in pool if 1.0 - candidates[i]["cv_r2"] <= limit]
    if fold_weights is not None:
        band = (1.0 - best) * tie_tolerance
        within = [
            i
            for i in pool
            if best - candidates[i]["cv_r2"]
            <= max(band, paired_standard_error(candidates[i], candidates[best_i], fold_weights)) + 1e-12
        ]
    return min(within, key=lambda i: (candidates[i]["n_params"], -candidates[i]["cv_r2"], i))


def check_fit_input(frame: pd.DataFrame, specs: list[CandidateSpec]) -> None:
    """FitError unless :func:`fit_frame` can fit these candidates to this frame: some candidate, enough
    prompts to hold out, a spread of x and of y, the time column of every time-aware candidate."""
    if not specs:
        raise FitError(
            "no candidate to fit: the --form/--degree/--mode/--time-degree/--interaction-degree combination "
            "matches none"
        )
    n_prompts = int(frame["prompt_id"].nunique())
    if n_prompts < MIN_PROMPTS:
        raise FitError(
            f"column 'prompt_id': {n_prompts} distinct prompt(s); cross-validation holds prompts out "
            "and needs "
            f"at least {MIN_PROMPTS}. Record more prompts."
        )
    x = frame["x_rel_l1"].to_numpy(dtype=float)
    y = frame["y_rel_l1"].to_numpy(dtype=float)
    if not np.max(x) > np.min(x):
        raise FitError(f"column 'x_rel_l1': every row holds {float(x[0]):g}; a fit needs a spread of x values")
    if not np.max(y) > np.min(y):
        raise FitError(f"column 'y_rel_l1': every row holds {float(y[0]):g}; R^2 is undefined without a spread of y")
    for spec in specs:
        if spec.form in TIME_COLUMN and TIME_COLUMN[spec.form] not in frame.columns:
            raise FitError(f"{spec.label}: needs column {TIME_COLUMN[spec.form]!r}")


def fit_frame(
    frame: pd.DataFrame,
    specs: list[CandidateSpec],
    n_folds: int | None = None,
    allow_unsafe: bool = False,
    paired: bool = False,
    fold_models: dict[str, list[FittedModel]] | None = None,
    folds: np.ndarray | None = None,
) -> FitResult:
    """Evaluate every candidate on a validated frame; return the selection part of fit.json (``selected``,
    ``candidates``, ``selection``).

    Only safe candidates are selected unless ``allow_unsafe``; the cv R^2 pick among all candidates is
    recorded beside it (``selection.unconstrained``), so what safety costs is in the file. ``paired``: the
    standard error of the rule is each candidate's paired one against the best (:func:`select`).
    ``fold_models``: a dict filled with each candidate's models fitted per fold (by label, sorted fold order),
    for a caller that scores the same folds again (``calib.fit.decision.decision_scores``). ``folds``: fold per
    frame row, as :func:`group_folds` deals them (dealt here from ``n_folds`` when None)."""
    check_fit_input(frame, specs)
    x = frame["x_rel_l1"].to_numpy(dtype=float)
    y = frame["y_rel_l1"].to_numpy(dtype=float)
    n_prompts = int(frame["prompt_id"].nunique())
    if folds is None:
        folds = group_folds(frame["prompt_id"].to_numpy(), n_folds)
    inputs = {form: time_input(form, frame) for form in {s.form for s in specs}}
    candidates = []
    for spec in specs:
        entry, models = _evaluate(spec, x, y, inputs[spec.form], folds, n_prompts)
        candidates.append(entry)
        if fold_models is not None:
            fold_models[spec.label] = models
    weights = np.array([np.mean(folds == k) for k in np.unique(folds)]) if paired else None
    chosen = select(candidates, allow_unsafe=allow_unsafe, fold_weights=weights)
    unconstrained = candidates[select(candidates, allow_unsafe=True, fold_weights=weights)]
    candidates[chosen] = dataclasses.replace(candidates[chosen], selected=True)
    best = max(c["cv_r2"] for c in candidates if allow_unsafe or is_safe(c))
    n_f = len(np.unique(folds))
    return FitResult(
        selected=candidates[chosen],
        candidates=tuple(candidates),
        selection={
            "criterion": "cv_r2",
            "cv": "leave-one-prompt-out" if n_f == n_prompts else f"{n_f}-fold grouped by prompt_id",
            "n_folds": n_f,
            "rule": "one standard error" + (" of the difference from the best (paired over folds)" if paired else ""),
            "best_cv_r2": best,
            **({"fold_weights": [float(w) for w in weights]} if paired else {}),
            "tie_rule": (
                "fewest parameters among candidates whose cv MSE is within one standard error of the best "
                + ("(the paired standard error of their difference from it, " if paired else "(")
                + f"at least {TIE_TOLERANCE:.0%} of it)"
            ),
            "safety": {
                "rule": "all candidates (--allow-unsafe)" if allow_unsafe else "safe candidates only",
                "n_safe": sum(is_safe(c) for c in candidates),
                "n_candidates": len(candidates),
                "check": "prediction > 0 (x > 0) and d/dx >= 0 on a grid over the region: the x range per part "
                "of the schedule for time-aware forms, the x range for polynomials",
            },
            "unconstrained": {
                "label": unconstrained["label"],
                "cv_r2": unconstrained["cv_r2"],
                "safe": is_safe(unconstrained),
            },
        },
    )


def compare(rescale: RescaleFunction, source: str, frame: pd.DataFrame, selected: Mapping, margin: float) -> dict:
    """Score existing coefficients on all rows against the new fit.

    They were not fitted on these traces, so their in-sample score is an out-of-sample one.
    """
    x = frame["x_rel_l1"].to_numpy(dtype=float)
    y = frame["y_rel_l1"].to_numpy(dtype=float)
    u = time_input(rescale.form, frame) if rescale.is_time_aware else 0.0
    pred = np.asarray(rescale(x, u), dtype=float)
    old_rmse = rmse(y, pred)
    new_rmse = float(selected["rmse"])
    refit = old_rmse > new_rmse * (1.0 + margin)
    lo, hi = rescale.x_range
    return {
        "source": source,
        "form": rescale.form,
        "coefficients": list(rescale.coefficients),
        "time_coefficients": list(rescale.time_coefficients),
        "interaction_coefficients": list(rescale.interaction_coefficients),
        "x_range": [finite_or_none(lo), finite_or_none(hi)],
        "rows_outside_x_range": int(np.count_nonzero((x < lo) | (x > hi))),
        "r2": r2_score(y, pred),
        "rmse": old_rmse,
        "new_cv_rmse": new_rmse,
        "new_cv_r2": float(selected["cv_r2"]),
        "excess": finite_or_none(old_rmse / new_rmse - 1.0) if new_rmse > 0 else None,
        "margin": margin,
        "verdict": VERDICT_REFIT if refit else VERDICT_OK if source.startswith("packaged") else VERDICT_OK_GIVEN,
        "safety": safety.check(rescale),
        "unsafe_intervals": safety.unsafe_intervals(rescale),
    }
