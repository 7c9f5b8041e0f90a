"""What a change of mflux or MLX does to a calibrated gate: its decisions and its fit, before against after.

Detection (:mod:`calib.drift.numbers`) says whether the numbers moved; this module says whether that matters.
On traces of the same runs (prompt, seed, steps, size) recorded before and after an upgrade, a calibrated gate
(the model's packaged rescale function, or one fitted on the before traces) is replayed with
:mod:`teacache.gate_batch` at the thresholds that matter (the variant's default and those skipping about
25/50/75 % of the gated steps on the before traces):

- decisions: how many step decisions and whole schedules differ, and how close the nearest unchanged decision
  came to flipping (its accumulator's distance to the threshold, relative);
- fit: the rescale function's RMSE and R^2 on the after traces against the before traces.

Both are judged against a tolerance measured on the before traces (:func:`measure_tolerance`): the decisions
that a calibration on other prompts changes (each prompt left out of a fresh fit in turn, the refit replayed
against the fit on all of them), the decisions a same-release rerun changes, and the cross-validated
standard error of a fresh fit's R^2. Pure numpy and pandas: no MLX, no mflux.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from teacache.errors import InputError
from teacache.gate import GateConfig
from teacache.gate_batch import rescaled_increments, skip_masks
from teacache.rescale import FORM_POLY_SIGMA, RescaleFunction

SKIP_TARGETS = (0.25, 0.5, 0.75)  # fractions of the gated steps skipped on the before traces
THRESHOLD_GRID = np.geomspace(1e-4, 20.0, 600)
FIT_SE_BAND = 2.0  # an RMSE within two standard errors of its mean over prompts is within the prompts' spread
HOLDS = "holds"
MOVED = "moved"
STEPS = ("skip_first_n_steps", "skip_last_n_steps", "max_consecutive_skips")  # the rule's step settings


@dataclass(frozen=True)
class Gate:
    """A calibrated gate: the rule's settings and where its rescale function came from. ``config``'s threshold is
    not used: the gate is replayed at several (:func:`Gate.of` leaves it at 0)."""

    config: GateConfig
    source: str

    @classmethod
    def of(cls, rescale: RescaleFunction, source: str, **steps: int) -> Gate:
        """The gate of ``rescale`` with the rule's step settings (``skip_first_n_steps`` ...; GateConfig's defaults)."""
        return cls(GateConfig(0.0, rescale, **steps), source)

    @property
    def rescale(self) -> RescaleFunction:
        return self.config.rescale

    def with_rescale(self, rescale: RescaleFunction, source: str) -> Gate:
        """The same rule with another rescale function."""
        return Gate(replace(self.config, rescale=rescale), source)

    def to_dict(self) -> dict:
        return {"rescale": self.rescale.to_dict(), "source": self.source, **{k: getattr(self.config, k) for k in STEPS}}

    @classmethod
    def from_dict(cls, data: dict) -> Gate:
        steps = {k: int(data[k]) for k in STEPS}
        return cls.of(RescaleFunction.from_dict(data["rescale"]), str(data["source"]), **steps)


@dataclass(frozen=True)
class Signals:
    """The deciding branch's signal of each run, placed by step: ``x[run, step]`` (NaN where none)."""

    run_ids: tuple[str, ...]
    prompt_ids: tuple[str, ...]
    x: np.ndarray
    y: np.ndarray
    sigma: np.ndarray
    num_steps: np.ndarray

    @classmethod
    def from_frame(cls, frame: pd.DataFrame) -> Signals:
        """From record's rows (``teacache-calib record``'s columns); branch 0 ("cond") decides for every step."""
        rows = frame[frame["branch"].isin(("cond", 0))] if "branch" in frame.columns else frame
        runs = sorted(rows["run_id"].unique())
        width = int(rows["num_steps"].max())
        shape = (len(runs), width)
        x, y, sigma = np.full(shape, np.nan), np.full(shape, np.nan), np.full(shape, np.nan)
        index = {r: i for i, r in enumerate(runs)}
        i = rows["run_id"].map(index).to_numpy()
        s = rows["step"].to_numpy(dtype=int)
        x[i, s] = rows["x_rel_l1"].to_numpy(dtype=float)
        y[i, s] = rows["y_rel_l1"].to_numpy(dtype=float)
        if "sigma" in rows.columns:
            sigma[i, s] = rows["sigma"].to_numpy(dtype=float)
        first = rows.groupby("run_id", sort=True).first()
        return cls(
            run_ids=tuple(runs),
            prompt_ids=tuple(str(first.loc[r, "prompt_id"]) for r in runs),
            x=x,
            y=y,
            sigma=sigma,
            num_steps=first.loc[runs, "num_steps"].to_numpy(dtype=np.int64),
        )

    def time_input(self, rescale: RescaleFunction) -> np.ndarray:
        """The rescale function's time input at every [run, step], as the gate computes it."""
        if rescale.form == FORM_POLY_SIGMA:
            return self.sigma
        if not rescale.is_time_aware:
            return np.zeros(self.x.shape)
        steps = np.arange(self.x.shape[1], dtype=float)[None, :]
        return steps / np.maximum(self.num_steps[:, None] - 1.0, 1.0)

    def subset(self, keep: np.ndarray) -> Signals:
        return Signals(
            tuple(np.asarray(self.run_ids)[keep]),
            tuple(np.asarray(self.prompt_ids)[keep]),
            self.x[keep],
            self.y[keep],
            self.sigma[keep],
            self.num_steps[keep],
        )


@dataclass(frozen=True)
class Decisions:
    """Replayed decisions at several thresholds: ``skipped[t, run, step]``, where the gate looked (``gated``),
    the accumulator when it decided (``accumulated``), and which computes the consecutive-skip cap forced."""

    thresholds: np.ndarray
    skipped: np.ndarray
    gated: np.ndarray
    accumulated: np.ndarray
    forced: np.ndarray


def replay(gate: Gate, signals: Signals, thresholds) -> Decisions:
    """The gate's decisions on the recorded signals (decision for decision :func:`teacache.gate_batch`'s)."""
    ts = np.asarray(thresholds, dtype=float)
    sig = signals.sigma if gate.rescale.form == FORM_POLY_SIGMA else None
    config = gate.config
    increment, gated = rescaled_increments(
        signals.x, config.rescale, signals.num_steps, sig, config.skip_first_n_steps, config.skip_last_n_steps
    )
    skipped = skip_masks(increment, gated, ts, config.max_consecutive_skips)
    # the accumulator at each decision, from the schedule: what was added since the last computed step
    accumulated = np.zeros(skipped.shape)
    for step in range(skipped.shape[2]):
        carried = accumulated[:, :, step - 1] * skipped[:, :, step - 1] if step else 0.0
        accumulated[:, :, step] = np.where(gated[None, :, step], increment[None, :, step] + carried, 0.0)
    forced = gated[None] & ~skipped & (accumulated < ts[:, None, None])
    return Decisions(ts, skipped, gated, accumulated, forced)


def skip_fraction(decisions: Decisions) -> np.ndarray:
    """Per threshold, the fraction of gated steps skipped."""
    gated = max(int(decisions.gated.sum()), 1)
    return decisions.skipped.sum(axis=(1, 2)) / gated


def thresholds_that_matter(gate: Gate, signals: Signals, default: float | None) -> list[dict]:
    """The default threshold and those skipping about 25/50/75 % of the gated steps on these signals."""
    grid = replay(gate, signals, THRESHOLD_GRID)
    fractions = skip_fraction(grid)
    chosen: list[dict] = []
    if default is not None and default > 0:
        chosen.append({"label": "default", "threshold": float(default)})
    for target in SKIP_TARGETS:
        i = int(np.argmin(np.abs(fractions - target)))
        if abs(fractions[i] - target) < 0.125 and fractions[i] > 0:
            chosen.append({"label": f"~{target:.0%} skipped", "threshold": float(THRESHOLD_GRID[i])})
    return chosen


def margins(decisions: Decisions, keep: np.ndarray) -> np.ndarray:
    """Per threshold, the smallest relative distance |accumulated - threshold| / threshold over the decisions
    in ``keep`` that the threshold took (the cap's forced computes are not the threshold's)."""
    t = decisions.thresholds[:, None, None]
    with np.errstate(divide="ignore", invalid="ignore"):
        distance = np.abs(decisions.accumulated - t) / t
    taken = keep & decisions.gated[None] & ~decisions.forced
    return np.where(taken, distance, np.inf).min(axis=(1, 2))


def decision_changes(gate: Gate, before: Signals, after: Signals, thresholds: list[dict]) -> list[dict]:
    """Per threshold: decisions and schedules that differ between before and after, and the nearest call."""
    if before.run_ids != after.run_ids:
        raise InputError("after: its runs differ from before's; expected the same runs recorded again")
    ts = [t["threshold"] for t in thresholds]
    a, b = replay(gate, before, ts), replay(gate, after, ts)
    looked = a.gated[None] | b.gated[None]
    flipped = (a.skipped != b.skipped) & looked
    out = []
    nearest = margins(b, ~flipped)
    for i, t in enumerate(thresholds):
        n = int(np.broadcast_to(looked, flipped.shape)[i].sum())
        out.append({
            **t,
            "decisions": n,
            "decisions_differ": int(flipped[i].sum()),
            "decisions_differ_fraction": float(flipped[i].sum() / max(n, 1)),
            "schedules": len(before.run_ids),
            "schedules_differ": int(flipped[i].any(axis=1).sum()),
            "skipped_before": int(a.skipped[i].sum()),
            "skipped_after": int(b.skipped[i].sum()),
            "nearest_margin": None if not math.isfinite(nearest[i]) else float(nearest[i]),
        })  # fmt: skip
    return out


def fit_quality(rescale: RescaleFunction, signals: Signals) -> dict:
    """RMSE and R^2 of the rescale function's prediction of y from x where both were recorded."""
    u = signals.time_input(rescale)
    rows = np.isfinite(signals.x) & np.isfinite(signals.y) & np.isfinite(u)
    x, y, uu = signals.x[rows], signals.y[rows], u[rows]
    with np.errstate(all="ignore"):
        pred = np.asarray(rescale(x, uu if rescale.is_time_aware else 0.0), dtype=float)
    residual = float(np.mean((y - pred) ** 2))
    variance = float(np.var(y))
    return {"rmse": math.sqrt(residual), "r2": 1.0 - residual / variance if variance > 0 else None, "n": int(x.size)}


# ------------------------------------------------------------------------------------------ the tolerance


def _frame_of(signals: Signals) -> pd.DataFrame:
    """The rows a fit reads (one per recorded step of the deciding branch)."""
    rows = np.isfinite(signals.x) & np.isfinite(signals.y)
    run, step = np.nonzero(rows)
    return pd.DataFrame({
        "run_id": np.asarray(signals.run_ids)[run],
        "prompt_id": np.asarray(signals.prompt_ids)[run],
        "step": step,
        "num_steps": signals.num_steps[run],
        "sigma": signals.sigma[run, step],
        "x_rel_l1": signals.x[run, step],
        "y_rel_l1": signals.y[run, step],
    })  # fmt: skip


def fresh_fit(signals: Signals) -> tuple[Mapping, RescaleFunction, object]:
    """A fit of these traces as ``teacache-calib fit`` makes it (safe candidates, held-out prompts): the selected
    candidate's scores, its rescale function, and its candidate spec."""
    from calib.fit.candidates import FittedModel, candidate_specs
    from calib.fit.selection import fit_frame, time_input

    frame = _frame_of(signals)
    has_sigma = bool(np.isfinite(frame["sigma"]).all())
    specs = candidate_specs(True, has_sigma)
    selected = fit_frame(frame, specs)["selected"]
    spec = next(s for s in specs if s.label == selected["label"])
    x, y = frame["x_rel_l1"].to_numpy(), frame["y_rel_l1"].to_numpy()
    model = FittedModel.fit(spec, x, y, time_input(spec.form, frame))
    rescale = replace(model.function, provenance={"source": "fitted on the before traces", "label": spec.label})
    return selected, rescale, spec


def matched_thresholds(gate: Gate, signals: Signals, fractions: np.ndarray) -> np.ndarray:
    """Thresholds of ``gate`` that skip the given fractions of gated steps on ``signals`` (nearest on the grid)."""
    grid = skip_fraction(replay(gate, signals, THRESHOLD_GRID))
    return np.array([THRESHOLD_GRID[int(np.argmin(np.abs(grid - f)))] for f in fractions])


def measure_tolerance(
    gate: Gate, before: Signals, thresholds: list[dict], rerun: Signals | None = None, fresh: tuple | None = None
) -> dict:
    """What the calibration itself cannot tell apart, measured on the before traces.

    - ``resampling``: per threshold, the largest fraction of decisions that a fresh fit with one prompt left out
      changes against the fresh fit on every prompt (both replayed at the threshold that skips as many steps as
      the calibrated gate does there): a change of the release within this is within what recalibrating on
      other prompts would do anyway.
    - ``rerun``: the fraction a same-release rerun of a run changes (``rerun``: those runs recorded again).
    - ``fit``: the calibrated function's RMSE may rise by the larger of ``FIT_SE_BAND`` standard errors of its
      mean over the prompts and the rise in RMSE (on every run) that leaving one prompt out of a fresh fit costs
      (a fresh fit's cv R^2 and its standard error beside it).

    ``fresh``: :func:`fresh_fit` of ``before`` where the caller has it already.
    """
    from calib.fit.candidates import FittedModel
    from calib.fit.selection import group_folds, time_input

    ts = np.array([t["threshold"] for t in thresholds])
    fractions = skip_fraction(replay(gate, before, ts))
    selected, refit, spec = fresh if fresh is not None else fresh_fit(before)
    refit_gate = gate.with_rescale(refit, "fresh fit")
    matched = matched_thresholds(refit_gate, before, fractions)
    full = replay(refit_gate, before, matched)
    frame = _frame_of(before)
    folds = group_folds(frame["prompt_id"].to_numpy())
    u = time_input(spec.form, frame)
    worst = np.zeros(len(ts))
    full_rmse = fit_quality(refit, before)["rmse"]
    fold_rise = 0.0  # how much worse a fit of the same form gets on every run when one prompt is left out
    for k in np.unique(folds):
        train = folds != k
        x, y = frame["x_rel_l1"].to_numpy()[train], frame["y_rel_l1"].to_numpy()[train]
        model = FittedModel.fit(spec, x, y, None if u is None else u[train])
        fold_gate = gate.with_rescale(model.function, "fold")
        fold_rise = max(fold_rise, fit_quality(fold_gate.rescale, before)["rmse"] - full_rmse)
        try:
            fold = replay(fold_gate, before, matched)
        except ValueError:  # a fold's function the gate refuses: it tells nothing about resolution
            continue
        looked = full.gated[None] | fold.gated[None]
        differ = ((full.skipped != fold.skipped) & looked).sum(axis=(1, 2)) / np.maximum(looked.sum(axis=(1, 2)), 1)
        worst = np.maximum(worst, differ)
    rerun_fraction = np.zeros(len(ts))
    if rerun is not None:
        keep = np.isin(before.run_ids, rerun.run_ids)
        same = decision_changes(gate, before.subset(keep), rerun, thresholds)
        rerun_fraction = np.array([c["decisions_differ_fraction"] for c in same])
    allowed = np.maximum(worst, rerun_fraction)
    per_prompt = [
        fit_quality(gate.rescale, before.subset(np.asarray(before.prompt_ids) == p))["rmse"]
        for p in sorted(set(before.prompt_ids))
    ]
    rmse_se = float(np.std(per_prompt, ddof=1) / math.sqrt(len(per_prompt))) if len(per_prompt) > 1 else 0.0
    return {
        "thresholds": [
            {**t, "skipped_fraction": float(f), "resampling": float(w), "rerun": float(r), "allowed": float(a)}
            for t, f, w, r, a in zip(thresholds, fractions, worst, rerun_fraction, allowed, strict=True)
        ],
        "fit": {
            "rmse": fit_quality(gate.rescale, before)["rmse"],
            "rmse_se_over_prompts": rmse_se,
            "band": FIT_SE_BAND,
            "refit_rmse_rise": fold_rise,
            "allowed_rmse_rise": max(FIT_SE_BAND * rmse_se, fold_rise),
            "fresh_fit": {
                "label": selected["label"],
                "cv_r2": float(selected["cv_r2"]),
                "cv_r2_se": float(selected["cv_r2_se"]),
            },  # fmt: skip
        },
        "n_runs": len(before.run_ids),
        "n_prompts": len(set(before.prompt_ids)),
        "folds": int(len(np.unique(folds))),
        "rule": "decisions: at most the larger of the leave-one-prompt-out refits' and a same-release rerun's "
        f"fraction differ; fit: the gate's RMSE rises by at most the larger of {FIT_SE_BAND:g} standard errors of "
        "its mean over prompts and what leaving one prompt out of a fresh fit costs it",
    }


# ------------------------------------------------------------------------------------------ the judgement


def skip_changes(gate: Gate, before: Signals, after: Signals, thresholds: list[dict]) -> list[dict]:
    """Per threshold, for runs whose steps do not line up (another step count): the share of gated steps each
    side skips, and the nearest call after; a decision has no counterpart to differ from."""
    if sorted(before.run_ids) != sorted(after.run_ids):
        raise InputError("after: its runs differ from before's; expected the same prompts and seeds")
    ts = [t["threshold"] for t in thresholds]
    a, b = replay(gate, before, ts), replay(gate, after, ts)
    fa, fb, nearest = skip_fraction(a), skip_fraction(b), margins(b, np.ones(b.skipped.shape, dtype=bool))
    return [
        {
            **t,
            "decisions": int(b.gated.sum()),
            "decisions_before": int(a.gated.sum()),
            "decisions_differ": None,
            "skipped_before": int(a.skipped[i].sum()),
            "skipped_after": int(b.skipped[i].sum()),
            "skipped_fraction_before": float(fa[i]),
            "skipped_fraction_after": float(fb[i]),
            "skipped_fraction_change": float(abs(fb[i] - fa[i])),
            "schedules": len(after.run_ids),
            "schedules_differ": None,
            "nearest_margin": None if not math.isfinite(nearest[i]) else float(nearest[i]),
        }
        for i, t in enumerate(thresholds)
    ]


def aligned(before: Signals, after: Signals) -> bool:
    """Whether every run has the same steps on both sides, so decisions can be compared one by one."""
    return before.run_ids == after.run_ids and np.array_equal(before.num_steps, after.num_steps)


def judge(gate: Gate, before: Signals, after: Signals, tolerance: dict) -> dict:
    """Decisions and fit, before against after, against the tolerance: ``verdict`` is "holds" or "moved".

    Every decision's change must be within the allowed fraction, and the fit within its noise unless not one
    decision changed. Runs of another step count (a recipe question: ``drift --against DIR --steps N``) have no
    decision to compare one by one: there the share of gated steps skipped may change by at most the allowed
    fraction of decisions, and the fit must stay within its noise."""
    thresholds = [{"label": t["label"], "threshold": t["threshold"]} for t in tolerance["thresholds"]]
    by_step = aligned(before, after)
    changes = (decision_changes if by_step else skip_changes)(gate, before, after, thresholds)
    for change, tol in zip(changes, tolerance["thresholds"], strict=True):
        change["allowed_fraction"] = tol["allowed"]
        moved = change["decisions_differ_fraction"] if by_step else change["skipped_fraction_change"]
        change["within"] = moved <= tol["allowed"]
    fit_before, fit_after = fit_quality(gate.rescale, before), fit_quality(gate.rescale, after)
    rise = fit_after["rmse"] - fit_before["rmse"]
    fit_within = bool(rise <= tolerance["fit"]["allowed_rmse_rise"])
    # the decisions are what a user of the gate gets: they decide. A fit that moved beyond its noise while not one
    # decision changed is reported beside the verdict (the gate's RMSE on these runs); once decisions change too,
    # even within what resampling the prompts allows, the fit beyond its noise says the calibration is off.
    # Without decisions to compare one by one, the skipped share is a weaker check and the fit decides beside it.
    unchanged_calls = by_step and all(c["decisions_differ"] == 0 for c in changes)
    holds = all(c["within"] for c in changes) and (fit_within or unchanged_calls)
    return {
        "verdict": HOLDS if holds else MOVED,
        "gate": gate.source,
        "aligned": by_step,
        "thresholds": changes,
        "fit": {
            "before": fit_before,
            "after": fit_after,
            "rmse_rise": rise,
            "allowed_rmse_rise": tolerance["fit"]["allowed_rmse_rise"],
            "within": fit_within,
        },  # fmt: skip
        "identical": bool(_same(before.x, after.x) and _same(before.y, after.y)),
    }


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and bool(np.array_equal(a, b, equal_nan=True))


def describe(result: dict) -> str:
    """One clause for a verdict line: decisions per threshold against what is allowed, the nearest call, the fit."""
    cs = result["thresholds"]
    allowed = ", ".join(f"{c['allowed_fraction']:.0%}" for c in cs)
    where = ", ".join(f"{c['threshold']:.3g}" for c in cs)
    margins_ = [c["nearest_margin"] for c in cs if c["nearest_margin"] is not None]
    if result.get("aligned", True):
        counts = ", ".join(f"{c['decisions_differ']}/{c['decisions']}" for c in cs)
        nearest = f"; nearest unchanged call {min(margins_):.1%} from its threshold" if margins_ else ""
        calls = (
            f"decisions differing {counts} at thresholds {where} (allowed {allowed}){nearest}; "
            f"schedules differing {max(c['schedules_differ'] for c in cs)}/{cs[0]['schedules']} at most"
        )
    else:
        shares = ", ".join(f"{c['skipped_fraction_before']:.0%} -> {c['skipped_fraction_after']:.0%}" for c in cs)
        nearest = f"; nearest call {min(margins_):.1%} from its threshold" if margins_ else ""
        calls = f"other steps: gated steps skipped {shares} at thresholds {where} (allowed change {allowed}){nearest}"
    fit = result["fit"]
    r2 = lambda v: "n/a" if v is None else f"{v:.3f}"  # noqa: E731
    return (
        f"{calls}; "
        f"RMSE {fit['before']['rmse']:.3g} -> {fit['after']['rmse']:.3g} "
        f"(allowed rise {fit['allowed_rmse_rise']:.2g}), "
        f"R^2 {r2(fit['before']['r2'])} -> {r2(fit['after']['r2'])}"
    )
