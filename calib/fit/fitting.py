"""Fit rescale functions to trace tables and choose one (:func:`fit`): what ``teacache-calib fit`` does between
parsing its arguments and writing its folder, for callers with :class:`calib.fit.options.FitOptions` instead
of a command line.

Candidates (:mod:`calib.fit.candidates`): polynomials of degree 1-4 in x (free, through the origin, or
monotone on the calibrated range) and the time-aware forms ``poly+step`` / ``poly+sigma`` with time terms
up to degree 5 and x*u interaction terms, free or monotone in x. Selection (:mod:`calib.fit.selection`) is by
cross-validated R^2 with prompts held out and the one-standard-error rule, among the safe candidates only
(:mod:`calib.fit.safety`: positive and non-decreasing in x on their region; ``allow_unsafe`` lifts it);
in-sample R^2 is reported next to it, and the decision score (:mod:`calib.fit.decision_folds`: what each
candidate's schedules leave uncomputed on held-out prompts) beside both. The cv R^2, the decision score and
the monotone ceiling all read one fold assignment, dealt here once. Traces are read by
:mod:`calib.traces.reader`, the reader every command shares.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING

from calib.fit.candidates import TIME_COLUMN, CandidateSpec, candidate_specs
from calib.fit.ceiling import monotone_ceiling
from calib.fit.coefficient_sources import PACKAGED, packaged_numeric_change, parse_x_range, resolve_coefficients
from calib.fit.decision_folds import comparison_scores, decision_plot, score_fit, select_by
from calib.fit.errors import FitError
from calib.fit.file import describe_data
from calib.fit.files import PLOT_FILES
from calib.fit.options import SE_PAIRED, FitOptions
from calib.fit.plots import render_plots
from calib.fit.result import FIT_KIND, FitResult
from calib.fit.selection import check_fit_input, compare, fit_frame, group_folds, time_input
from calib.traces.reader import load_traces
from calib.traces.runs import Traces
from teacache.io import FORMAT_VERSION
from teacache.provenance import collect
from teacache.rescale import FORM_POLY_STEP, RescaleFunction

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["fit"]

TracePaths = str | os.PathLike | Sequence[str | os.PathLike]


def fit(
    traces: TracePaths,
    options: FitOptions | None = None,
    command: Sequence[str] | None = None,
    plots: dict[str, bytes] | None = None,
) -> FitResult:
    """fit.json's content for these trace tables (one path or several: .parquet, .csv, .json, .jsonl, or an
    mlx-teacache _calibration_<variant>.json[#SIGNAL]), fitted as ``options`` say (the command's defaults when
    None). Nothing is written; a FitError (or the reader's TraceError) says in one line why a fit is refused.

    ``command``: the arguments of ``teacache-calib fit`` that asked for this fit, after the command's name,
    recorded in the provenance (the running process's own command line when None). ``plots``: a dict filled
    with the PNG bytes of the plots by name (:data:`calib.fit.files.PLOT_FILES`), unless ``options.no_plots``.
    """
    options = FitOptions() if options is None else options
    paths = [os.fspath(traces)] if isinstance(traces, (str, os.PathLike)) else [os.fspath(p) for p in traces]
    loaded = _fitted_traces(paths, options)
    frame = loaded.frame
    specs = _specs(options, frame)
    variant = options.variant or (loaded.variants[0] if len(loaded.variants) == 1 else None)
    comparison_source = None
    if options.compare:  # resolved before fitting so a bad --compare fails fast
        comparison_source = resolve_coefficients(options.compare, variant, parse_x_range(options.x_range),
                                                 arg="--compare")  # fmt: skip
    check_fit_input(frame, specs)  # before the folds are dealt: a frame that cannot be fitted says so first
    folds = group_folds(frame["prompt_id"].to_numpy(), options.folds)  # one assignment for every score below
    fold_models: dict = {}  # each candidate's models per fold: the cv R^2 and the decision score read the same ones
    result = fit_frame(
        frame, specs, allow_unsafe=options.allow_unsafe, paired=options.se == SE_PAIRED, fold_models=fold_models,
        folds=folds,
    )  # fmt: skip
    document = _fit_document(options, command, loaded, result)
    document, decision = score_fit(
        document,
        frame,
        specs,
        None,
        options.min_step,
        comparison_source[0] if comparison_source else None,
        fold_models=fold_models,
        folds=folds,
    )
    document = select_by(document, options.select, options.allow_unsafe)
    ceiling = monotone_ceiling(
        frame["x_rel_l1"].to_numpy(dtype=float),
        frame["y_rel_l1"].to_numpy(dtype=float),
        time_input(FORM_POLY_STEP, frame),
        folds,
        document.selected.cv_r2,
    )
    document = dataclasses.replace(document, ceiling=ceiling)
    if comparison_source is not None:
        comparison = _comparison(options, document, frame, comparison_source, decision, variant, loaded.provenance)
        document = dataclasses.replace(document, comparison=comparison)
    drawn = {} if options.no_plots else render_plots(document, frame)
    if drawn and decision:
        drawn["decision"] = decision_plot(document, decision)
    if plots is not None:
        plots.update(drawn)
    return dataclasses.replace(document, plots=[PLOT_FILES[name] for name in drawn])


def _fitted_traces(paths: list[str], options: FitOptions) -> Traces:
    """The traces, without the steps before --min-step: steps the gate always computes say nothing about
    when it may skip."""
    traces = load_traces(paths, branch=options.branch, variant=options.variant, num_steps=options.num_steps)
    if options.min_step > 1:
        last = int(traces.frame["step"].max())
        if options.min_step > last:
            raise FitError(f"--min-step: {options.min_step} is past the traces' last step ({last}); expected 1..{last}")
        traces = dataclasses.replace(traces, frame=traces.frame[traces.frame["step"] >= options.min_step])
    return traces


def _specs(options: FitOptions, frame: pd.DataFrame) -> list[CandidateSpec]:
    """The candidates --form, --degree and --mode ask for, given the columns the traces have."""
    if options.form in TIME_COLUMN and TIME_COLUMN[options.form] not in frame.columns:
        cols = ", ".join(c for c in map(str, frame.columns) if not c.startswith("_"))
        raise FitError(f"--form {options.form}: needs column {TIME_COLUMN[options.form]!r}; columns found: {cols}")
    return candidate_specs(
        "num_steps" in frame.columns,
        "sigma" in frame.columns,
        options.form,
        options.degree,
        options.mode,
        options.time_degree,
        options.interaction_degree,
        with_splines=not options.no_splines,
    )


def _fit_document(options: FitOptions, command: Sequence[str] | None, traces: Traces, result: FitResult) -> FitResult:
    """fit.json's content before scoring and selection: the fit, its data, options, inputs and provenance."""
    return dataclasses.replace(
        result,
        format_version=FORMAT_VERSION,
        kind=FIT_KIND,
        variant=traces.variants[0] if len(traces.variants) == 1 else None,
        form=result.selected.function.form,
        fitted_model=result.selected.label,
        data=describe_data(traces),
        options=options.recorded(),
        input={
            "files": traces.files,
            "provenance": traces.provenance,
            "variants": traces.variants,
            "num_steps": traces.num_steps,
            **({"loras": traces.loras} if traces.loras else {}),  # the LoRAs the traces were recorded with
        },
        provenance=collect(None if command is None else ["teacache-calib", "fit", *command]),
    )


def _comparison(
    options: FitOptions,
    document: FitResult,
    frame: pd.DataFrame,
    source: tuple[RescaleFunction, str],
    decision: dict,
    variant: str | None,
    provenance: dict | None,
) -> dict:
    """fit.json's ``comparison``: the --compare coefficients against the selected fit, scored alike."""
    comparison = compare(*source, frame, document.selected, options.margin)
    comparison.update(comparison_scores(decision))
    if options.compare == PACKAGED:
        comparison["numeric_change"] = packaged_numeric_change(variant, provenance)
    return comparison
