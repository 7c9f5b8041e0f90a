"""``teacache-bench fullsize --rules``: MagCache and First-Block Cache timed beside TeaCache on the same model.

Each rule gets an arm with every step computed (its cost: MagCache's schedule proxy, First-Block Cache's block 0
and read-back on every step) and one arm per skip fraction, its threshold chosen by replaying the rule on one
calibration generation of the same prompt and seed: MagCache's ratio curve from that run's residual norms
(:func:`teacache.magcache.ratio_curve`), First-Block Cache's change table (``apply_fbcache(calibrate=True)``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd

from teacache.errors import InputError

EXTRA_RULES = ("magcache", "fbcache")
GATED_EVERY_STEP = 1e-9  # First-Block Cache's every-step arm: a threshold no change of block 0 falls below


def parse_rules(text: str | None) -> tuple[str, ...]:
    """'magcache,fbcache': the rules timed beside TeaCache, each once, in EXTRA_RULES' order."""
    if not text:
        return ()
    names = [part.strip() for part in text.split(",") if part.strip()]
    unknown = [name for name in names if name not in EXTRA_RULES]
    if unknown or not names:
        raise InputError(
            f"--rules: expected a comma-separated list of {', '.join(EXTRA_RULES)}, got {text!r}"
            " (TeaCache's arms are always timed)"
        )
    return tuple(rule for rule in EXTRA_RULES if rule in names)


@dataclass(frozen=True)
class RuleArm:
    """One arm of another rule: its config (MagCacheConfig or FBCacheConfig) and the generation's step count."""

    rule: str
    config: object
    num_steps: int

    def apply(self, model):
        """The rule's restoring handle on ``model`` (a context manager, as apply_teacache's)."""
        if self.rule == "magcache":
            from teacache.magcache import apply_magcache

            return apply_magcache(model, self.config, self.num_steps)
        from teacache.fbcache import apply_fbcache

        c = self.config
        return apply_fbcache(
            model,
            c.threshold,
            skip_first_n_steps=c.skip_first_n_steps,
            skip_last_n_steps=c.skip_last_n_steps,
            max_consecutive_skips=c.max_consecutive_skips,
        )


def smallest_reaching(grid, skipped_at: Callable[[float], int], target: int) -> tuple[float, int]:
    """The smallest threshold of ``grid`` (4 significant digits) that skips >= ``target`` steps, else the one
    skipping most; with its skip count."""
    best = (math.inf, -1)
    for threshold in grid:
        threshold = float(f"{threshold:.4g}")
        k = skipped_at(threshold)
        if k >= target:
            return threshold, k
        if k > best[1]:
            best = (threshold, k)
    return best


def magcache_ratios(records: list[dict]) -> tuple[float, ...]:
    """MagCache's curve from one calibration generation's records (``apply_teacache(calibrate=True)``): branch 0's
    residual norm of each step over the step before's."""
    from teacache.magcache import ratio_curve

    rows = [
        {"prompt_id": 0, "seed": 0, "step": r["step"], "branch": "cond", "residual_norm": r["residual_norm"]}
        for r in records
        if r["branch"] == 0
    ]
    return ratio_curve(pd.DataFrame(rows))


def magcache_arms(ratios: tuple[float, ...], steps: int, targets: list[int]) -> list[tuple]:
    """MagCache's arms: every step computed, then one per target skip count (threshold, predicted skipped)."""
    from teacache.magcache import MagCacheConfig, schedule

    def skipped_at(threshold: float) -> int:
        return steps - schedule(MagCacheConfig(threshold, ratios), steps).computed

    grid = np.geomspace(1e-4, 10.0, 600)
    arms = [("magcache-all", None, RuleArm("magcache", MagCacheConfig(0.0, ratios), steps), 0)]
    for threshold, k in dict.fromkeys(smallest_reaching(grid, skipped_at, t) for t in targets):
        arms.append(("magcache", threshold, RuleArm("magcache", MagCacheConfig(threshold, ratios), steps), k))
    return arms


def fbcache_arms(changes: np.ndarray, steps: int, targets: list[int]) -> list[tuple]:
    """First-Block Cache's arms: every step gated and computed, then one per target skip count."""
    from calib.targets import fbcache_masks
    from teacache.fbcache import FBCacheConfig

    finite = changes[np.isfinite(changes) & (changes > 0)]
    grid = np.geomspace(finite.min() / 4, finite.max() * 4, 600) if finite.size else np.array([1.0])

    def skipped_at(threshold: float) -> int:
        return int(fbcache_masks(changes, [threshold], FBCacheConfig()).sum())

    every = FBCacheConfig(GATED_EVERY_STEP)
    arms = [("fbcache-all", None, RuleArm("fbcache", every, steps), 0)]
    for threshold, k in dict.fromkeys(smallest_reaching(grid, skipped_at, t) for t in targets):
        arms.append(("fbcache", threshold, RuleArm("fbcache", FBCacheConfig(threshold), steps), k))
    return arms


def rule_arms(session, rules: tuple[str, ...], rescale, targets: list[int], say: Callable[[str], None]):
    """(arms, calibration record) of every rule of ``rules``: one calibration generation each (also its warm-up),
    then the thresholds replayed from it. ``session``: fullsize_measure.Session."""
    from teacache import apply_teacache
    from teacache.fbcache import apply_fbcache

    arms, record = [], {}
    model, steps = session.model, session.steps
    if "magcache" in rules:
        with apply_teacache(model, coefficients=rescale, calibrate=True) as handle:
            session.generate()
            ratios = magcache_ratios(handle.records)
        found = magcache_arms(ratios, steps, targets)
        record["magcache"] = {"ratios": list(ratios), "thresholds": _chosen(found)}
        arms += found
    if "fbcache" in rules:
        with apply_fbcache(model, calibrate=True) as handle:
            session.generate()
            changes, blocks = handle.changes, handle.num_blocks
        found = fbcache_arms(changes, steps, targets)
        record["fbcache"] = {"num_blocks": blocks, "thresholds": _chosen(found)}
        arms += found
    for rule, facts in record.items():
        say(f"  {rule}: thresholds {', '.join(f'{t:g} (predicted {k} skipped)' for t, k in facts['thresholds'])}")
    return arms, record


def _chosen(arms: list[tuple]) -> list[tuple[float, int]]:
    return [(threshold, k) for kind, threshold, _arm, k in arms if threshold is not None]
