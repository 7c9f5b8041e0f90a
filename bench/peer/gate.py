"""mlx-teacache's skip rule replayed over recorded traces beside ours, and why the two schedules differ.

mlx-teacache decides each step in ``mlx_teacache.gate.gate_step`` (the function every variant of it calls),
from the rel-L1 of its signal against the previous step's. Here that function itself runs, imported from
the installed package, with two stand-ins for what its integrations supply: the modulated input is a
one-element array naming the step (finite, so its non-finite check passes), and its rel-L1 reduction is
swapped, for the duration of the replay, for a lookup of the recorded signal between consecutive steps;
a residual is stored wherever its decision says to update the cache, as its forwards do. Nothing of its
rule is copied.

Why a step is decided differently: our gate is replayed again with its rules made like mlx-teacache's one
at a time (:data:`RULES`, in that order); a step's reason is the first rule after which our decision
equals mlx-teacache's. After the last rule the two agree on every step (``tests/bench/peer/test_gate.py`` checks
that on random traces); a step that still differs is counted as ``unexplained``.
"""

from __future__ import annotations

import contextlib
import math
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from unittest import mock

from teacache.errors import InputError
from teacache.gate import GateConfig, replay
from teacache.rescale import RescaleFunction

PEER = "mlx-teacache"
# The rules in which the two gates differ.
RULE_WINDOW = "forced first/last steps"  # mlx-teacache's skip_first_n_steps / skip_last_n_steps (default 1 / 1)
RULE_RANGE = "calibrated-range clamp"  # it clamps and refuses above the range only for its own coefficients
RULE_CAP = "consecutive-skip cap"  # its MAX_CONSECUTIVE_SKIPS against our max_consecutive_skips
RULE_ANCHOR = "anchor in the leading window"  # its first gated step seeds the cache: it always computes
RULE_NON_FINITE = "non-finite handling"  # after a non-finite signal it drops the cache: the next step re-seeds
RULES = (RULE_WINDOW, RULE_ANCHOR, RULE_RANGE, RULE_CAP, RULE_NON_FINITE)  # the order of :func:`bridges`
UNEXPLAINED = "unexplained"
# What our replay cannot see, said once in every report: both decide once per step on the conditional
# (positive) branch's signal and keep one residual per CFG branch, and on a recorded trace both see the
# same signal; a different signal (mlx-teacache's Z-Image gates on the first main layer's residual) shows
# only in a run of its wrapper (teacache-bench fullsize --peer).
SAME_IN_REPLAY = (
    "CFG pairing (both decide once per step on the conditional branch, one residual per branch) and the "
    "signal itself (a replay feeds both the same recorded x)"
)


@dataclass(frozen=True)
class PeerSettings:
    """What mlx-teacache's gate is given: apply_teacache's coefficients and skip window, its range (if any)."""

    coefficients: tuple[float, float, float, float, float]
    skip_first_n_steps: int = 1
    skip_last_n_steps: int = 1
    calibrated_range: tuple[float, float] | None = None  # None: as for any apply_teacache(coefficients=...)


def peer_coefficients(rescale: RescaleFunction) -> tuple[float, float, float, float, float]:
    """``rescale`` as the five numbers mlx-teacache takes (c4..c0); ValueError where it cannot take them."""
    if rescale.is_time_aware:
        raise InputError(
            f"--coefficients: a {rescale.form} form; mlx-teacache's gate takes a polynomial in x only "
            "(write the fit with teacache-calib emit --format mlx-teacache for its best x-only candidate)"
        )
    if len(rescale.coefficients) > 5:
        raise InputError(f"--coefficients: degree {len(rescale.coefficients) - 1}; mlx-teacache's gate takes 4 at most")
    return tuple([0.0] * (5 - len(rescale.coefficients)) + list(rescale.coefficients))  # type: ignore[return-value]


def threshold_refusal(threshold: float) -> str | None:
    """Why mlx-teacache's apply_teacache would refuse ``threshold`` (None: it takes it)."""
    return None if 0.0 <= threshold <= 1.0 else f"apply_teacache takes rel_l1_thresh in [0, 1], not {threshold:g}"


def max_consecutive_skips() -> int:
    """The runaway-skip cap mlx-teacache's gate applies (a constant of its gate module)."""
    return int(_gate_module().MAX_CONSECUTIVE_SKIPS)


def _gate_module():
    from mlx_teacache.gate import gate_step

    return sys.modules[gate_step.__module__]


@contextlib.contextmanager
def _recorded_signal(xs: Sequence[float | None]) -> Iterator[None]:
    """Its rel-L1 reduction answers with the recorded x between consecutive stand-in steps."""
    module = _gate_module()

    def recorded(current, previous) -> float:
        step, anchor = int(current.item()), int(previous.item())
        if step != anchor + 1:  # its gate only measures against the previous step (it re-seeds otherwise)
            raise RuntimeError(f"mlx-teacache's gate measured step {step} against step {anchor}; no trace holds that")
        x = xs[step]
        return math.nan if x is None else float(x)

    with mock.patch.object(module, "mean_abs_rel_l1", recorded):
        yield


def replay_peer(xs: Sequence[float | None], threshold: float, settings: PeerSettings, num_steps: int | None = None):
    """mlx-teacache's decision kind at every step (computed, forced, skipped, numerical-miss) for one trace."""
    import mlx.core as mx
    from mlx_teacache.cache import TeaCacheState
    from mlx_teacache.gate import gate_step

    n = num_steps if num_steps is not None else len(xs)
    state = TeaCacheState()
    state.reset_for_new_generation(num_steps=n)
    residual = mx.zeros((1,))
    kinds = []
    with _recorded_signal(xs):
        for step in range(n):
            decision = gate_step(
                state,
                rel_l1_thresh=threshold,
                coefficients=settings.coefficients,
                skip_first=settings.skip_first_n_steps,
                skip_last=settings.skip_last_n_steps,
                num_steps=n,
                step_idx=step,
                mod_in=mx.array([float(step)]),
                calibrated_range=settings.calibrated_range,
            )
            if decision.should_update_cache:
                state.store_residuals(pos=residual)
            kinds.append(decision.kind)
    return kinds


def bridges(xs: Sequence[float | None], ours: GateConfig, peer: PeerSettings, num_steps: int):
    """(rule, config, trace): our gate and its input with mlx-teacache's rules adopted one more at a time.

    Its skip window; its seeding (its first gated step only seeds the cache, so no signal is read there: x
    becomes None); its range handling (none for caller-supplied coefficients) on the same polynomial; its
    consecutive-skip cap; its numerical misses (where the signal or the rescaled value is not finite it
    computes and drops the cache, so the next finite step seeds again).
    """
    lo, hi = peer.calibrated_range if peer.calibrated_range is not None else (0.0, math.inf)
    window = replace(ours, skip_first_n_steps=peer.skip_first_n_steps, skip_last_n_steps=peer.skip_last_n_steps)
    trace = (list(xs) + [None] * num_steps)[:num_steps]
    yield RULE_WINDOW, window, trace
    seeded = list(trace)
    if window.skip_first_n_steps < num_steps:
        seeded[window.skip_first_n_steps] = None
    yield RULE_ANCHOR, window, seeded
    ranged = replace(window, rescale=RescaleFunction(peer.coefficients, x_range=(lo, hi)))
    yield RULE_RANGE, ranged, seeded
    capped = replace(ranged, max_consecutive_skips=max_consecutive_skips())
    yield RULE_CAP, capped, seeded
    missed, reseeded = False, list(seeded)
    for step in range(capped.skip_first_n_steps, num_steps - capped.skip_last_n_steps):
        x = reseeded[step]
        bad = x is not None and (not math.isfinite(x) or not math.isfinite(float(capped.rescale(max(x, lo)))))
        if bad:
            reseeded[step] = math.nan  # it computes there (a numerical miss), whatever the rescaled value
        elif missed and x is not None:
            reseeded[step] = None
        missed = bad or (missed and x is None)
    yield RULE_NON_FINITE, capped, reseeded


@dataclass(frozen=True)
class StepDifference:
    step: int
    ours: str  # "skip" or "compute (<our reason>)"
    theirs: str  # mlx-teacache's decision kind
    rule: str


def explain(xs: Sequence[float | None], ours: GateConfig, peer: PeerSettings, num_steps: int | None = None):
    """(our skipped steps, mlx-teacache's skipped steps, the steps decided differently and why) for one trace."""
    n = num_steps if num_steps is not None else len(xs)
    xs = [None if (x is None or (i == 0 and math.isnan(float(x)))) else float(x) for i, x in enumerate(xs)]
    theirs = replay_peer(xs, ours.rel_l1_thresh, peer, n)
    their_skip = [k == "skipped" for k in theirs]
    our_log = replay(ours, xs, num_steps=n)

    def skips(config: GateConfig, trace) -> list[bool]:
        return [not d.compute for d in replay(config, trace, num_steps=n)]

    stages = [[not d.compute for d in our_log]]  # stages[i]: our gate with RULES[:i] made like mlx-teacache's
    stages += [skips(config, trace) for _rule, config, trace in bridges(xs, ours, peer, n)]
    differences = []
    for step in range(n):
        if stages[0][step] == their_skip[step]:
            continue
        rule = UNEXPLAINED
        for i, name in enumerate(RULES, start=1):
            if all(stage[step] == their_skip[step] for stage in stages[i:]):
                rule = name
                break
        d = our_log[step]
        differences.append(
            StepDifference(step, "skip" if not d.compute else f"compute ({d.reason})", theirs[step], rule)
        )
    our_skipped = [s for s in range(n) if stages[0][s]]
    their_skipped = [s for s in range(n) if their_skip[s]]
    return our_skipped, their_skipped, differences


DIFFERENCE_COLUMNS = ["run_id", "prompt_id", "seed", "threshold", "num_steps", "step", "ours", "theirs", "rule"]
SCHEDULE_COLUMNS = [
    "run_id", "prompt_id", "seed", "threshold", "num_steps", "our_skipped", "their_skipped", "their_skipped_steps",
    "differences", "refused",
]  # fmt: skip


def compare(runs, configs: dict[float, GateConfig], peer_for) -> tuple:
    """Every run (``calib.traces.RunTrace``) at every threshold through both gates.

    ``peer_for(config)`` gives mlx-teacache's settings for our config. Returns (one row per run and threshold:
    SCHEDULE_COLUMNS, one row per step decided differently: DIFFERENCE_COLUMNS) as DataFrames. A threshold
    apply_teacache refuses is replayed all the same (its gate does not check) and marked ``refused``.
    """
    import json

    import pandas as pd

    schedules, differences = [], []
    for threshold, config in configs.items():
        peer = peer_for(config)
        refused = threshold_refusal(threshold)
        for run in runs:
            ours, theirs, diffs = explain(run.x, config, peer, run.num_steps)
            key = {"run_id": run.run_id, "prompt_id": run.prompt_id, "seed": run.seed, "threshold": threshold,
                   "num_steps": run.num_steps}  # fmt: skip
            schedules.append({**key, "our_skipped": len(ours), "their_skipped": len(theirs),
                              "their_skipped_steps": json.dumps(theirs), "differences": len(diffs),
                              "refused": refused or ""})  # fmt: skip
            differences += [{**key, "step": d.step, "ours": d.ours, "theirs": d.theirs, "rule": d.rule} for d in diffs]
    return (
        pd.DataFrame(schedules, columns=SCHEDULE_COLUMNS).astype({"seed": "Int64"}),
        pd.DataFrame(differences, columns=DIFFERENCE_COLUMNS).astype({"seed": "Int64"}),
    )


def summary_lines(schedules, differences) -> list[str]:
    """Per threshold: skipped steps of each gate, runs that differ, and the differing steps by rule."""
    lines = []
    for threshold, rows in schedules.groupby("threshold", sort=True):
        diff = differences[differences["threshold"] == threshold]
        rules = diff["rule"].value_counts()
        why = ", ".join(f"{rules[r]} {r}" for r in (*RULES, UNEXPLAINED) if r in rules) or "none"
        refused = rows["refused"].iloc[0]
        lines.append(
            f"threshold {threshold:g}: skipped steps ours {rows['our_skipped'].sum()}, {PEER} "
            f"{rows['their_skipped'].sum()} over {len(rows)} runs; {int((rows['differences'] > 0).sum())} runs "
            f"decided differently, {len(diff)} steps: {why}" + (f" ({refused})" if refused else "")
        )
    lines.append(f"the same in both, so never a reason here: {SAME_IN_REPLAY}")
    return lines
