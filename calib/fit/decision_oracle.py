"""What a skip schedule leaves uncomputed on recorded runs, and the oracle: for every number of skipped steps, the
least any schedule under the gate's rules can leave, found exactly by dynamic programming per run, then pooled
over runs (:mod:`calib.fit.decision` says what is charged and why). Pure numpy."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from calib.fit.decision_runs import RunTable
from calib.fit.errors import FitError


def skippable(table: RunTable, skip_first_n_steps: int, skip_last_n_steps: int) -> np.ndarray:
    """bool ``[runs, steps]``: steps any schedule under these rules may skip (forced ones excluded)."""
    steps = np.arange(table.x.shape[1])
    active = (steps >= max(skip_first_n_steps, 1)) & (steps < table.num_steps[:, None] - skip_last_n_steps)
    return active & np.isfinite(table.x)


def schedule_costs(masks: np.ndarray, table: RunTable) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(skipped, uncomputed, worst), each ``[..., runs]``, for bool masks ``[..., runs, steps]``."""
    masks = np.asarray(masks, dtype=bool)
    if masks.shape[-2:] != table.x.shape:
        raise FitError(f"masks: expected trailing shape {table.x.shape} (runs, steps), got {masks.shape}")
    if masks[..., 0].any():
        raise FitError("masks: step 0 is skipped somewhere; nothing is cached before step 0")
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
