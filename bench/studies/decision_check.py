"""Does a fit criterion predict the measured front? Sweeps of several rescale functions, compared pair by pair.

``teacache-bench decision-check --candidate LABEL=SWEEP_DIR=FIT_JSON ... --out DIR`` reads each
candidate's ``teacache-bench sweep`` folder (same prompts and seeds) and the fit.json it was swept with,
and writes ``comparison.md``, ``points.csv``, ``paired.csv``, ``areas.csv``, ``verdicts.json``, ``fronts.png`` and
``provenance.json``.

Work is counted in computed steps (the ideal speedup N/computed), not in measured speedup: the check is
about which steps a rescale function skips, and measured timing on a shared CPU is noise at this model
size. Each candidate's thresholds give each prompt a few (computed, SSIM) points; per prompt, SSIM is
interpolated linearly in computed steps, so candidates are compared at equal work on the same prompt:

- ``at N computed``: the per-prompt difference of interpolated SSIM at N computed steps;
- ``mean over A..B``: the per-prompt difference of the mean interpolated SSIM over the computed steps
  A..B that every candidate reached on that prompt (the front's area, per prompt).

Each row gives the median difference over prompts with a bootstrap CI (``bench.report.stats.bootstrap_median_ci``).
"""

from __future__ import annotations

import io
import itertools
import json
import math
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from bench.report import front, stats
from bench.sweep import records
from bench.sweep.baselines import TEACACHE
from calib.fit.result import FitResult
from calib.run.arguments import CommandParser, Writes, path_argument
from calib.run.command import command
from teacache.errors import InputError
from teacache.io import atomic_path, write_json, write_text
from teacache.provenance import collect

PROG = "teacache-bench decision-check"

PAIRED_COLUMNS = ["a", "b", "measure", "n_prompts", "median_difference", "ci_low", "ci_high", "outcome"]


def parse_candidate(value: str) -> tuple[str, Path, Path]:
    parts = value.split("=")
    if len(parts) != 3 or not all(parts):
        raise InputError(f"--candidate: expected LABEL=SWEEP_DIR=FIT_JSON, got {value!r}")
    label, sweep, fit = parts
    if not (Path(sweep) / "runs.parquet").is_file():
        raise InputError(f"--candidate {label}: {sweep} holds no runs.parquet (a teacache-bench sweep folder)")
    if not Path(fit).is_file():
        raise InputError(f"--candidate {label}: {fit} does not exist (the fit.json the sweep used)")
    return label, Path(sweep), Path(fit)


def parse_levels(text: str) -> list[int]:
    try:
        levels = [int(v) for v in text.split(",")]
    except ValueError:
        levels = []
    if not levels or min(levels) < 1:
        raise InputError(f"--levels: expected comma-separated computed step counts (e.g. 18,13,10,8,6), got {text!r}")
    return levels


def teacache_points(runs: pd.DataFrame) -> pd.DataFrame:
    """One row per (candidate, threshold): pairs, computed steps, ideal speedup, SSIM median, p5 and CI."""
    rows = []
    for (label, threshold), at in runs.groupby(["candidate", "threshold"], sort=True):
        ssim = at["ssim"].to_numpy(dtype=float)
        low, high = stats.bootstrap_median_ci(ssim)
        rows.append({
            "candidate": label, "threshold": float(threshold), "n_pairs": len(at),
            "computed_median": stats.quantile(at["computed"], 0.5), "computed_min": int(at["computed"].min()),
            "computed_max": int(at["computed"].max()),
            "ideal_speedup_median": stats.quantile(at["ideal_speedup"], 0.5),
            "ssim_median": stats.quantile(ssim, 0.5), "ssim_p5": stats.quantile(ssim, 0.05),
            "ssim_ci_low": low, "ssim_ci_high": high,
        })  # fmt: skip
    return pd.DataFrame(rows)


def interpolated(runs: pd.DataFrame, levels: np.ndarray) -> dict[str, pd.DataFrame]:
    """Per candidate: ``[prompt pair x computed level]`` SSIM, linear in computed steps, NaN outside its points."""
    out = {}
    for label, at in runs.groupby("candidate", sort=True):
        table = {}
        for pair, points in at.groupby("pair_id", sort=True):
            mean = points.groupby("computed")["ssim"].mean()  # thresholds that computed as many steps
            c, q = mean.index.to_numpy(dtype=float), mean.to_numpy(dtype=float)
            values = np.interp(levels, c, q)
            values[(levels < c.min()) | (levels > c.max())] = np.nan
            table[pair] = values
        out[label] = pd.DataFrame(table, index=levels).T
    return out


def paired(curves: dict[str, pd.DataFrame], levels: Sequence[int]) -> pd.DataFrame:
    """Every two candidates: SSIM differences (a minus b) per prompt at fixed levels and as a mean over the
    range both reached, with bootstrap CIs of the median."""
    rows = []
    for a, b in itertools.combinations(curves, 2):
        left, right = curves[a], curves[b]
        common = left.index.intersection(right.index)
        left, right = left.loc[common], right.loc[common]
        for level in levels:
            diff = (left[level] - right[level]).to_numpy(dtype=float) if level in left.columns else np.array([])
            rows.append(_row(a, b, f"at {level} computed", diff))  # outside every run's range: not compared
        both = left.notna() & right.notna()
        means = [
            float(left.loc[p][both.loc[p]].mean() - right.loc[p][both.loc[p]].mean())
            for p in common
            if both.loc[p].sum() >= 2
        ]
        lo, hi = int(min(left.columns[both.any()])), int(max(left.columns[both.any()]))
        rows.append(_row(a, b, f"mean over the computed steps both reached ({lo}..{hi} at most)", np.array(means)))
    return pd.DataFrame(rows, columns=PAIRED_COLUMNS)


def _row(a: str, b: str, measure: str, diff: np.ndarray) -> dict:
    diff = diff[~np.isnan(diff)]
    low, high = stats.bootstrap_median_ci(diff)
    if diff.size == 0:
        outcome = "not compared"
    else:
        outcome = f"{a} better" if low > 0 else f"{b} better" if high < 0 else "cannot be told apart"
    return {
        "a": a, "b": b, "measure": measure, "n_prompts": int(diff.size),
        "median_difference": float(np.median(diff)) if diff.size else math.nan,
        "ci_low": low, "ci_high": high, "outcome": outcome,
    }  # fmt: skip


def criterion_picks(scores: pd.DataFrame, selected_by: dict[str, str] | None = None) -> dict[str, str]:
    """Each criterion's pick among the swept candidates: the full fit's own selection (cv R^2 with its
    one-standard-error rule) where that candidate was swept, else the best score among the swept."""
    fitted = scores["fitted"] if "fitted" in scores else pd.Series(scores.index, index=scores.index)
    picks = {"cv_r2": str(scores["cv_r2"].astype(float).idxmax()),
             "decision_excess": str(scores["decision_excess"].astype(float).idxmin())}  # fmt: skip
    for criterion, label in (selected_by or {}).items():
        swept = fitted[fitted == label]
        if criterion in picks and len(swept):
            picks[criterion] = str(swept.index[0])
    return picks


def verdicts(table: pd.DataFrame, scores: pd.DataFrame, picks: dict[str, str] | None = None) -> dict[str, str]:
    """Per criterion: did its pick among the swept candidates measure the better front (the per-prompt mean
    over equal work, CI of the median difference clear of 0) than every other swept candidate?"""
    mean = table[table["measure"].str.startswith("mean over")]
    out = {}
    for criterion, best in (picks or criterion_picks(scores)).items():
        rows = mean[(mean["a"] == best) | (mean["b"] == best)]
        wins = (rows["outcome"] == f"{best} better").sum()
        losses = rows["outcome"].str.endswith("better").sum() - wins
        if len(rows) and wins == len(rows):
            out[criterion] = f"{best}: better than every other candidate ({wins} of {len(rows)}, CIs clear of 0)"
        elif losses:
            out[criterion] = f"{best}: worse than {losses} of {len(rows)} other candidates"
        else:
            out[criterion] = f"{best}: better than {wins} of {len(rows)}, the rest cannot be told apart"
    return out


def front_areas(runs: pd.DataFrame) -> pd.DataFrame:
    """bench.report.front's area per rescale function (ideal speedup x median SSIM), on the TeaCache runs."""
    arms = runs.assign(arm=TEACACHE, rescale=runs["candidate"], arm_setting=runs["threshold"])
    pts = front.points(arms, ("ssim",))
    return front.rescale_areas(pts, speed="ideal_speedup_median")


def report(
    points: pd.DataFrame, table: pd.DataFrame, scores: pd.DataFrame, found: dict, inputs: list, areas: pd.DataFrame
) -> str:
    """comparison.md: the scores each criterion gave, the measured points, the paired differences, the verdicts."""
    score_rows = scores.reset_index(names="candidate")
    shown = points[["candidate", "threshold", "n_pairs", "computed_median", "computed_min", "computed_max",
                    "ideal_speedup_median", "ssim_median", "ssim_ci_low", "ssim_ci_high", "ssim_p5"]]  # fmt: skip
    lines = [
        "# Which fit criterion predicts the measured front?",
        "",
        "Written by `teacache-bench decision-check` (provenance.json beside this file). "
        + "\n\n".join(__doc__.split("\n\n")[2:4]),
        "",
        "## Scores from the fit (all candidates, held-out prompts)",
        "",
        markdown_table(score_rows),
        "",
        "## Measured points (SSIM against the paired vanilla run)",
        "",
        markdown_table(shown),
        "",
        "## Paired differences at equal computed steps (a minus b, median over prompts, 95% bootstrap CI)",
        "",
        markdown_table(table),
        "",
        "## Area each front dominates "
        "(bench.report.front.rescale_areas: ideal speedup x median SSIM, common reference)",
        "",
        markdown_table(areas),
        "",
        "## Verdict per criterion (its pick among the swept candidates, on the per-prompt mean over equal work)",
        "",
        *[f"- {criterion}: {text}" for criterion, text in found.items()],
        "",
        "## Sweeps",
        "",
        *[f"- {i['candidate']}: `{i['sweep_command']}`" for i in inputs],
        "",
    ]
    return "\n".join(lines)


def markdown_table(frame: pd.DataFrame) -> str:
    def cell(v) -> str:
        return f"{v:.4g}" if isinstance(v, float) else str(v)

    lines = ["| " + " | ".join(frame.columns) + " |", "|" + "---|" * len(frame.columns)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in frame.itertuples(index=False)]
    return "\n".join(lines)


def fronts_png(points: pd.DataFrame, scores: pd.DataFrame) -> bytes:
    # heavy (matplotlib): loaded after the arguments are checked
    from matplotlib.figure import Figure

    fig = Figure(figsize=(11, 4.6), dpi=100, layout="constrained")
    axes = fig.subplots(1, 2)
    for label, at in points.groupby("candidate", sort=False):
        s = scores.loc[label]
        name = f"{label} (cv R^2 {s['cv_r2']:.3f}, decision excess {s['decision_excess']:.3f})"
        at = at.sort_values("computed_median")
        err = [at["ssim_median"] - at["ssim_ci_low"], at["ssim_ci_high"] - at["ssim_median"]]
        axes[0].errorbar(at["computed_median"], at["ssim_median"], yerr=err, marker="o", capsize=3, label=name)
        axes[1].plot(at["ideal_speedup_median"], at["ssim_p5"], marker="o", label=name)
    axes[0].set_xlabel("computed steps (median over prompts)")
    axes[0].set_ylabel("SSIM against vanilla: median, 95% CI")
    axes[1].set_xlabel("ideal speedup N/computed (median)")
    axes[1].set_ylabel("SSIM against vanilla: p5")
    for ax in axes:
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle("measured fronts of the candidates each criterion selects", fontsize=10)
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue()


# Its tables, plot and comparison, in a folder of its own (or a criteria check's, which runs it there).
WRITES = Writes(PROG, names=("points.csv", "paired.csv", "fronts.png", "provenance.json", "verdicts.json",
                             "areas.csv", "comparison.md"))  # fmt: skip


def setup_arg_parser() -> CommandParser:
    parser = CommandParser(prog=PROG, description=__doc__.split("\n\n")[0])
    parser.add_argument("--candidate", action="append", required=True, metavar="LABEL=SWEEP_DIR=FIT_JSON")
    parser.add_argument(
        "--scores", type=Path, required=True, help="the fit.json of the full fit: each criterion's scores"
    )
    parser.add_argument("--levels", default="6,8,10,13,17", help="computed steps to compare at")
    parser.add_argument("--out", type=path_argument, required=True)
    return parser


@command(PROG)
def main(argv: list[str] | None = None) -> int:
    args, argv = setup_arg_parser().parse_checked(argv, WRITES)
    candidates = [parse_candidate(v) for v in args.candidate]
    return compare(candidates, args.scores, parse_levels(args.levels), args.out, [*PROG.split(), *argv])


def compare(candidates: list[tuple[str, Path, Path]], full_fit: Path, levels: list[int], out: Path, argv: list) -> int:
    """Compare the (label, sweep folder, fit.json) candidates into ``out``, scored by ``full_fit``; ``argv``: the
    command line provenance.json records (one that makes this comparison)."""
    full = FitResult.read(full_fit)
    swept = {label: FitResult.read(fit_path).selected.label for label, _, fit_path in candidates}
    frames, scores, inputs = [], {}, []
    for label, sweep, fit_path in candidates:
        runs = records.derive_columns(pd.read_parquet(sweep / records.RUNS.file), file=str(sweep / records.RUNS.file))
        frames.append(runs[runs["kind"] == "teacache"].assign(candidate=label))
        fitted = swept[label]
        cand = next((c for c in full.candidates or () if c.label == fitted), None)
        if cand is None:
            raise InputError(f"--scores has no candidate {fitted!r}")
        scores[label] = {"cv_r2": cand["cv_r2"], "decision_excess": cand["decision_excess"], "fitted": fitted}
        swept_by = json.loads((sweep / "provenance.json").read_text()).get("command")
        inputs.append({"candidate": label, "sweep": str(sweep), "fit": str(fit_path), "sweep_command": swept_by})
    runs = pd.concat(frames, ignore_index=True)
    points = teacache_points(runs)
    grid = np.arange(int(runs["computed"].min()), int(runs["computed"].max()) + 1)
    table = paired(interpolated(runs, grid), levels)
    score_frame = pd.DataFrame(scores).T
    out.mkdir(parents=True, exist_ok=True)
    write_text(out / "points.csv", points.to_csv(index=False))
    write_text(out / "paired.csv", table.to_csv(index=False))
    with atomic_path(out / "fronts.png") as tmp:
        tmp.write_bytes(fronts_png(points, score_frame))

    write_json(out / "provenance.json", collect(argv, inputs=inputs))
    picks = criterion_picks(score_frame, (full.selection or {}).get("selected_by"))
    found = verdicts(table, score_frame.drop(columns="fitted"), picks)
    write_json(out / "verdicts.json", {"picks": picks, "verdicts": found, "scores": scores})
    areas = front_areas(runs)
    write_text(out / "areas.csv", areas.to_csv(index=False))
    write_text(out / "comparison.md", report(points, table, score_frame, found, inputs, areas))
    print(points.to_string(index=False))
    print(table.to_string(index=False))
    for criterion, text in found.items():
        print(f"{criterion} pick: {text}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
