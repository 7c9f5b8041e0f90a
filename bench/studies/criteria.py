"""``teacache-bench criteria``: which fit criterion picks the function with the better measured front?

From one model's traces and full fit.json it takes each criterion's safe pick (CV R^2 with the
one-standard-error rule, the decision score) and the best safe candidate of the other kind (time-aware
or x only) by each criterion, or with ``--candidate LABEL`` the fit's own selection and the named candidates
only (another rule's pick, e.g. that of ``teacache-calib fit --no-splines --se best``), refits each alone
(checked against the full fit's numbers for it), chooses per candidate the thresholds whose replayed
schedules compute the ``--levels`` step counts (median over the recorded runs), sweeps every candidate on
the same prompts and seeds, and hands the sweeps to ``teacache-bench decision-check``:

    OUT/candidates/<label>/fit.json   one candidate, refitted alone (teacache-calib fit)
    OUT/sweeps/<label>/               teacache-bench sweep at its thresholds
    OUT/fingerprint.json              the inputs the folder was made from (a rerun with others is refused)
    OUT/plan.json                     candidates, why each was taken, thresholds and predicted steps
    OUT/comparison.md ...             decision-check's outputs

Every stage resumes: an earlier refit of the same traces is kept, a sweep resumes its pairs, and the
comparison is not redone when the candidates and thresholds are those of OUT/plan.json. One writer at a time
(``calib.run.folder``); a folder from before fingerprints is checked against its settings.json; ``--force-new``
starts afresh.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from bench.studies import decision_check
from bench.sweep import command as sweep_command
from bench.sweep.settings import plan as sweep_plan
from calib.fit import FitOptions
from calib.fit import fit as fit_traces
from calib.fit.file import same_selection
from calib.fit.options import flags
from calib.fit.result import FitResult
from calib.run import fingerprint
from calib.run.arguments import CommandParser, Writes, path_argument
from calib.run.command import command, run_command
from calib.run.fingerprint import SettingsMismatch
from calib.run.folder import RunFolder
from calib.run.prompts import load_prompts, parse_seeds
from teacache import gate_batch, variants
from teacache.errors import InputError
from teacache.io import file_sha256, read_json_object, write_json
from teacache.outputs import granted

PROG = "teacache-bench criteria"
SETTINGS_NAME = "settings.json"
LABEL = re.compile(r"^poly(\d)(?:\+(step|sigma)(\d)(?:\+x\*(?:step|sigma)(\d))?)?-?(free|origin|monotone)?$")
MONO_STEP_LABEL = re.compile(r"^mono(\d+)\+step(\d+)$")  # pieces in x, pieces in the step fraction


def fit_options(label: str) -> dict:
    """A candidate's label -> the ``calib.fit.FitOptions`` fields that fit it alone (``flags`` renders them as the
    ``teacache-calib fit`` options)."""
    mono = MONO_STEP_LABEL.match(label)
    if mono is not None:
        pieces, step_pieces = mono.groups()
        return {"form": "mono+step", "degree": int(pieces), "time_degree": int(step_pieces), "mode": "monotone"}
    match = LABEL.match(label)
    if match is None:
        raise InputError(f"candidate label {label!r} is not one of teacache-calib fit's")
    degree, time_name, time_degree, interaction, mode = match.groups()
    if time_name is None:
        return {"form": "poly", "degree": int(degree), "mode": mode or "free"}
    return {
        "form": f"poly+{time_name}", "degree": int(degree), "time_degree": int(time_degree),
        "interaction_degree": int(interaction or 0), "mode": mode or "free",
    }  # fmt: skip


def choose_candidates(fit: dict, named: list[str] | None = None) -> dict[str, str]:
    """label -> why: each criterion's pick, and each criterion's best safe candidate of the other kind; with
    ``named`` labels, the fit's own selection and those candidates of the fit only."""
    if named:
        labels = {c["label"] for c in fit["candidates"]}
        unknown = [label for label in named if label not in labels]
        if unknown:
            raise InputError(f"--candidate: {unknown[0]!r} is not one of the candidates of --fit")
        select = (fit.get("options") or {}).get("select") or "cv_r2"
        chosen = {fit["selected"]["label"]: f"the fit's selection (--select {select})"}
        for label in named:
            chosen.setdefault(label, "named by --candidate")
        return chosen
    safe = [c for c in fit["candidates"] if c.get("safety", {}).get("safe")]
    by = fit["selection"]["selected_by"]
    chosen = {by["cv_r2"]: "cv R^2 pick (one-standard-error rule, safe)"}
    chosen.setdefault(by["decision_excess"], "decision score pick (safe)")
    for label in list(chosen):
        time_aware = "+" in label
        other = [c for c in safe if ("+" in c["label"]) != time_aware]
        if not other:
            continue
        best_cv = max(other, key=lambda c: c["cv_r2"])["label"]
        best_decision = min(other, key=lambda c: c["decision_excess"])["label"]
        kind = "x only" if time_aware else "time-aware"
        chosen.setdefault(best_cv, f"best safe {kind} candidate by cv R^2")
        chosen.setdefault(best_decision, f"best safe {kind} candidate by the decision score")
    return chosen


def thresholds_for_levels(
    rescale, traces: pd.DataFrame, levels: list[int], skip_first: int
) -> list[tuple[int, float, float]]:
    """Per level: (level, threshold, median computed steps over the runs) from replayed schedules.

    The threshold is the smallest on a geometric grid (4 significant digits) whose median computed count
    over the runs is at most the level. Each run is replayed as ``teacache.gate.replay`` reads it (its rows in
    step order, as many steps as rows), for the whole grid at once (``teacache.gate_batch``, decision for
    decision the gate's).
    """
    runs = [group.sort_values("step") for _, group in traces.groupby("run_id", sort=True)]
    width = max(len(run) for run in runs)
    x = np.full((len(runs), width), np.nan)
    sigmas = np.full((len(runs), width), np.nan)
    for i, run in enumerate(runs):
        x[i, : len(run)] = run["x_rel_l1"].to_numpy(dtype=float)
        sigmas[i, : len(run)] = run["sigma"].to_numpy(dtype=float)
    num_steps = np.array([len(run) for run in runs])
    grid = np.array(sorted({float(f"{t:.4g}") for t in np.geomspace(1e-4, 5.0, 600)}))
    skips = gate_batch.replay_skip_masks(x, rescale, grid, num_steps, sigmas, skip_first_n_steps=skip_first)
    medians = np.median(num_steps - gate_batch.skipped_counts(skips), axis=1)  # [thresholds]
    out = []
    for level in sorted(levels, reverse=True):
        reached = np.flatnonzero(medians <= level)
        if reached.size:
            out.append((level, float(grid[reached[0]]), float(medians[reached[0]])))
    return out


def earlier_settings(folder: Path, current: dict) -> dict:
    """A folder from before fingerprints keeps its settings in settings.json, without "candidates" when none
    were named; its refits and sweeps describe those inputs only."""
    settings = {"candidates": None, **read_json_object(folder / SETTINGS_NAME, SettingsMismatch)}
    return {"command": PROG, "settings": fingerprint.canonical(settings), "history": []}


def kept_fit(path: Path, label: str, traces_sha: str) -> bool:
    """An earlier refit of ``label`` alone from the same traces file: kept as it is (its provenance too)."""
    if not path.is_file():
        return False
    fit = FitResult.read(path)
    files = (fit.input or {}).get("files") or ()
    return fit.selected.label == label and [f.get("sha256") for f in files] == [traces_sha]


# The refitted candidates and their sweeps, and the decision check it runs into the same folder (--force-new removes
# them); a campaign's criteria/ in results/ is its to regenerate.
RESULTS = (SETTINGS_NAME, "plan.json", "candidates", "sweeps")
OUTPUTS = (*RESULTS, *decision_check.WRITES.names)
FOLDER = RunFolder(PROG, RESULTS, OUTPUTS, adopt=earlier_settings, adopted_from=SETTINGS_NAME)
WRITES = Writes(PROG, names=(*OUTPUTS, fingerprint.FILE), regenerates=("results",))


def setup_arg_parser() -> CommandParser:
    parser = CommandParser(prog=PROG, description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True, help="the variant the traces were recorded on")
    parser.add_argument("--fit", type=Path, required=True, help="the full fit.json of the traces (every candidate)")
    parser.add_argument("--traces", type=Path, required=True, help="the traces.parquet the fit was made from")
    parser.add_argument(
        "--prompts", default=None, help="prompt set of the sweeps (default: the model's campaign sweep set)"
    )
    parser.add_argument("--seeds", default="1", help="seeds of the sweeps (default 1, unseen by the traces' 0,1)")
    parser.add_argument("--levels", default="18,13,10,8,6", help="computed steps to reach and compare at")
    parser.add_argument(
        "--candidate",
        action="append",
        metavar="LABEL",
        help="compare the fit's selection with this candidate of --fit (repeatable; e.g. another rule's pick) "
        "instead of each criterion's picks and the best of the other kind",
    )
    parser.add_argument("--out", type=path_argument, required=True)
    parser.add_argument("--force-new", action="store_true", help="discard what OUT holds from an earlier check")
    return parser


@command(PROG)
def main(argv: list[str] | None = None) -> int:
    args, _ = setup_arg_parser().parse_checked(argv, WRITES)
    spec = variants.get(args.model)
    fit = FitResult.read(args.fit).to_json()
    if not args.traces.is_file():
        raise InputError(f"--traces: {args.traces} does not exist")
    levels = decision_check.parse_levels(args.levels)
    if fit.get("variant") not in (None, spec.name):
        raise InputError(f"--fit: {args.fit} was fitted for {fit['variant']!r}, not --model {spec.name!r}")
    chosen = choose_candidates(fit, args.candidate)
    options = {label: fit_options(label) for label in chosen}
    prompts = args.prompts or sweep_prompts(spec)
    load_prompts(prompts)  # a bad set or file is refused here, before any fit or sweep writes into --out
    parse_seeds(args.seeds)
    settings = {"model": spec.name, "fit_sha256": file_sha256(args.fit), "traces_sha256": file_sha256(args.traces),
                "prompts": prompts, "seeds": args.seeds, "levels": sorted(levels),
                "candidates": list(chosen) if args.candidate else None}  # fmt: skip
    stopped = f"interrupted: the refits and sweeps done are kept in {args.out}; run the same command again to resume"
    # the fits, sweeps and decision check it runs write into the folder it checked
    with FOLDER.writing(args.out, settings, args.force_new), granted(args.out), FOLDER.interruptible(lambda: stopped):
        return _compare(args, spec, fit, chosen, options, prompts, settings, levels)


def sweep_prompts(spec) -> str:
    """The prompt set the model's campaign sweeps (its prompts, unseen by its traces' seeds)."""
    if spec.campaign_sizes is None:
        raise InputError(f"--prompts: {spec.name} has no campaign sweep set; name a prompt set or file")
    return spec.campaign_sizes.sweep_prompts


def _compare(args, spec, fit: dict, chosen: dict, options: dict, prompts: str, settings: dict, levels) -> int:
    """Refit each chosen candidate, sweep it at the thresholds that reach ``levels`` and run the decision check."""
    min_step = int(fit["options"].get("min_step", spec.skip_first_n_steps))
    traces = pd.read_parquet(args.traces)
    plan, candidates = [], []
    for label, why in chosen.items():
        folder = args.out / "candidates" / label
        if not kept_fit(folder / "fit.json", label, settings["traces_sha256"]):
            given = {**options[label], "min_step": min_step, "no_plots": True}
            command = [str(args.traces), "--out", str(folder), *flags(given)]  # the same fit's command line
            folder.mkdir(parents=True, exist_ok=True)
            fit_traces(args.traces, FitOptions(**given), command=command).write(folder / "fit.json")
        refit = FitResult.read(folder / "fit.json")
        if refit.selected.label != label:
            print(f"{PROG}: refitting {label} alone selected {refit.selected.label}", file=sys.stderr)
            return 1
        full = next(c for c in fit["candidates"] if c["label"] == label)
        if not same_selection(refit, {"selected": full}):
            print(f"{PROG}: refitting {label} alone gave other numbers than --fit's {label}", file=sys.stderr)
            return 1
        at = thresholds_for_levels(refit.rescale, traces, levels, spec.skip_first_n_steps)
        thresholds = ",".join(f"{t:g}" for _, t, _ in at)
        plan.append({"label": label, "why": why, "levels": [{"level": lv, "threshold": t, "median_computed": c}
                                                           for lv, t, c in at]})  # fmt: skip
        sweep = args.out / "sweeps" / label
        given = {"model": args.model, "coefficients": str(folder / "fit.json"), "prompts": prompts,
                 "seeds": args.seeds, "repeats": 1, "thresholds": thresholds, "out": sweep}  # fmt: skip
        code = run_command(sweep_command.PROG, lambda given=given: sweep_command.sweep(sweep_plan(**given)))
        if code != 0:
            return code
        candidates.append((label, sweep, folder / "fit.json"))
    plan_record = {"model": args.model, "fit": str(args.fit), "candidates": plan}
    plan_path = args.out / "plan.json"
    if plan_path.is_file() and (args.out / "verdicts.json").is_file() and read_json_object(plan_path) == plan_record:
        print(f"kept {args.out}: the same candidates and thresholds were already compared (decision-check)")
        return 0
    write_json(plan_path, plan_record)
    levels = sorted(levels)
    argv = [*decision_check.PROG.split(), *[v for c in candidates for v in ("--candidate", "=".join(map(str, c)))],
            "--scores", str(args.fit), "--levels", ",".join(map(str, levels)), "--out", str(args.out)]  # fmt: skip
    return run_command(decision_check.PROG, decision_check.compare, candidates, args.fit, levels, args.out, argv)


if __name__ == "__main__":
    sys.exit(main())
