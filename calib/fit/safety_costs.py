"""What safe selection costs: each way of keeping unsafe rescale functions out, scored on trace tables.

``teacache-calib safety-costs TRACES[@MIN_STEP] ... --out costs.md`` fits every default candidate twice
(monotone mode as it is, non-decreasing and positive on the region, and as it was before positivity, only
non-decreasing) and reports, per table, the candidate each policy selects with its cv R^2, decision excess
(held-out prompts, lower is better) and safety:

- ``unconstrained``: cv R^2 over all candidates, monotone without positivity (the selection before safety);
- ``refuse unsafe``: the same candidates, unsafe ones refused;
- ``refuse unsafe + positive monotone``: the default now;
- ``monotone only``: only the monotone (positive) candidates.

and the decision score's pick among all candidates and among the safe ones; for the default pick also its
decision excess with regions of 1, 3, 5 and 10 parts of the schedule (what the region costs). ``@MIN_STEP`` is the fit's
--min-step for that table (default 1).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import sys
from pathlib import Path

from calib.fit import candidates as candidates_module
from calib.fit.candidates import MODE_MONOTONE, candidate_specs
from calib.fit.decision import decision_scores
from calib.fit.result import Candidate
from calib.fit.selection import fit_frame, group_folds, is_safe, select
from calib.run.command import command
from calib.traces.reader import load_traces
from teacache.errors import InputError
from teacache.io import write_text
from teacache.rescale import REGION_BINS, Region

PROG = "teacache-calib safety-costs"
POLICIES = ("unconstrained", "refuse unsafe", "refuse unsafe + positive monotone", "monotone only")


@contextlib.contextmanager
def monotone_without_positivity():
    """The monotone mode as it was before positivity: non-decreasing only (for the comparison)."""
    saved = candidates_module.prediction_floor
    candidates_module.prediction_floor = lambda y: None
    try:
        yield
    finally:
        candidates_module.prediction_floor = saved


BIN_COUNTS = (1, 3, 5, 10)  # parts of the schedule the region is cut into, for the default pick's comparison


@contextlib.contextmanager
def region_bins(bins: int):
    """Time-aware fits with their region cut into ``bins`` parts of the schedule."""
    saved = candidates_module.Region

    class Binned:
        @staticmethod
        def from_data(x, u):
            return Region.from_data(x, u, bins=bins)

    candidates_module.Region = Binned
    try:
        yield
    finally:
        candidates_module.Region = saved


def excess_by_bins(frame, label: str, min_step: int) -> str:
    """Decision excess of the candidate ``label`` fitted per fold with regions of BIN_COUNTS parts ('' when
    it is not time-aware)."""
    spec = next(s for s in candidate_specs("num_steps" in frame.columns, "sigma" in frame.columns) if s.label == label)
    if not spec.is_time_aware:
        return ""
    folds = group_folds(frame["prompt_id"].to_numpy())
    found = []
    for bins in BIN_COUNTS:
        with region_bins(bins):
            scores = decision_scores(frame, [spec], folds, skip_first_n_steps=min_step)
        found.append(f"{scores['candidates'][0]['decision_excess']:.4f}")
    return " / ".join(found)


def scored_candidates(frame, min_step: int) -> list[Candidate]:
    """Every default candidate of ``frame`` with cv R^2, safety and decision excess."""
    specs = candidate_specs("num_steps" in frame.columns, "sigma" in frame.columns)
    result = fit_frame(frame, specs, allow_unsafe=True)
    folds = group_folds(frame["prompt_id"].to_numpy())
    scores = decision_scores(frame, specs, folds, skip_first_n_steps=min_step)
    excess = {c["label"]: c["decision_excess"] for c in scores["candidates"]}
    return [dataclasses.replace(c, decision_excess=excess[c.label]) for c in result.candidates]


def policy_rows(name: str, before: list[Candidate], now: list[Candidate]) -> list[dict]:
    """One row per policy and for the decision score's picks."""

    def pick(cands: list[Candidate], allow_unsafe: bool, only_monotone: bool = False) -> Candidate:
        pool = [c for c in cands if not only_monotone or c["mode"] == MODE_MONOTONE]
        return pool[select(pool, allow_unsafe=allow_unsafe)]

    def by_decision(cands: list[Candidate], safe_only: bool) -> Candidate:
        pool = [c for c in cands if c["decision_excess"] is not None and (not safe_only or is_safe(c))]
        return min(pool, key=lambda c: c["decision_excess"])

    picks = [
        ("unconstrained", pick(before, True), before),
        ("refuse unsafe", pick(before, False), before),
        ("refuse unsafe + positive monotone", pick(now, False), now),
        ("monotone only", pick(now, False, only_monotone=True), now),
        ("decision pick, all", by_decision(before, False), before),
        ("decision pick, safe (now)", by_decision(now, True), now),
    ]
    return [
        {
            "traces": name,
            "policy": policy,
            "selected": c["label"],
            "cv_r2": c["cv_r2"],
            "decision_excess": c["decision_excess"],
            "safety": "safe" if is_safe(c) else "unsafe",
            "n_safe": f"{sum(map(is_safe, pool))}/{len(pool)}",
        }
        for policy, c, pool in picks
    ]


def render(rows: list[dict], argv: list[str]) -> str:
    head = ["traces", "policy", "selected", "cv_r2", "decision_excess", "safety", "n_safe", "excess_by_bins"]
    lines = [
        "# What safe selection costs",
        "",
        f"Written by `{PROG} {' '.join(argv)}`. cv R^2: leave-prompts-out; decision excess:",
        "what the candidate's schedules leave uncomputed on held-out prompts above the oracle (lower is better);",
        "n_safe: safe candidates of all default candidates under that policy's monotone mode;",
        "excess_by_bins: the default pick's decision excess with its region cut into "
        f"{' / '.join(map(str, BIN_COUNTS))} parts of the schedule",
        f"(1: one x range over the recorded steps; the fit uses {REGION_BINS}).",
        "",
        "| " + " | ".join(head) + " |",
        "|" + "---|" * len(head),
    ]
    for r in rows:
        cells = [f"{r[k]:.4f}" if isinstance(r[k], float) else str(r[k]) for k in head]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def setup_arg_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.splitlines()[0])
    parser.add_argument("traces", nargs="+", metavar="TRACES[@MIN_STEP]")
    parser.add_argument("--out", required=True, type=Path, metavar="FILE", help="the markdown table to write")
    return parser


@command(PROG)
def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = setup_arg_parser().parse_args(argv)
    rows = []
    for item in args.traces:
        path, _, step = item.partition("@")
        min_step = _min_step(item, step)
        frame = load_traces([path]).frame
        frame = frame[frame["step"] >= min_step]
        with monotone_without_positivity():
            before = scored_candidates(frame, min_step)
        now = scored_candidates(frame, min_step)
        found = policy_rows(path, before, now)
        default = next(r for r in found if r["policy"] == "refuse unsafe + positive monotone")
        for row in found:
            row["excess_by_bins"] = ""
        default["excess_by_bins"] = excess_by_bins(frame, default["selected"], min_step)
        rows += found
        print(f"{path}: done", file=sys.stderr)
    write_text(args.out, render(rows, argv))
    print(f"wrote {args.out}")
    return 0


def _min_step(item: str, step: str) -> int:
    """The MIN_STEP of TRACES[@MIN_STEP] (1 when not given)."""
    try:
        return int(step) if step else 1
    except ValueError as exc:
        raise InputError(f"TRACES: {item!r}: expected TRACES@MIN_STEP with an integer MIN_STEP") from exc


if __name__ == "__main__":
    sys.exit(main())
