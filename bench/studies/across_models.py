"""``teacache-bench across-models``: the two quality questions, answered side by side on several trained models.

    teacache-bench across-models --model tiny-shapes=CRITERIA_DIR=BASELINES_REPORT_DIR \\
        --model tiny-open-flux1=CRITERIA_DIR=BASELINES_REPORT_DIR --out DIR

1. TeaCache against fewer steps, a static schedule and mflux's step cache at equal work: the rows of each
   model's ``baselines_comparison.csv`` (``teacache-bench report`` of a sweep with ``--baselines``) at the
   ideal speedup N / computed, each a paired bootstrap CI of the SSIM difference, for the rescale functions
   its sweep named with ``--compare-coefficients`` (the sweep's packaged arm is left out).
2. Which fit criterion picks the function with the better measured front among safe candidates: each
   model's ``teacache-bench criteria`` folder (``verdicts.json``, ``paired.csv``).

Writes DIR/summary.md, DIR/fronts.png, DIR/baselines.csv, DIR/criteria.csv, DIR/evidence.json (what each criterion's
picks did on each model, and the rule the evidence supports) and DIR/provenance.json.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pandas as pd

from calib.run.arguments import CommandParser, Writes, path_argument
from calib.run.command import command
from teacache.errors import InputError
from teacache.io import atomic_path, write_json, write_text
from teacache.provenance import collect
from teacache.templating import template_environment

PROG = "teacache-bench across-models"
CRITERIA = ("cv_r2", "decision_excess")
EQUAL_WORK = "ideal_speedup_median"
PROG_CRITERIA = "teacache-bench criteria"


def parse_model(value: str) -> tuple[str, Path, Path]:
    parts = value.split("=")
    if len(parts) != 3 or not all(parts):
        raise InputError(f"--model: expected NAME=CRITERIA_DIR=BASELINES_REPORT_DIR, got {value!r}")
    name, criteria, baselines = parts[0], Path(parts[1]), Path(parts[2])
    report = "teacache-bench report of a --baselines sweep"
    needed = ((criteria / "verdicts.json", PROG_CRITERIA), (criteria / "paired.csv", PROG_CRITERIA),
              (baselines / "baselines_comparison.csv", report))  # fmt: skip
    for path, what in needed:
        if not path.is_file():
            raise InputError(f"--model {name}: {path} does not exist (written by {what})")
    return name, criteria, baselines


def baseline_rows(name: str, folder: Path) -> pd.DataFrame:
    table = pd.read_csv(folder / "baselines_comparison.csv")
    table = table[(table["speed"] == EQUAL_WORK) & (table["rescale"] != "packaged")].drop(columns="speed")
    table["rescale"] = table["rescale"].map(lambda r: Path(r).parent.name if r.endswith("fit.json") else r)
    return table.assign(model=name)


def criterion_outcomes(name: str, folder: Path) -> tuple[list[dict], pd.DataFrame]:
    """Per criterion: its pick, and the per-prompt mean over equal work against each other candidate."""
    found = json.loads((folder / "verdicts.json").read_text(encoding="utf-8"))
    paired = pd.read_csv(folder / "paired.csv")
    mean = paired[paired["measure"].str.startswith("mean over")]
    rows = []
    for criterion in CRITERIA:
        pick = found["picks"][criterion]
        against = mean[(mean["a"] == pick) | (mean["b"] == pick)]
        wins = int((against["outcome"] == f"{pick} better").sum())
        losses = int(against["outcome"].str.endswith("better").sum()) - wins
        rows.append({"model": name, "criterion": criterion, "pick": pick, "compared": len(against), "wins": wins,
                     "losses": losses, "verdict": found["verdicts"][criterion]})  # fmt: skip
    return rows, mean.assign(model=name)


def supported_rule(outcomes: pd.DataFrame) -> dict:
    """The criterion whose picks never measured worse and measured better on at least one model, if exactly one is."""
    per = outcomes.groupby("criterion").agg(wins=("wins", "sum"), losses=("losses", "sum"),
                                            models_won=("wins", lambda w: int((w > 0).sum())))  # fmt: skip
    clean = [c for c in CRITERIA if c in per.index and per.loc[c, "losses"] == 0 and per.loc[c, "wins"] > 0]
    if len(clean) == 1:
        c = clean[0]
        why = (f"its picks measured better fronts in {per.loc[c, 'wins']} comparison(s) on "
               f"{per.loc[c, 'models_won']} model(s) and worse in none")  # fmt: skip
        return {"criterion": c, "why": why}
    return {"criterion": None, "why": "the measured fronts do not single out one criterion on every model"}


def fronts_png(baselines: pd.DataFrame) -> bytes:
    """Per model: SSIM against N / computed for each rescale function and each baseline, side by side."""
    # heavy (matplotlib): loaded after the arguments are checked
    from matplotlib.figure import Figure

    from bench.report.plots import figure_png

    models = list(dict.fromkeys(baselines["model"]))
    fig = Figure(figsize=(5.5 * len(models), 4.4), dpi=100, layout="constrained")
    axes = fig.subplots(1, len(models), squeeze=False)[0]
    for ax, model in zip(axes, models, strict=True):
        rows = baselines[baselines["model"] == model]
        for rescale, at in rows.groupby("rescale", sort=True):
            at = at.drop_duplicates("threshold").sort_values("teacache_speedup")
            ax.plot(at["teacache_speedup"], at["teacache_quality"], marker="o", lw=2, label=f"TeaCache, {rescale}")
        for arm, at in rows.groupby("baseline_arm", sort=True):
            at = at.drop_duplicates("baseline_setting").sort_values("baseline_speedup")
            ax.plot(at["baseline_speedup"], at["baseline_quality"], marker="s", ls="--", alpha=0.8, label=arm)
        ax.set_title(model, fontsize=10)
        ax.set_xlabel("ideal speedup N / computed")
        ax.set_ylabel("SSIM against vanilla (median over prompts)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle("TeaCache and the baselines at equal work", fontsize=10)
    return figure_png(fig)


def _is_evidence(path: Path) -> bool:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(data, dict) and {"criteria", "supported_rule"} <= set(data)


# Its tables, plot and summary, in a folder of its own (its evidence.json marks it: a RUN.md beside is kept); the
# committed comparisons in results/comparisons/ are its to regenerate.
WRITES = Writes(PROG, names=("baselines.csv", "fronts.png", "criteria.csv", "evidence.json", "provenance.json",
                             "summary.md"), marker="evidence.json", is_own=_is_evidence,
                regenerates=("results/comparisons",))  # fmt: skip


def setup_arg_parser() -> CommandParser:
    parser = CommandParser(prog=PROG, description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", action="append", required=True, metavar="NAME=CRITERIA_DIR=BASELINES_REPORT_DIR")
    parser.add_argument("--out", type=path_argument, required=True)
    return parser


@command(PROG)
def main(argv: list[str] | None = None) -> int:
    args, argv = setup_arg_parser().parse_checked(argv, WRITES)
    models = [parse_model(v) for v in args.model]
    baselines = pd.concat([baseline_rows(name, b) for name, _, b in models], ignore_index=True)
    outcome_rows, paired = [], []
    for name, criteria, _ in models:
        rows, mean = criterion_outcomes(name, criteria)
        outcome_rows += rows
        paired.append(mean)
    outcomes = pd.DataFrame(outcome_rows)
    paired_all = pd.concat(paired, ignore_index=True)
    rule = supported_rule(outcomes)
    tally = baselines.groupby(["model", "baseline_arm", "outcome"]).size().unstack(fill_value=0).reset_index()
    args.out.mkdir(parents=True, exist_ok=True)
    write_text(args.out / "baselines.csv", baselines.to_csv(index=False))
    with atomic_path(args.out / "fronts.png") as tmp:
        tmp.write_bytes(fronts_png(baselines))
    write_text(args.out / "criteria.csv", paired_all.to_csv(index=False))
    write_json(args.out / "evidence.json", {"criteria": outcome_rows, "supported_rule": rule})
    inputs = [{"model": n, "criteria": str(c), "baselines": str(b)} for n, c, b in models]
    write_json(args.out / "provenance.json", collect([*PROG.split(), *argv], inputs=inputs))
    text = template_environment("bench.report").get_template("across_models.md.j2").render(
        models=[n for n, _, _ in models], baselines=baselines.to_dict("records"), tally=tally.to_dict("records"),
        outcomes=outcome_rows, paired=paired_all.to_dict("records"), rule=rule, inputs=inputs,
        outcome_names=[c for c in ("beats", "tie", "loses") if c in tally.columns],
    )  # fmt: skip
    write_text(args.out / "summary.md", text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
