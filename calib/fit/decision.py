"""Score rescale functions by the schedules they make, against an oracle that knows the true change.

R^2 rewards predicting y everywhere; the gate only needs to skip the steps whose true change is small.
So each candidate is replayed (``teacache.gate_batch``) on prompts it was not fitted on, over a grid of
thresholds, and every schedule is charged the true change it leaves uncomputed. Same grouped folds as
``teacache-calib fit`` (``calib.fit.command.group_folds``).

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

import io
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from calib.fit.candidates import FittedModel
from calib.fit.files import PLOT_FILES
from calib.fit.selection import group_folds, time_input
from calib.traces.runs import run_key_columns
from teacache.gate import GateConfig
from teacache.gate_batch import rescaled_increments, skip_masks
from teacache.rescale import RescaleFunction

if TYPE_CHECKING:
    from calib.fit.candidates import CandidateSpec

CHANGE_RESIDUAL = "residual"
CHANGE_OUTPUT = "output"
_CHANGE_COLUMNS = {CHANGE_RESIDUAL: ("residual_rel_l1", "residual_norm"), CHANGE_OUTPUT: ("y_rel_l1", "y_norm")}
CRITERION = "decision_excess"
DEFAULT_THRESHOLDS = 200
PLOT_FILE = PLOT_FILES["decision"]


@dataclass(frozen=True)
class RunTable:
    """Recorded runs as dense arrays ``[runs, steps]``, placed by their step column."""

    keys: list[tuple]  # run key per run (calib.traces.tables.run_key_columns)
    prompt_ids: np.ndarray  # [runs]
    x: np.ndarray  # the gate's signal; NaN where there is none (step 0 always: no anchor at run time)
    change: np.ndarray  # a_j: absolute change of the reused tensor at step j (0 where unknown)
    norm: np.ndarray  # size of the reused tensor at each step (1.0 when the table has no norms)
    sigma: np.ndarray | None
    num_steps: np.ndarray  # [runs]
    change_kind: str  # CHANGE_RESIDUAL or CHANGE_OUTPUT
    norm_column: str | None  # the norm column used, None when there was none

    @property
    def n_runs(self) -> int:
        return len(self.keys)

    def prefix(self) -> np.ndarray:
        """``[runs, steps + 1]``: cumulative change, so a stretch a..b costs (P[b+1] - P[a]) / norm[a-1]."""
        return np.concatenate([np.zeros((self.n_runs, 1)), np.cumsum(self.change, axis=1)], axis=1)

    def subset(self, runs: np.ndarray) -> RunTable:
        return RunTable(
            keys=[self.keys[i] for i in np.arange(self.n_runs)[runs]],
            prompt_ids=self.prompt_ids[runs],
            x=self.x[runs],
            change=self.change[runs],
            norm=self.norm[runs],
            sigma=None if self.sigma is None else self.sigma[runs],
            num_steps=self.num_steps[runs],
            change_kind=self.change_kind,
            norm_column=self.norm_column,
        )


def pack_runs(frame: pd.DataFrame, change: str | None = None) -> tuple[RunTable, np.ndarray]:
    """Dense per-run arrays from a validated trace frame, and the run index of every frame row.

    ``change``: CHANGE_RESIDUAL, CHANGE_OUTPUT or None (residual when the table records it on every row).
    num_steps comes from its column, else max(step) + 1 per run.
    """
    kind = change or (CHANGE_RESIDUAL if _usable(frame, "residual_rel_l1") else CHANGE_OUTPUT)
    if kind not in _CHANGE_COLUMNS:
        raise ValueError(f"change: expected {CHANGE_RESIDUAL!r} or {CHANGE_OUTPUT!r}, got {change!r}")
    rel_column, norm_column = _CHANGE_COLUMNS[kind]
    if not _usable(frame, rel_column):
        raise ValueError(f"change {kind!r}: needs column {rel_column!r} with finite values >= 0 on every row")
    key = run_key_columns(frame)
    run_of_row = frame.groupby(key, sort=False, dropna=False).ngroup().to_numpy()
    n_runs = int(run_of_row.max()) + 1 if len(frame) else 0
    first_row = np.unique(run_of_row, return_index=True)[1]
    keys = [tuple(row) for row in frame[key].iloc[first_row].itertuples(index=False)]
    steps = frame["step"].to_numpy(dtype=np.int64)
    if n_runs == 0 or steps.min() < 0:
        raise ValueError("frame: expected rows with steps >= 0")
    counts = "num_steps" in frame.columns
    num_steps = np.zeros(n_runs, dtype=np.int64)
    np.maximum.at(num_steps, run_of_row, frame["num_steps"].to_numpy(dtype=np.int64) if counts else steps + 1)
    width = int(max(num_steps.max(), steps.max() + 1))
    if np.unique(run_of_row * width + steps).size != len(frame):
        raise ValueError(f"frame: two rows share a step within one run (run key: {'+'.join(key)})")

    def dense(values: np.ndarray, fill: float) -> np.ndarray:
        out = np.full((n_runs, width), fill)
        out[run_of_row, steps] = values
        return out

    x = dense(frame["x_rel_l1"].to_numpy(dtype=float), np.nan)
    x[:, 0] = np.nan  # no cached residual before step 0: the gate always computes it
    rel = dense(frame[rel_column].to_numpy(dtype=float), np.nan)
    use_norms = _usable(frame, norm_column) and bool(np.all(frame[norm_column].to_numpy(dtype=float) > 0))
    if use_norms:
        norm = _fill_along_steps(dense(frame[norm_column].to_numpy(dtype=float), np.nan))
    else:
        norm = np.ones((n_runs, width))
    previous = np.concatenate([norm[:, :1], norm[:, :-1]], axis=1)
    change_values = np.where(np.isfinite(rel), rel * previous, 0.0)
    sigma = dense(frame["sigma"].to_numpy(dtype=float), np.nan) if "sigma" in frame.columns else None
    prompt_ids = frame["prompt_id"].astype(str).to_numpy()[first_row]
    table = RunTable(
        keys=keys,
        prompt_ids=prompt_ids,
        x=x,
        change=change_values,
        norm=norm,
        sigma=sigma,
        num_steps=num_steps,
        change_kind=kind,
        norm_column=norm_column if use_norms else None,
    )
    return table, run_of_row


def _usable(frame: pd.DataFrame, column: str) -> bool:
    if column not in frame.columns:
        return False
    values = pd.to_numeric(frame[column], errors="coerce").to_numpy(dtype=float)
    return bool(np.all(np.isfinite(values) & (values >= 0)))


def _fill_along_steps(values: np.ndarray) -> np.ndarray:
    """Missing entries take the next recorded value of their run, else the previous one."""
    filled = pd.DataFrame(values).T.bfill().ffill().T.to_numpy()
    return np.where(np.isfinite(filled), filled, 1.0)


# ------------------------------------------------------------------------------------- schedule costs


def skippable(table: RunTable, skip_first_n_steps: int, skip_last_n_steps: int) -> np.ndarray:
    """bool ``[runs, steps]``: steps any schedule under these rules may skip (forced ones excluded)."""
    steps = np.arange(table.x.shape[1])
    active = (steps >= max(skip_first_n_steps, 1)) & (steps < table.num_steps[:, None] - skip_last_n_steps)
    return active & np.isfinite(table.x)


def schedule_costs(masks: np.ndarray, table: RunTable) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(skipped, uncomputed, worst), each ``[..., runs]``, for bool masks ``[..., runs, steps]``."""
    masks = np.asarray(masks, dtype=bool)
    if masks.shape[-2:] != table.x.shape:
        raise ValueError(f"masks: expected trailing shape {table.x.shape} (runs, steps), got {masks.shape}")
    if masks[..., 0].any():
        raise ValueError("masks: step 0 is skipped somewhere; nothing is cached before step 0")
    n_runs, width = table.x.shape
    index = np.arange(width)
    cached = np.maximum.accumulate(np.where(masks, -1, index), axis=-1)  # last computed step
    ends = masks & ~np.concatenate([masks[..., 1:], np.zeros_like(masks[..., :1])], axis=-1)
    prefix = table.prefix()
    row = np.arange(n_runs)[:, None]
    start = prefix.ravel()[row * (width + 1) + cached + 1]  # P[c + 1], per run
    with np.errstate(invalid="ignore", divide="ignore"):
        totals = (prefix[:, 1:] - start) / table.norm.ravel()[row * width + cached]  # stretch value at its end
    totals = np.where(ends, totals, 0.0)
    uncomputed = np.cumsum(totals, axis=-1)[..., -1]  # sequential: the oracle adds in the same order
    worst = totals.max(axis=-1)
    return np.count_nonzero(masks, axis=-1), uncomputed, worst


# ---------------------------------------------------------------------------------------------- oracle


def oracle_per_run(
    table: RunTable, skip_first_n_steps: int, skip_last_n_steps: int, max_consecutive_skips: int
) -> tuple[np.ndarray, np.ndarray]:
    """(least uncomputed, least worst) over all schedules with k skips, ``[runs, steps + 1]`` (inf: none).

    Dynamic programming over positions: from a state "steps < p decided, step p-1 computed" either
    compute step p or skip a stretch p..p+L-1 (L <= the cap, all skippable) and compute the step after it.
    """
    allowed = skippable(table, skip_first_n_steps, skip_last_n_steps)
    prefix = table.prefix()
    return (
        _oracle(allowed, prefix, table.norm, max_consecutive_skips, np.add),
        _oracle(allowed, prefix, table.norm, max_consecutive_skips, np.maximum),
    )


def _oracle(allowed, prefix, norm, cap: int, combine: Callable) -> np.ndarray:
    n_runs, width = allowed.shape
    best = np.full((width + 1, n_runs, width + 1), np.inf)  # [decided steps, run, skips]
    best[0, :, 0] = 0.0
    for p in range(width):
        np.minimum(best[p + 1], best[p], out=best[p + 1])  # compute step p
        if p == 0:
            continue
        ok = np.ones(n_runs, dtype=bool)
        for length in range(1, cap + 1):
            end = p + length - 1
            if end >= width:
                break
            ok &= allowed[:, end]
            if not ok.any():
                break
            with np.errstate(invalid="ignore", divide="ignore"):
                cost = np.where(ok, (prefix[:, end + 1] - prefix[:, p]) / norm[:, p - 1], np.inf)
            target = best[min(end + 2, width)]  # the step after the stretch is computed
            np.minimum(
                target[:, length:], combine(best[p][:, : width + 1 - length], cost[:, None]), out=target[:, length:]
            )
    return best[width]


def pooled_oracle(per_run: np.ndarray) -> np.ndarray:
    """Least total over runs for every total number of skips (min-plus convolution, in run order)."""
    if per_run.shape[0] == 0:
        return np.zeros(1)
    total = per_run[0].copy()
    for row in per_run[1:]:
        merged = np.full(total.size + row.size - 1, np.inf)
        for k in np.flatnonzero(np.isfinite(row)):
            np.minimum(merged[k : k + total.size], total + row[k], out=merged[k : k + total.size])
        total = merged
    finite = np.flatnonzero(np.isfinite(total))
    return total[: finite[-1] + 1] if finite.size else total[:1]


def pooled_sum(values: np.ndarray) -> np.ndarray:
    """Sum over the last (runs) axis, sequentially in run order, as :func:`pooled_oracle` adds."""
    return np.cumsum(values, axis=-1)[..., -1] if values.shape[-1] else np.zeros(values.shape[:-1])


# --------------------------------------------------------------------------------------------- scoring


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
    skip_first_n_steps: int = 1,
    skip_last_n_steps: int = 1,
    max_consecutive_skips: int = 8,
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
        raise ValueError("candidates: expected at least one rescale function")
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
        raise ValueError(f"skip_range: expected 0 <= low < high <= 1, got {skip_range!r}")
    return lo_frac, hi_frac


def _run_folds(table: RunTable, run_fold: np.ndarray | None) -> np.ndarray:
    """The fold of every run (all in fold 0 when None)."""
    folds = np.zeros(table.n_runs, dtype=int) if run_fold is None else np.asarray(run_fold)
    if folds.shape != (table.n_runs,):
        raise ValueError(f"run_fold: expected one fold per run ({table.n_runs}), got shape {folds.shape}")
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
        raise ValueError(f"candidates[{label!r}]: expected a RescaleFunction or one per fold ({fold_ids.size})")
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
    skip_first_n_steps: int = 1,
    skip_last_n_steps: int = 1,
    max_consecutive_skips: int = 8,
    n_thresholds: int = DEFAULT_THRESHOLDS,
    skip_range: tuple[float, float] = (0.0, 1.0),
) -> dict:
    """Decision scores of ``teacache-calib fit`` candidates: each fitted per fold, replayed on its held-out runs.

    ``folds``: fold per frame row, as ``calib.fit.command.group_folds`` deals them (computed when None);
    ``compare``: extra rescale functions scored as they are on every run (e.g. packaged coefficients).
    """
    if folds is None:
        folds = group_folds(frame["prompt_id"].to_numpy(), n_folds)
    folds = np.asarray(folds)
    if folds.shape != (len(frame),):
        raise ValueError(f"folds: expected one fold per frame row ({len(frame)}), got shape {folds.shape}")
    table, run_of_row = pack_runs(frame, change)
    run_fold = np.zeros(table.n_runs, dtype=folds.dtype)
    run_fold[run_of_row] = folds
    if np.any(run_fold[run_of_row] != folds):
        raise ValueError("folds: the rows of one run fall in different folds; deal folds by prompt_id")
    x = frame["x_rel_l1"].to_numpy(dtype=float)
    y = frame["y_rel_l1"].to_numpy(dtype=float)
    fold_ids = np.unique(run_fold)
    candidates: dict[str, RescaleFunction | list[RescaleFunction]] = {}
    for spec in specs:
        u = time_input(spec.form, frame)
        fitted = []
        for f in fold_ids:
            train = folds != f
            model = FittedModel.fit(spec, x[train], y[train], None if u is None else u[train])
            fitted.append(model.to_rescale())
        candidates[spec.label] = fitted
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


# ------------------------------------------------------------------------------------------------ plot


def decision_summary(result: dict) -> dict:
    """The result without its curves: per candidate the scores only (what a fit.json table needs)."""
    keep = ("label", "decision_excess", "decision_excess_worst", "max_skipped", "selected")
    summary = {k: v for k, v in result.items() if k not in ("candidates", "oracle")}
    summary["candidates"] = [{k: c[k] for k in keep} for c in result["candidates"]]
    return summary


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
):
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
