"""Score rescale functions by the schedules they make, against an oracle that knows the true change.

R^2 rewards predicting y everywhere; the gate only needs to skip the steps whose true change is small.
So each candidate is replayed (``teacache.gate_batch``) on prompts it was not fitted on, over a grid of
thresholds, and every schedule is charged the true change it leaves uncomputed. Same grouped folds as
``teacache-calib fit`` (``calib.fit.selection.group_folds``).

What is charged, and why. On a skipped step the proxy adds the residual cached at the last computed
step c (``body_out - embedded``) to a freshly embedded input: the embedding is current, the residual
is not. What a skip leaves uncomputed is therefore the residual's drift since c. Per step j the recorded
trace holds the residual's relative change against step j-1 (``residual_rel_l1``) and its size
(``residual_norm``), so ``a_j = residual_rel_l1_j * residual_norm_{j-1}`` is the absolute change of the
reused tensor. A skipped stretch c+1..b leaves ``D = (a_{c+1} + ... + a_b) / residual_norm_c``: by the
triangle inequality an upper bound of ``mean|r_b - r_c| / mean|r_c|``, the relative error of the
residual the cache holds when the stretch ends, the same accumulate-until-recompute picture the
gate's own threshold uses. Per schedule:

- ``uncomputed``: the sum of D over its stretches (the change over all skipped steps, each stretch in
  units of the residual it reused);
- ``worst``: the largest single D (the longest drift the cache is trusted for).

Tables without residual columns (other tools' traces) fall back to the output's change ``y_rel_l1``
(with ``y_norm`` when present); the result says which (``change``). A step without a row (step 0,
which the trace reader drops) takes the next recorded norm of its run.

The oracle knows the change and obeys the same rules (first/last steps computed, at most
``max_consecutive_skips`` in a row, steps without a finite signal computed): for every number of
skipped steps it finds the schedule of least ``uncomputed`` (or least ``worst``), exactly, by dynamic
programming per run, then the best split of a total over runs. Every candidate schedule is one of the
oracle's options, so the oracle's curve lies below every candidate's (exactly, also in floating point:
both sum the same stretch values in the same order). A candidate's score is the area between its curve
and the oracle's over a common range of skipped steps, relative to the oracle's area
(``decision_excess``: 0 is oracle-perfect, lower is better).
Pure numpy/pandas: no MLX, no mflux.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from calib.fit.candidates import FittedModel
from calib.fit.decision_oracle import oracle_per_run, pooled_oracle, pooled_sum, schedule_costs, skippable
from calib.fit.decision_runs import RunTable, pack_runs
from calib.fit.errors import FitError
from calib.fit.selection import group_folds, time_input
from teacache.gate import DEFAULT_MAX_CONSECUTIVE_SKIPS, DEFAULT_SKIP_FIRST, DEFAULT_SKIP_LAST, GateConfig
from teacache.gate_batch import rescaled_increments, skip_masks
from teacache.rescale import RescaleFunction

if TYPE_CHECKING:
    from calib.fit.candidates import CandidateSpec

CRITERION = "decision_excess"
DEFAULT_THRESHOLDS = 200


def threshold_grid(increment: np.ndarray, max_consecutive_skips: int, n: int = DEFAULT_THRESHOLDS) -> np.ndarray:
    """0, then geometric from the smallest positive increment to past the largest sum a stretch can hold.

    Above that top value every gate skips up to the cap wherever it may, so the grid spans the whole curve.
    """
    positive = increment[increment > 0]
    if positive.size == 0:
        return np.array([0.0, 1.0])
    low = float(positive.min())
    window = np.cumsum(np.concatenate([np.zeros((increment.shape[0], 1)), increment], axis=1), axis=1)
    cap = min(max_consecutive_skips, increment.shape[1])
    high = max(float(np.max(window[:, cap:] - window[:, :-cap])), low) * 1.01
    return np.concatenate([[0.0], np.geomspace(low, high, max(n - 1, 1))])


def score_rescales(
    table: RunTable,
    candidates: Mapping[str, RescaleFunction | Sequence[RescaleFunction]],
    run_fold: np.ndarray | None = None,
    *,
    skip_first_n_steps: int = DEFAULT_SKIP_FIRST,
    skip_last_n_steps: int = DEFAULT_SKIP_LAST,
    max_consecutive_skips: int = DEFAULT_MAX_CONSECUTIVE_SKIPS,
    n_thresholds: int = DEFAULT_THRESHOLDS,
    skip_range: tuple[float, float] = (0.0, 1.0),
) -> dict:
    """Decision scores of rescale functions on recorded runs; JSON-ready.

    ``candidates[label]`` is one rescale function for every run (coefficients not fitted on these
    traces) or one per fold: runs with ``run_fold == f`` are replayed with ``candidates[label][f]``.
    ``skip_range``: the part of the skippable steps (as fractions) over which areas are compared; it is
    narrowed to what every candidate reaches. Curves hold one point per threshold: skipped steps,
    uncomputed and worst change, each the total over all runs; the oracle's are indexed by skipped steps.
    """
    GateConfig(0.0, RescaleFunction((0.0,)), skip_first_n_steps, skip_last_n_steps, max_consecutive_skips)
    if not candidates:
        raise FitError("candidates: expected at least one rescale function")
    lo_frac, hi_frac = _skip_fractions(skip_range)
    rules = {
        "skip_first_n_steps": skip_first_n_steps,
        "skip_last_n_steps": skip_last_n_steps,
        "max_consecutive_skips": max_consecutive_skips,
    }
    folds = _run_folds(table, run_fold)
    fold_ids = np.unique(folds)
    sum_per_run, worst_per_run = oracle_per_run(table, skip_first_n_steps, skip_last_n_steps, max_consecutive_skips)
    oracle_sum, oracle_worst = pooled_oracle(sum_per_run), pooled_oracle(worst_per_run)
    n_skippable = int(skippable(table, skip_first_n_steps, skip_last_n_steps).sum())
    curves = {
        label: _replayed_curve(table, _per_fold(label, fns, fold_ids), folds, rules, n_thresholds)
        for label, fns in candidates.items()
    }
    reach = min(int(c[1].max()) for c in curves.values())
    k_lo = math.ceil(lo_frac * n_skippable)
    k_hi = min(math.floor(hi_frac * n_skippable), reach)
    entries = _scored_entries(curves, oracle_sum, oracle_worst, k_lo, k_hi)
    selected = next((e["label"] for e in entries if e["selected"]), None)
    return {
        "criterion": CRITERION,
        "change": table.change_kind,
        "norm_column": table.norm_column,
        "rules": rules,
        "n_runs": table.n_runs,
        "n_skippable": n_skippable,
        "n_folds": int(fold_ids.size),
        "skip_range": [k_lo / n_skippable if n_skippable else 0.0, k_hi / n_skippable if n_skippable else 0.0],
        "skipped_range": [k_lo, k_hi],
        "oracle": {"uncomputed": _finite_list(oracle_sum), "worst": _finite_list(oracle_worst)},
        "candidates": entries,
        "selected": selected,
    }


def _skip_fractions(skip_range: tuple[float, float]) -> tuple[float, float]:
    lo_frac, hi_frac = (float(v) for v in skip_range)
    if not 0.0 <= lo_frac < hi_frac <= 1.0:
        raise FitError(f"skip_range: expected 0 <= low < high <= 1, got {skip_range!r}")
    return lo_frac, hi_frac


def _run_folds(table: RunTable, run_fold: np.ndarray | None) -> np.ndarray:
    """The fold of every run (all in fold 0 when None)."""
    folds = np.zeros(table.n_runs, dtype=int) if run_fold is None else np.asarray(run_fold)
    if folds.shape != (table.n_runs,):
        raise FitError(f"run_fold: expected one fold per run ({table.n_runs}), got shape {folds.shape}")
    return folds


def _replayed_curve(table: RunTable, per_fold: dict, folds: np.ndarray, rules: dict, n_thresholds: int) -> tuple:
    """One candidate replayed over a grid of thresholds: (thresholds, skipped, uncomputed, worst), one point
    per threshold, each the total over all runs."""
    first, last, cap = rules["skip_first_n_steps"], rules["skip_last_n_steps"], rules["max_consecutive_skips"]
    increment = np.zeros(table.x.shape)
    gated = np.zeros(table.x.shape, dtype=bool)
    for f in np.unique(folds):  # each run's increments come from the function that did not see its prompt
        rows = folds == f
        part = table.subset(rows)
        increment[rows], gated[rows] = rescaled_increments(part.x, per_fold[f], part.num_steps, part.sigma, first, last)
    thresholds = threshold_grid(increment, cap, n_thresholds)
    masks = skip_masks(increment, gated, thresholds, cap)
    skipped, uncomputed, worst = schedule_costs(masks, table)
    return thresholds, skipped.sum(axis=1), pooled_sum(uncomputed), pooled_sum(worst)


def _scored_entries(curves: dict, oracle_sum: np.ndarray, oracle_worst: np.ndarray, k_lo: int, k_hi: int) -> list:
    """Each candidate's curves and scores, JSON-ready; the one of least decision excess is marked selected."""
    entries = []
    for label, (thresholds, skipped, uncomputed, worst) in curves.items():
        entries.append({
            "label": label,
            "decision_excess": _excess(skipped, uncomputed, oracle_sum, k_lo, k_hi),
            "decision_excess_worst": _excess(skipped, worst, oracle_worst, k_lo, k_hi),
            "thresholds": thresholds.tolist(),
            "skipped": skipped.tolist(),
            "uncomputed": uncomputed.tolist(),
            "worst": worst.tolist(),
            "max_skipped": int(skipped.max()),
        })  # fmt: skip
    scored = [i for i, e in enumerate(entries) if e["decision_excess"] is not None]
    selected = min(scored, key=lambda i: (entries[i]["decision_excess"], i)) if scored else None
    for i, e in enumerate(entries):
        e["selected"] = i == selected
    return entries


def _per_fold(label: str, fns, fold_ids: np.ndarray) -> dict:
    if isinstance(fns, RescaleFunction):
        return {f: fns for f in fold_ids}
    fns = list(fns)
    if len(fns) != fold_ids.size or not all(isinstance(fn, RescaleFunction) for fn in fns):
        raise FitError(f"candidates[{label!r}]: expected a RescaleFunction or one per fold ({fold_ids.size})")
    return dict(zip(fold_ids.tolist(), fns, strict=True))


def _finite_list(values: np.ndarray) -> list:
    return [float(v) if math.isfinite(v) else None for v in values]


def _excess(skipped: np.ndarray, cost: np.ndarray, oracle: np.ndarray, k_lo: int, k_hi: int) -> float | None:
    """Area between the candidate's curve (cost against skipped steps) and the oracle's, over k_lo..k_hi,
    relative to the oracle's area. Thresholds that give the same number of skips are averaged."""
    if k_hi <= k_lo:
        return None
    ks, inverse = np.unique(skipped, return_inverse=True)
    mean_cost = np.bincount(inverse, weights=cost) / np.bincount(inverse)
    grid = np.arange(k_lo, k_hi + 1)
    theirs = np.interp(grid, ks, mean_cost)
    best = oracle[grid]
    base = float(np.trapezoid(best, grid))
    extra = float(np.trapezoid(theirs, grid)) - base
    if base <= 0.0:
        return 0.0 if extra <= 0.0 else None
    return extra / base


# -------------------------------------------------------------------------------- candidates of a fit


def decision_scores(
    frame: pd.DataFrame,
    specs: Sequence[CandidateSpec],
    folds: np.ndarray | None = None,
    *,
    n_folds: int | None = None,
    change: str | None = None,
    compare: Mapping[str, RescaleFunction] | None = None,
    skip_first_n_steps: int = DEFAULT_SKIP_FIRST,
    skip_last_n_steps: int = DEFAULT_SKIP_LAST,
    max_consecutive_skips: int = DEFAULT_MAX_CONSECUTIVE_SKIPS,
    n_thresholds: int = DEFAULT_THRESHOLDS,
    skip_range: tuple[float, float] = (0.0, 1.0),
    fold_models: Mapping[str, Sequence[FittedModel]] | None = None,
) -> dict:
    """Decision scores of ``teacache-calib fit`` candidates: each fitted per fold, replayed on its held-out runs.

    ``folds``: fold per frame row, as ``calib.fit.selection.group_folds`` deals them (computed when None);
    ``compare``: extra rescale functions scored as they are on every run (e.g. packaged coefficients);
    ``fold_models``: models already fitted per fold on these folds and rows, by label in sorted fold order
    (what ``calib.fit.selection.fit_frame`` fills in), used instead of fitting them again.
    """
    if folds is None:
        folds = group_folds(frame["prompt_id"].to_numpy(), n_folds)
    folds = np.asarray(folds)
    if folds.shape != (len(frame),):
        raise FitError(f"folds: expected one fold per frame row ({len(frame)}), got shape {folds.shape}")
    table, run_of_row = pack_runs(frame, change)
    run_fold = np.zeros(table.n_runs, dtype=folds.dtype)
    run_fold[run_of_row] = folds
    if np.any(run_fold[run_of_row] != folds):
        raise FitError("folds: the rows of one run fall in different folds; deal folds by prompt_id")
    x = frame["x_rel_l1"].to_numpy(dtype=float)
    y = frame["y_rel_l1"].to_numpy(dtype=float)
    fold_ids = np.unique(run_fold)
    candidates: dict[str, RescaleFunction | list[RescaleFunction]] = {}
    for spec in specs:
        known = (fold_models or {}).get(spec.label)
        if known is not None and len(known) != fold_ids.size:
            raise FitError(f"fold_models[{spec.label!r}]: expected one model per fold ({fold_ids.size})")
        if known is None:
            u = time_input(spec.form, frame)
            trains = [folds != f for f in fold_ids]
            known = [FittedModel.fit(spec, x[t], y[t], None if u is None else u[t]) for t in trains]
        candidates[spec.label] = [model.function for model in known]
    candidates.update(compare or {})
    return score_rescales(
        table,
        candidates,
        run_fold,
        skip_first_n_steps=skip_first_n_steps,
        skip_last_n_steps=skip_last_n_steps,
        max_consecutive_skips=max_consecutive_skips,
        n_thresholds=n_thresholds,
        skip_range=skip_range,
    )


# ---------------------------------------------------------------------------------------------- summary


def decision_summary(result: dict) -> dict:
    """The result without its curves: per candidate the scores only (what a fit.json table needs)."""
    keep = ("label", "decision_excess", "decision_excess_worst", "max_skipped", "selected")
    summary = {k: v for k, v in result.items() if k not in ("candidates", "oracle")}
    summary["candidates"] = [{k: c[k] for k in keep} for c in result["candidates"]]
    return summary
