"""``teacache-calib fit``: fit rescale functions to recorded traces and choose one by held-out prompts.

Parses its arguments into :class:`calib.fit.options.FitOptions`, fits with :func:`calib.fit.fit` (the
candidates, the selection and the scores are described there) and writes ``fit.json`` plus plots into
``--out``, all at the end, so a failed fit leaves no partial files.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from calib.fit.errors import FitError
from calib.fit.files import PLOT_FILES, PROG, WRITES, check_out
from calib.fit.fitting import fit
from calib.fit.options import CHOICES, DEFAULTS, FitOptions
from calib.fit.result import FitResult
from calib.fit.selection import DEFAULT_FOLDS, LOO_MAX_PROMPTS
from calib.fit.summary import print_summary
from calib.run.arguments import CommandParser, check_out_dir, path_argument
from calib.run.command import command, parsed
from teacache.io import atomic_path

__all__ = ["main", "run", "setup_arg_parser"]


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
        default=DEFAULTS.min_step,
        help="fit on steps >= this (the gate's skip_first_n_steps: earlier steps are always computed)",
    )
    return parser


def _add_candidate_arguments(parser: argparse.ArgumentParser) -> None:
    """The options that narrow the candidates: one form, degree, mode, time or interaction degree; no splines."""
    parser.add_argument("--form", choices=CHOICES["form"], help="fit only this form")
    parser.add_argument(
        "--degree", type=int, choices=CHOICES["degree"], help="fit only this degree in x (mono+step: pieces in x)"
    )
    parser.add_argument(
        "--mode", choices=CHOICES["mode"], help="fit only this mode (time-aware forms: free or monotone)"
    )
    parser.add_argument(
        "--time-degree",
        type=int,
        choices=CHOICES["time_degree"],
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
        choices=CHOICES["interaction_degree"],
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
        default=DEFAULTS.margin,
        help="refit when the old RMSE exceeds the new cv RMSE by more than this (default 0.10)",
    )
    _choice(
        parser,
        "select",
        "criterion that picks the selected candidate: cv R^2 with the one-standard-error rule (default) or the "
        "least decision excess (what its schedules leave uncomputed on held-out prompts)",
    )
    parser.add_argument(
        "--allow-unsafe",
        action="store_true",
        help="let candidates that are <= 0 or decrease in x somewhere on their region be selected (default: "
        "only safe candidates are; every candidate's safety is reported either way)",
    )
    _choice(
        parser,
        "se",
        "standard error of the one-standard-error rule: of each candidate's difference from the best, paired over "
        "folds (default), or the best's own (what fits before mono+step used)",
    )


def _choice(parser: argparse.ArgumentParser, name: str, help: str) -> None:
    """``--NAME``: one of the fit options' choices for it, their default unless given."""
    parser.add_argument(f"--{name}", choices=CHOICES[name], default=getattr(DEFAULTS, name), help=help)


def run(args: argparse.Namespace, argv: list[str]) -> tuple[FitResult, dict[str, bytes]]:
    """Everything except writing: the parsed arguments -> fit.json content and plot bytes (``argv``, recorded
    in its provenance)."""
    check_out(args.out)
    plots: dict[str, bytes] = {}
    return fit(args.traces, FitOptions.from_args(args), command=argv, plots=plots), plots


@command("teacache-calib fit")
def main(argv: list[str] | None = None) -> int:
    argv, args = parsed(setup_arg_parser(), argv)
    if isinstance(args, int):
        return args
    check_out_dir(args.out, writes=WRITES)
    result, plots = run(args, argv)
    for message in result["data"]["notes"]:
        print(f"teacache-calib fit: {message}", file=sys.stderr)
    for message in result["data"]["warnings"]:
        print(f"teacache-calib fit: warning: {message}", file=sys.stderr)
    out = Path(args.out)
    path = out / "fit.json"
    _check_replaces(path, result, args.force)
    for name, png in plots.items():
        with atomic_path(out / PLOT_FILES[name]) as tmp:
            tmp.write_bytes(png)
    result.write(path)
    for stale in set(PLOT_FILES) - set(plots):  # drawn from the fit replaced: they would pass for this one's
        (out / PLOT_FILES[stale]).unlink(missing_ok=True)
    print_summary(result, path)
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
