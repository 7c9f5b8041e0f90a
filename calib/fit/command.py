"""``teacache-calib fit``: fit rescale functions to recorded traces and choose one by held-out prompts.

Candidates (:mod:`calib.fit.candidates`): polynomials of degree 1-4 in x (free, through the origin, or
monotone on the calibrated range) and the time-aware forms ``poly+step`` / ``poly+sigma`` with time terms
up to degree 5 and x*u interaction terms, free or monotone in x. Selection (:mod:`calib.fit.selection`) is by
cross-validated R^2 with prompts held out and the one-standard-error rule, among the safe candidates only
(:mod:`calib.fit.safety`: positive and non-decreasing in x on their region; ``--allow-unsafe`` lifts it);
in-sample R^2 is reported next to it, and the decision score (:mod:`calib.fit.decision_folds`: what each
candidate's schedules leave uncomputed on held-out prompts) beside both. Traces are read by
:mod:`calib.traces.reader`, the reader every command shares. Writes ``fit.json`` plus plots into ``--out``, all
at the end, so a failed fit leaves no partial files.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from calib.fit.candidates import (
    DEGREES,
    INTERACTION_DEGREES,
    MODES,
    STEP_PIECES,
    TIME_COLUMN,
    TIME_DEGREES,
    X_PIECES,
    CandidateSpec,
    candidate_specs,
)
from calib.fit.ceiling import monotone_ceiling
from calib.fit.coefficient_sources import PACKAGED, packaged_numeric_change, parse_x_range, resolve_coefficients
from calib.fit.decision_folds import (
    DEFAULT_SELECTION,
    SELECTIONS,
    comparison_scores,
    decision_plot,
    score_fit,
    select_by,
)
from calib.fit.errors import FitError
from calib.fit.file import describe_data
from calib.fit.files import PLOT_FILES, PROG, WRITES
from calib.fit.plots import render_plots
from calib.fit.result import FIT_KIND, FitResult
from calib.fit.selection import (
    DEFAULT_FOLDS,
    DEFAULT_MARGIN,
    LOO_MAX_PROMPTS,
    compare,
    fit_frame,
    group_folds,
    time_input,
)
from calib.fit.summary import print_summary
from calib.run.arguments import CommandParser, check_out_dir, check_variant_name, path_argument
from calib.run.command import command
from calib.traces.reader import load_traces
from calib.traces.runs import Traces
from teacache.io import FORMAT_VERSION, atomic_path
from teacache.provenance import collect
from teacache.rescale import FORM_POLY_STEP, FORMS, RescaleFunction

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["RECORDED_OPTIONS", "SE_BEST", "SE_PAIRED", "SE_RULES", "load_comparison", "main", "run", "setup_arg_parser"]


SE_PAIRED = "paired"
SE_BEST = "best"
SE_RULES = (SE_PAIRED, SE_BEST)  # --se: the standard error of the one-standard-error rule


def load_comparison(
    source: str, variant: str | None, x_range: tuple[float, float] | None = None
) -> tuple[RescaleFunction, str]:
    """Coefficients to score: 'packaged', a fit.json, an mlx-teacache calibration, a module (.py) or numbers."""
    return resolve_coefficients(source, variant, x_range, arg="--compare")


def setup_arg_parser() -> argparse.ArgumentParser:
    parser = CommandParser(
        prog=PROG,
        description="Fit rescale functions to trace tables; choose one by leave-prompts-out CV.",
    )
    parser.add_argument(
        "traces",
        nargs="+",
        metavar="TRACES",
        help="trace tables: .parquet, .csv, .json, .jsonl, or mlx-teacache _calibration_<variant>.json[#SIGNAL]",
    )
    parser.add_argument(
        "--out", required=True, type=path_argument, metavar="DIR", help="folder for fit.json and the plots"
    )
    _add_candidate_arguments(parser)
    _add_trace_arguments(parser)
    _add_selection_arguments(parser)
    parser.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    parser.add_argument(
        "--force", action="store_true", help="replace a fit in --out made from other traces (its plots go with it)"
    )
    parser.add_argument(
        "--min-step",
        type=int,
        default=1,
        help="fit on steps >= this (the gate's skip_first_n_steps: earlier steps are always computed)",
    )
    return parser


def _add_candidate_arguments(parser: argparse.ArgumentParser) -> None:
    """The options that narrow the candidates: one form, degree, mode, time or interaction degree; no splines."""
    parser.add_argument("--form", choices=FORMS, help="fit only this form")
    parser.add_argument(
        "--degree",
        type=int,
        choices=sorted({*DEGREES, *X_PIECES}),
        help="fit only this degree in x (mono+step: pieces in x)",
    )
    parser.add_argument("--mode", choices=MODES, help="fit only this mode (time-aware forms: free or monotone)")
    parser.add_argument(
        "--time-degree",
        type=int,
        choices=sorted({*TIME_DEGREES, *STEP_PIECES}),
        help="fit only this degree of time terms (mono+step: pieces in the step fraction, 0: none)",
    )
    parser.add_argument(
        "--no-splines",
        action="store_true",
        help="leave out the mono+step candidates (the polynomial forms only, as fits before them chose from)",
    )
    parser.add_argument(
        "--interaction-degree",
        type=int,
        choices=INTERACTION_DEGREES,
        help="fit only this degree of the x*u interaction terms (0: none)",
    )


def _add_trace_arguments(parser: argparse.ArgumentParser) -> None:
    """The options that say which rows of the trace tables to fit and how long their runs were."""
    parser.add_argument("--branch", help="rows of this branch when the tables have a branch column (default: cond)")
    parser.add_argument("--variant", help="the variant the traces belong to (checked against the tables)")
    parser.add_argument(
        "--num-steps",
        type=int,
        help="schedule length of runs whose table has no num_steps column (default: max(step) + 1 per run)",
    )


def _add_selection_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of the choice among candidates: folds, coefficients to compare, criterion, safety, the SE rule."""
    parser.add_argument(
        "--folds",
        type=int,
        help=f"grouped CV folds (default: one per prompt up to {LOO_MAX_PROMPTS} prompts, else {DEFAULT_FOLDS})",
    )
    parser.add_argument(
        "--compare",
        metavar="COEFFS",
        help="score existing coefficients: 'packaged', a fit.json, an mlx-teacache calibration .json[#SIGNAL], "
        "a .py module or comma-separated numbers highest power first",
    )
    parser.add_argument(
        "--x-range",
        metavar="LO,HI",
        help="calibrated x range of --compare numbers (files carry their own; default: unbounded)",
    )
    parser.add_argument(
        "--margin",
        type=float,
        default=DEFAULT_MARGIN,
        help="refit when the old RMSE exceeds the new cv RMSE by more than this (default 0.10)",
    )
    parser.add_argument(
        "--select",
        choices=SELECTIONS,
        default=DEFAULT_SELECTION,
        help="criterion that picks the selected candidate: cv R^2 with the one-standard-error rule (default) or "
        "the least decision excess (what its schedules leave uncomputed on held-out prompts)",
    )
    parser.add_argument(
        "--allow-unsafe",
        action="store_true",
        help="let candidates that are <= 0 or decrease in x somewhere on their region be selected (default: "
        "only safe candidates are; every candidate's safety is reported either way)",
    )
    parser.add_argument(
        "--se",
        choices=SE_RULES,
        default=SE_PAIRED,
        help="standard error of the one-standard-error rule: of each candidate's difference from the best, paired "
        "over folds (default), or the best's own (what fits before mono+step used)",
    )


RECORDED_OPTIONS = (
    "form",
    "degree",
    "mode",
    "time_degree",
    "interaction_degree",
    "branch",
    "variant",
    "num_steps",
    "folds",
    "min_step",
    "select",
    "allow_unsafe",
    "no_splines",
    "se",
)  # the options fit.json records


def run(args: argparse.Namespace, argv: list[str]) -> tuple[FitResult, dict[str, bytes]]:
    """Everything except writing: validated traces -> fit.json content and plot bytes."""
    x_range = _checked_options(args)
    traces = _fitted_traces(args)
    frame = traces.frame
    specs = _specs(args, frame)
    variant = args.variant or (traces.variants[0] if len(traces.variants) == 1 else None)
    comparison_source = None
    if args.compare:  # resolve before fitting so a bad --compare fails fast
        comparison_source = load_comparison(args.compare, variant, x_range)
    fold_models: dict = {}  # each candidate's models per fold: the cv R^2 and the decision score read the same ones
    result = fit_frame(
        frame, specs, args.folds, allow_unsafe=args.allow_unsafe, paired=args.se == SE_PAIRED, fold_models=fold_models
    )
    fit = _fit_document(args, argv, traces, result)
    fit, decision = score_fit(
        fit,
        frame,
        specs,
        args.folds,
        args.min_step,
        comparison_source[0] if comparison_source else None,
        fold_models=fold_models,
    )
    fit = select_by(fit, args.select, args.allow_unsafe)
    ceiling = monotone_ceiling(
        frame["x_rel_l1"].to_numpy(dtype=float),
        frame["y_rel_l1"].to_numpy(dtype=float),
        time_input(FORM_POLY_STEP, frame),
        group_folds(frame["prompt_id"].to_numpy(), args.folds),
        fit.selected.cv_r2,
    )
    fit = dataclasses.replace(fit, ceiling=ceiling)
    if comparison_source is not None:
        comparison = _comparison(args, fit, frame, comparison_source, decision, variant, traces.provenance)
        fit = dataclasses.replace(fit, comparison=comparison)
    plots = {} if args.no_plots else render_plots(fit, frame)
    if plots and decision:
        plots["decision"] = decision_plot(fit, decision)
    return dataclasses.replace(fit, plots=[PLOT_FILES[name] for name in plots]), plots


def _checked_options(args: argparse.Namespace) -> tuple[float, float] | None:
    """The options checked before any trace is read; returns --x-range parsed."""
    if args.variant is not None:
        check_variant_name(args.variant)
    if args.margin < 0 or not math.isfinite(args.margin):
        raise FitError(f"--margin: expected a finite number >= 0, got {args.margin!r}")
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise FitError(f"--out: {out} exists and is not a folder")
    if args.min_step < 1:
        raise FitError(f"--min-step: expected an integer >= 1 (step 0 has no previous step), got {args.min_step}")
    if args.folds is not None and args.folds < 2:
        raise FitError(f"--folds: expected at least 2 (cross-validation holds prompts out), got {args.folds}")
    if args.compare is not None and not args.compare.strip():
        raise FitError(
            "--compare: expected 'packaged', a fit.json, an mlx-teacache calibration .json, a .py module or numbers "
            "highest power first; got an empty value"
        )
    x_range = parse_x_range(args.x_range)
    if x_range is not None and not args.compare:
        raise FitError("--x-range: only with --compare (the range of the coefficients to score)")
    return x_range


def _fitted_traces(args: argparse.Namespace) -> Traces:
    """The traces, without the steps before --min-step: steps the gate always computes say nothing about
    when it may skip."""
    traces = load_traces(args.traces, branch=args.branch, variant=args.variant, num_steps=args.num_steps)
    if args.min_step > 1:
        last = int(traces.frame["step"].max())
        if args.min_step > last:
            raise FitError(f"--min-step: {args.min_step} is past the traces' last step ({last}); expected 1..{last}")
        traces = dataclasses.replace(traces, frame=traces.frame[traces.frame["step"] >= args.min_step])
    return traces


def _specs(args: argparse.Namespace, frame: pd.DataFrame) -> list[CandidateSpec]:
    """The candidates --form, --degree and --mode ask for, given the columns the traces have."""
    if args.form in TIME_COLUMN and TIME_COLUMN[args.form] not in frame.columns:
        cols = ", ".join(c for c in map(str, frame.columns) if not c.startswith("_"))
        raise FitError(f"--form {args.form}: needs column {TIME_COLUMN[args.form]!r}; columns found: {cols}")
    return candidate_specs(
        "num_steps" in frame.columns,
        "sigma" in frame.columns,
        args.form,
        args.degree,
        args.mode,
        args.time_degree,
        args.interaction_degree,
        with_splines=not args.no_splines,
    )


def _fit_document(args: argparse.Namespace, argv: list[str], traces: Traces, result: FitResult) -> FitResult:
    """fit.json's content before scoring and selection: the fit, its data, options, inputs and provenance."""
    return dataclasses.replace(
        result,
        format_version=FORMAT_VERSION,
        kind=FIT_KIND,
        variant=traces.variants[0] if len(traces.variants) == 1 else None,
        form=result.selected.form,
        fitted_model=result.selected.label,
        data=describe_data(traces),
        options={k: getattr(args, k) for k in RECORDED_OPTIONS},
        input={
            "files": traces.files,
            "provenance": traces.provenance,
            "variants": traces.variants,
            "num_steps": traces.num_steps,
        },
        provenance=collect(["teacache-calib", "fit", *argv]),
    )


def _comparison(
    args: argparse.Namespace,
    fit: FitResult,
    frame: pd.DataFrame,
    source: tuple[RescaleFunction, str],
    decision: dict,
    variant: str | None,
    provenance: dict | None,
) -> dict:
    """fit.json's ``comparison``: the --compare coefficients against the selected fit, scored alike."""
    comparison = compare(*source, frame, fit.selected, args.margin)
    comparison.update(comparison_scores(decision))
    if args.compare == PACKAGED:
        comparison["numeric_change"] = packaged_numeric_change(variant, provenance)
    return comparison


@command("teacache-calib fit")
def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        args = setup_arg_parser().parse_args(argv)
    except SystemExit as exc:
        return int(exc.code or 0)
    check_out_dir(args.out, writes=WRITES)
    fit, plots = run(args, argv)
    for message in fit["data"]["notes"]:
        print(f"teacache-calib fit: {message}", file=sys.stderr)
    for message in fit["data"]["warnings"]:
        print(f"teacache-calib fit: warning: {message}", file=sys.stderr)
    out = Path(args.out)
    path = out / "fit.json"
    _check_replaces(path, fit, args.force)
    for name, png in plots.items():
        with atomic_path(out / PLOT_FILES[name]) as tmp:
            tmp.write_bytes(png)
    fit.write(path)
    for stale in set(PLOT_FILES) - set(plots):  # drawn from the fit replaced: they would pass for this one's
        (out / PLOT_FILES[stale]).unlink(missing_ok=True)
    print_summary(fit, path)
    return 0


def _input_digests(document: FitResult | dict) -> list[str | None]:
    return [f.get("sha256") for f in (document["input"] or {}).get("files", [])]


def _check_replaces(path: Path, fit: FitResult, force: bool) -> None:
    """A fit.json of other traces is another fit: replaced (with its plots) only with --force; the same traces
    refit (other options, a new release of this code) replace it as their own."""
    if force or not path.is_file():
        return
    try:
        previous = FitResult.read(path)
    except FitError:
        return  # not a fit this command wrote: the output rule (check_out_dir) has ruled on the folder already
    if _input_digests(previous) != _input_digests(fit):
        raise FitError(f"--out: {path} is a fit of other traces; pass --force to replace it (and its plots), or "
                       "choose another folder")  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
