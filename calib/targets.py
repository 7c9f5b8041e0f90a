"""Thresholds by target: the one place that turns "about 2x" or "p5 SSIM >= 0.95" into a threshold, with evidence.

A threshold is a number in the units of a rescaled polynomial; users ask for a speedup or a quality floor. Two
resolutions answer them, and every door (``teacache-generate``, the API helper :func:`threshold_for`,
``teacache-bench report --target-speedup``) goes through them:

- speedup S at N steps: the threshold whose schedule computes about N / S steps. :func:`choose_for_speedup`
  picks it from (threshold, median computed steps) pairs, wherever they come from: the gate replayed on a
  variant's calibration traces (:func:`replayed_computed`, ``teacache.gate_batch``), or a sweep's measured skips.
- quality floor Q: the fastest threshold of a sweep report whose p5 SSIM stays >= Q (:func:`choose_for_quality`).

A target that nothing reaches within one step (or no skipping threshold meets) is refused with one line that
names the nearest reachable target. Pure numpy on the replay side: no MLX, no mflux.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from teacache import variants
from teacache.errors import TeaCacheError
from teacache.gate import GateConfig
from teacache.gate_batch import replay_skip_masks
from teacache.outputs import CHECKOUT
from teacache.rescale import RescaleFunction

# The replay grid: 0 and a geometric sweep far past any threshold the committed calibrations use (0.005-0.5).
GRID = np.concatenate([[0.0], np.geomspace(1e-4, 10.0, 801)])
STEP_TOLERANCE = 1.0  # a target is reached when the chosen schedule computes within one step of N / S
RESULTS = CHECKOUT / "results"


class TargetError(TeaCacheError, ValueError):
    """A target the calibration cannot reach, or evidence that cannot answer it; the message says which."""


@dataclass(frozen=True)
class ThresholdChoice:
    """A threshold and where it came from: what was asked, what the evidence says it gives, and which evidence."""

    threshold: float
    target: str  # what was asked, in words ("speedup 2x at 28 steps")
    expected: dict  # what the evidence says this threshold gives (computed/skipped steps, p5 SSIM, speedup)
    evidence: str  # which files and which rescale function, in words
    source: dict = field(default_factory=dict)  # the same as data, for metadata and summaries

    def describe(self) -> str:
        gives = ", ".join(f"{k.replace('_', ' ')} {_fmt(v)}" for k, v in self.expected.items())
        return f"threshold {self.threshold:g} for {self.target}: {gives} ({self.evidence})"


def _fmt(value) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def check_speedup(speedup: float, arg: str = "--teacache-speedup") -> float:
    if isinstance(speedup, bool) or not isinstance(speedup, int | float) or not math.isfinite(speedup):
        raise TargetError(f"{arg}: expected a finite number > 1 (2 computes about half the steps), got {speedup!r}")
    if speedup <= 1.0:
        raise TargetError(f"{arg} {speedup:g}: expected a number > 1 (1 is no skipping: leave TeaCache off)")
    return float(speedup)


def choose_for_speedup(
    thresholds,
    computed,
    num_steps: int,
    speedup: float,
    arg: str = "--teacache-speedup",
    num_blocks: int | None = None,
) -> tuple[float, float]:
    """(threshold, its median computed steps) nearest N / ``speedup`` computed steps, else TargetError.

    Among the thresholds that give the nearest count, the middle one: a schedule at the edge of its plateau moves
    with the smallest change of the signal. The nearest must lie within :data:`STEP_TOLERANCE` of N / S.
    ``num_blocks``: First-Block Cache's bound instead (block 0 of that many runs at every step, so S asks for
    fewer computed steps than N / S; :func:`teacache.fbcache.ideal_speedup`).
    """
    speedup = check_speedup(speedup, arg)
    ts, cs = np.asarray(thresholds, dtype=float), np.asarray(computed, dtype=float)
    if num_blocks is None:
        want = num_steps / speedup
    else:
        saved = _saved(num_blocks)
        want = num_steps - num_steps * (1.0 - 1.0 / speedup) / saved if saved > 0 else float(num_steps)
    gap = np.abs(cs - want)
    best = np.flatnonzero(np.isclose(gap, gap.min()))
    plateau = best[cs[best] == cs[best[0]]]
    pick = int(plateau[len(plateau) // 2])
    if gap[pick] > STEP_TOLERANCE:
        fastest = ideal_bound(num_steps, cs.min(), num_blocks)
        nearest = ideal_bound(num_steps, cs[pick], num_blocks)
        raise TargetError(
            f"{arg} {speedup:g}: at {num_steps} steps the calibration reaches {fastest:.2f}x at most (computing "
            f"{cs.min():g} of {num_steps}), none computes {want:.3g} steps; nearest: {arg} {nearest:.2f}"
        )
    return float(ts[pick]), float(cs[pick])


def _saved(num_blocks: int | None) -> float:
    """The share of a step's cost a skip saves: all of it, or all but block 0 of ``num_blocks`` (First-Block Cache)."""
    return 1.0 if num_blocks is None else 1.0 - 1.0 / num_blocks


def ideal_bound(num_steps: int, computed: float, num_blocks: int | None = None) -> float:
    """The ideal speedup of computing ``computed`` of ``num_steps`` steps: N / computed, or with block 0 of
    ``num_blocks`` run at every step N / (N - k (1 - 1/B)) (:func:`teacache.fbcache.ideal_speedup`)."""
    return float(num_steps / (num_steps - (num_steps - computed) * _saved(num_blocks)))


def check_floor(floor: float, arg: str = "--teacache-ssim") -> float:
    if isinstance(floor, bool) or not isinstance(floor, int | float) or not 0.0 < floor <= 1.0:
        raise TargetError(f"{arg}: expected a p5 SSIM floor in (0, 1], like 0.95; got {floor!r}")
    return float(floor)


def choose_for_quality(rows: list[dict], floor: float, arg: str = "--teacache-ssim") -> dict:
    """The fastest row (highest median speedup, then threshold) of a report's per-threshold rows whose ``ssim_p5``
    stays >= ``floor`` among those that skip steps; TargetError naming the best floor reachable otherwise."""
    floor = check_floor(floor, arg)
    skipping = [r for r in rows if (r.get("skipped") or 0) > 0 and r.get("ssim_p5") is not None]
    if not skipping:
        raise TargetError(f"{arg}: the sweep report has no threshold that skips steps and has SSIM values")
    passing = [r for r in skipping if r["ssim_p5"] >= floor]
    if not passing:
        best = max(skipping, key=lambda r: r["ssim_p5"])
        reachable = math.floor(best["ssim_p5"] * 1e4) / 1e4
        raise TargetError(
            f"{arg} {floor:g}: no swept threshold that skips steps keeps p5 SSIM >= {floor:g}; the best is "
            f"{best['ssim_p5']:.4f} at threshold {best['threshold']:g}; nearest: {arg} {reachable:.4f}"
        )
    return max(passing, key=lambda r: (r.get("speedup") or 0.0, r["threshold"]))


# ------------------------------------------------------------------------------------------ evidence


def committed(variant: str, kind: str) -> Path | None:
    """The committed ``traces/traces.parquet`` or ``report/summary.json`` of a variant under results/ (the installed
    mflux release's folder when there is one, else the newest; hardware folders in name order), or None."""
    from teacache._compat import installed_mflux, parse_release

    name = {"traces": "traces/traces.parquet", "report": "report/summary.json"}[kind]
    found = sorted(RESULTS.glob(f"*/{variants.get(variant).name}/*/{name}"))
    if not found:
        return None
    release = installed_mflux()

    def key(path: Path):
        version = path.parents[1].name
        try:
            parsed = parse_release(version)
        except ValueError:
            parsed = (0,)
        return (version == release, parsed)

    return max(found, key=key)  # max keeps the first of equals: hardware folders in name order


def replayed_computed(
    traces_path: str | Path, config: GateConfig, num_steps: int, variant: str | None = None
) -> tuple[np.ndarray, np.ndarray, int]:
    """(thresholds, median computed steps per threshold, runs replayed) of the gate on recorded traces.

    The traces must hold runs of ``num_steps`` steps: a schedule's skips depend on where its steps fall, so
    traces of another length say nothing exact about this one (TargetError says so).
    """
    from calib.traces.errors import TraceError
    from calib.traces.reader import REPLAY_COLUMNS, load_traces

    try:
        traces = load_traces([traces_path], variant=variant, require=REPLAY_COLUMNS, every_step=True)
    except TraceError as exc:
        raise TargetError(f"--teacache-traces: {exc}") from None
    runs = [r for r in traces.runs() if r.num_steps == num_steps]
    if not runs:
        recorded = ", ".join(str(n) for n in traces.num_steps["values"])
        raise TargetError(
            f"--steps {num_steps}: the calibration traces {_rel(traces_path)} hold runs of {recorded} steps, none of "
            f"{num_steps}; use their step count, give --teacache-threshold, or record traces at {num_steps} steps "
            "(teacache-calib record) and pass them with --teacache-traces"
        )
    x = np.array([[np.nan if v is None else v for v in r.x] for r in runs], dtype=float)
    sigmas = None
    if config.rescale.form == "poly+sigma" and runs[0].sigma is not None:
        sigmas = np.array([r.sigma for r in runs], dtype=float)
    masks = replay_skip_masks(
        x,
        config.rescale,
        GRID,
        num_steps,
        sigmas,
        skip_first_n_steps=config.skip_first_n_steps,
        skip_last_n_steps=config.skip_last_n_steps,
        max_consecutive_skips=config.max_consecutive_skips,
    )
    computed = np.median(num_steps - masks.sum(axis=2), axis=1)
    return GRID, computed, len(runs)


def _rel(path: str | Path) -> str:
    path = Path(path).resolve()
    try:
        return str(path.relative_to(CHECKOUT))
    except ValueError:
        return str(path)


def by_speedup(
    variant: str,
    speedup: float,
    num_steps: int,
    config: GateConfig,
    rescale_source: str,
    traces: str | Path | None = None,
    arg: str = "--teacache-speedup",
) -> ThresholdChoice:
    """The threshold whose replayed schedule on the variant's calibration traces computes about N / S steps."""
    speedup = check_speedup(speedup, arg)
    path = Path(traces) if traces is not None else committed(variant, "traces")
    if path is None:
        raise TargetError(
            f"{arg}: {variant} has no committed calibration traces under results/; pass --teacache-traces (a "
            "teacache-calib record traces.parquet) or give --teacache-threshold"
        )
    ts, computed, n_runs = replayed_computed(path, config, num_steps, variant)
    threshold, count = choose_for_speedup(ts, computed, num_steps, speedup, arg)
    return _speedup_choice(
        threshold, count, speedup, num_steps,
        evidence=f"gate replayed on {n_runs} runs of {_rel(path)} with {rescale_source}",
        source={"kind": "replay", "traces": _rel(path), "runs": n_runs, "rescale": rescale_source},
    )  # fmt: skip


def _speedup_choice(threshold: float, count: float, speedup: float, num_steps: int, evidence: str, source: dict):
    """The ThresholdChoice of a speedup target: the threshold, and the computed steps its schedule gives."""
    return ThresholdChoice(
        threshold=threshold,
        target=f"speedup {speedup:g}x at {num_steps} steps",
        expected={"computed_steps": count, "skipped_steps": num_steps - count, "ideal_speedup": num_steps / count},
        evidence=evidence,
        source=source,
    )


def read_report_rows(report: str | Path | None, variant: str, arg: str = "--teacache-report") -> tuple[list, Path]:
    """The per-threshold rows of a report's summary.json (a file or its folder; default: the committed one)."""
    path = Path(report) if report is not None else committed(variant, "report")
    if path is None:
        raise TargetError(f"--teacache-ssim: {variant} has no committed sweep report under results/; pass {arg}")
    if path.is_dir():
        path = path / "summary.json"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        rows = data["thresholds"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise TargetError(f"{arg}: cannot read {path} as a teacache-bench report summary.json ({exc})") from None
    found = data.get("variant")
    if found is not None and variants.find(found) is not variants.find(variant):
        raise TargetError(f"{arg}: {path} reports {found}, not {variant}")
    return rows, path


def by_quality(
    variant: str, floor: float, report: str | Path | None = None, arg: str = "--teacache-ssim"
) -> ThresholdChoice:
    """The fastest threshold of a sweep report (given, or the variant's committed one) with p5 SSIM >= ``floor``."""
    floor = check_floor(floor, arg)
    rows, path = read_report_rows(report, variant)
    row = choose_for_quality(rows, floor, arg)
    return ThresholdChoice(
        threshold=float(row["threshold"]),
        target=f"p5 SSIM >= {floor:g}",
        expected={"ssim_p5": row["ssim_p5"], "skipped_steps": row["skipped"], "speedup": row["speedup"]},
        evidence=f"the fastest threshold of {_rel(path)} that keeps it (measured medians over {row['n']} runs)",
        source={"kind": "sweep report", "report": _rel(path)},
    )


def threshold_for(
    model_or_variant,
    *,
    speedup: float | None = None,
    ssim: float | None = None,
    num_steps: int | None = None,
    coefficients: RescaleFunction | None = None,
    traces: str | Path | None = None,
    report: str | Path | None = None,
) -> ThresholdChoice:
    """The API's door: a threshold for a speedup or a p5 SSIM floor, with its evidence, to pass to apply_teacache.

    ``model_or_variant``: an mflux pipeline or a variant name. ``num_steps``: the schedule length (default: the
    variant's). ``coefficients``: the rescale function the generation will use (default: packaged).
    """
    if (speedup is None) == (ssim is None):
        raise TargetError("threshold_for: give exactly one of speedup= or ssim=")
    name = model_or_variant if isinstance(model_or_variant, str) else variants.variant_of(model_or_variant)
    spec = variants.get(name)
    if ssim is not None:
        return by_quality(spec.name, ssim, report, arg="ssim")
    rescale = coefficients if coefficients is not None else spec.rescale()
    where = "the given coefficients" if coefficients is not None else f"the packaged {spec.name} rescale function"
    config = GateConfig(1.0, rescale, skip_first_n_steps=spec.skip_first_n_steps)
    steps = num_steps if num_steps is not None else spec.generation.steps
    return by_speedup(spec.name, speedup, steps, config, where, traces, arg="speedup")


# ------------------------------------------------------------------------------------- First-Block Cache


def fbcache_max_speedup(num_steps: int, config, num_blocks: int | None = None) -> float:
    """The most First-Block Cache can give at ``num_steps`` steps under ``config``'s forced steps and cap: every
    step it may skip skipped (the replay on changes of 0), with ``num_blocks`` blocks, or any number (None)."""
    most = int(fbcache_masks(np.zeros((num_steps, num_steps)), [1.0], config)[0].sum())
    return ideal_bound(num_steps, num_steps - most, num_blocks)


def fbcache_masks(changes: np.ndarray, thresholds, config) -> np.ndarray:
    """The replay's skip masks of one run: bool ``[thresholds, steps]`` (teacache.fbcache imports MLX: here only)."""
    from teacache.fbcache import replay_skip_masks

    return replay_skip_masks(
        changes[None],
        thresholds,
        skip_first_n_steps=config.skip_first_n_steps,
        skip_last_n_steps=config.skip_last_n_steps,
        max_consecutive_skips=config.max_consecutive_skips,
    )[:, 0]


def fbcache_by_speedup(
    changes,
    speedup: float,
    num_blocks: int,
    config,
    evidence: str = "First-Block Cache replayed on a calibration generation",
    arg: str = "--teacache-speedup",
) -> ThresholdChoice:
    """First-Block Cache's threshold whose replay on one calibration generation's change table (``changes[t, s]``,
    :attr:`teacache.fbcache.FBCacheHandle.changes`) computes the steps nearest speedup S under its own bound
    (block 0 runs at every step). ``config``: the forced steps and cap of the run to come. The replayed skipped
    steps are in ``source["skipped_steps"]``: a live run of the same generation at this threshold takes them."""
    from teacache.fbcache import ideal_speedup

    c = np.asarray(changes, dtype=float)
    num_steps = c.shape[0]
    masks = fbcache_masks(c, GRID, config)
    computed = num_steps - masks.sum(axis=1)
    threshold, count = choose_for_speedup(GRID, computed, num_steps, speedup, arg, num_blocks=num_blocks)
    skipped = [int(s) for s in np.flatnonzero(masks[int(np.flatnonzero(threshold == GRID)[0])])]
    return ThresholdChoice(
        threshold=threshold,
        target=f"speedup {speedup:g}x at {num_steps} steps",
        expected={
            "computed_steps": int(count),
            "skipped_steps": len(skipped),
            "ideal_speedup": ideal_speedup(num_steps, len(skipped), num_blocks),
        },
        evidence=evidence,
        source={"kind": "fbcache-replay", "skipped_steps": skipped, "num_blocks": num_blocks},
    )


# --------------------------------------------------------------------------------------------- MagCache


def magcache_curve(variant: str, traces: str | Path | None = None, arg: str = "--teacache-traces"):
    """(MagCache's ratio curve, the traces it came from): from ``traces`` or the variant's committed ones."""
    import pandas as pd

    from teacache.magcache import ratio_curve

    path = Path(traces) if traces is not None else committed(variant, "traces")
    if path is None:
        raise TargetError(
            f"{arg}: {variant} has no committed calibration traces under results/ to calibrate MagCache's curve "
            "from; pass --teacache-traces (a teacache-calib record traces.parquet)"
        )
    try:
        frame = pd.read_parquet(path)
    except Exception as exc:  # noqa: BLE001 - pyarrow raises many types for a missing or damaged file
        raise TargetError(f"{arg}: cannot read {path} as a trace table ({type(exc).__name__})") from None
    try:
        return ratio_curve(frame), path
    except TeaCacheError as exc:
        raise TargetError(f"{arg}: {path}: {exc}") from None


def magcache_by_speedup(curve, speedup: float, num_steps: int, traces: Path, arg: str = "--teacache-speedup"):
    """MagCache's threshold whose schedule (the same for every prompt) computes about N / S steps."""
    from teacache.magcache import MagCacheConfig, schedule

    computed = [schedule(MagCacheConfig(float(t), curve), num_steps).computed for t in GRID]
    threshold, count = choose_for_speedup(GRID, computed, num_steps, speedup, arg)
    return _speedup_choice(
        threshold, count, speedup, num_steps,
        evidence=f"MagCache's schedule on the ratio curve of {_rel(traces)}",
        source={"kind": "magcache-schedule", "traces": _rel(traces)},
    )  # fmt: skip
