"""Thresholds of one sweep that gave one schedule, and why: printed by ``teacache-bench sweep`` and ``report``.

Two thresholds whose runs skipped the same steps on every pair measure the same thing twice: their rows differ
only by timing noise, so a curve over them says nothing. Two causes make it common: every step computed (the
thresholds at or below the rescale floor, or each gated step's change alone reaching them), and the
consecutive-skip cap (``max_consecutive_skips``): once each run skips as many steps in a row as it allows, a
higher threshold skips no more. A pure function of the sweep's tables.
"""

from __future__ import annotations

import json
import math

import pandas as pd

from teacache.gate import (
    DEFAULT_MAX_CONSECUTIVE_SKIPS,
    DEFAULT_SKIP_FIRST,
    REASON_ABOVE_RANGE,
    REASON_CAP,
    REASON_OUTSIDE_REGION,
    REASON_THRESHOLD,
)

RANGE_REASONS = (REASON_ABOVE_RANGE, REASON_OUTSIDE_REGION)


def _schedule(rows: pd.DataFrame) -> tuple:
    """The steps each pair skipped, as one comparable value."""
    return tuple(sorted((str(r.pair_id), tuple(json.loads(r.skipped_steps or "[]"))) for r in rows.itertuples()))


def _thresholds(values) -> str:
    return ", ".join(f"{t:g}" for t in values)


def _forcing_reasons(decisions: pd.DataFrame | None, run_ids) -> set[str] | None:
    """Why the gated steps (neither forced first nor last) of these runs were computed; None without decisions."""
    if decisions is None or decisions.empty:
        return None
    rows = decisions[decisions["run_id"].isin(list(run_ids)) & decisions["compute"].astype(bool)]
    return set(rows["reason"]) & {REASON_THRESHOLD, REASON_CAP, *RANGE_REASONS}


def _cause(group: list[float], runs: pd.DataFrame, decisions, provenance: dict) -> str:
    lowest = runs[runs["threshold"] == group[0]]
    cap = int(provenance.get("max_consecutive_skips") or DEFAULT_MAX_CONSECUTIVE_SKIPS)
    if int(lowest["skipped"].sum()) == 0:
        floor = provenance.get("rescale_floor")
        positive = [t for t in group if t > 0]
        if floor is not None and math.isfinite(float(floor)) and all(t <= float(floor) for t in positive):
            return (f"every step computed: each gated step adds at least the rescale floor {float(floor):.4g}, so no "
                    "threshold at or below it ever skips")  # fmt: skip
        shown = f" (the rescale floor is {float(floor):.4g})" if floor is not None else ""
        return f"every step computed: each gated step's change alone reaches these thresholds{shown}"
    reasons = _forcing_reasons(decisions, lowest["run_id"])
    if reasons is None:  # no decision log: what the runs' streaks and counts show
        window = lowest["num_steps"] - int(provenance.get("skip_first_n_steps") or DEFAULT_SKIP_FIRST) - 1
        if (lowest["skipped"] >= window).all():
            reasons = set()
        else:
            reasons = {REASON_CAP} if int(lowest["longest_skip_streak"].max()) >= cap else {REASON_THRESHOLD}
    if not reasons:
        return ("every step the gate may skip is skipped (the first and last steps are always computed), so a "
                "higher threshold skips no more")  # fmt: skip
    if REASON_THRESHOLD not in reasons and REASON_CAP in reasons:
        also = " and signals above the calibrated x range" if reasons & set(RANGE_REASONS) else ""
        return (f"the consecutive-skip cap: after max_consecutive_skips={cap} skips in a row a step is computed"
                f"{also}, so from {group[0]:g} on a higher threshold skips no more")  # fmt: skip
    if REASON_THRESHOLD not in reasons:
        return "every gated step computed is above the calibrated x range, where the gate never skips"
    return "each run's accumulated change crosses them at the same steps: they are closer than its steps"


def same_schedule_warnings(runs: pd.DataFrame, decisions: pd.DataFrame | None, provenance: dict) -> list[str]:
    """One line per group of thresholds (of one rescale function) whose TeaCache runs skipped the same steps on
    every pair, naming the cause; [] when every threshold gave its own schedule."""
    tc = runs[(runs["kind"] == "teacache") & runs["threshold"].notna()]
    by_rescale = tc.groupby(tc["rescale"].fillna("")) if "rescale" in tc.columns else [("", tc)]
    several = "rescale" in tc.columns and tc["rescale"].nunique() > 1
    lines = []
    for rescale, rows in by_rescale:
        groups: dict[tuple, list[float]] = {}
        for threshold, at in rows.groupby("threshold"):
            groups.setdefault(_schedule(at), []).append(float(threshold))
        for group in groups.values():
            if len(group) < 2:
                continue
            at = rows[rows["threshold"] == group[0]]
            skipped = f"{int(at['skipped'].median())} of {int(at['num_steps'].median())} steps skipped, median of pairs"
            which = f" of {rescale}" if several and rescale else ""
            cause = _cause(sorted(group), rows, decisions, provenance)
            if 0.0 in group:  # 0 turns TeaCache off: the others are the ones that cannot skip
                others = [t for t in sorted(group) if t > 0]
                named = f"threshold{'s' if len(others) > 1 else ''} {_thresholds(others)}{which}"
                lines.append(f"{named} skip{'' if len(others) > 1 else 's'} nothing on every pair, like 0 (TeaCache "
                             f"off): {cause}; choose thresholds above it")  # fmt: skip
                continue
            lines.append(
                f"thresholds {_thresholds(sorted(group))}{which} give the same schedule on every pair ({skipped}): "
                f"{cause}; choose thresholds that give distinct schedules"
            )
    return lines
