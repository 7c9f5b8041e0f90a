"""The options of a fit (:class:`FitOptions`), checked when made: what ``teacache-calib fit`` parses from its
command line and :func:`calib.fit.fit` takes. Each field is named as the command's option (``--time-degree``:
``time_degree``) and defaults as it does; a bad value is refused with the command's own one-line message."""

from __future__ import annotations

import argparse
import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass

from calib.fit.candidates import DEGREES, INTERACTION_DEGREES, MODES, STEP_PIECES, TIME_DEGREES, X_PIECES
from calib.fit.coefficient_sources import parse_x_range
from calib.fit.decision_folds import DEFAULT_SELECTION, SELECTIONS
from calib.fit.errors import FitError
from calib.fit.selection import DEFAULT_MARGIN
from calib.run.arguments import check_variant_name
from teacache.rescale import FORMS

__all__ = ["CHOICES", "DEFAULTS", "RECORDED_OPTIONS", "SE_BEST", "SE_PAIRED", "SE_RULES", "FitOptions", "flags"]

SE_PAIRED = "paired"
SE_BEST = "best"
SE_RULES = (SE_PAIRED, SE_BEST)  # --se: the standard error of the one-standard-error rule

CHOICES = {
    "form": FORMS,
    "degree": sorted({*DEGREES, *X_PIECES}),  # mono+step: pieces in x
    "mode": MODES,
    "time_degree": sorted({*TIME_DEGREES, *STEP_PIECES}),  # mono+step: pieces in the step fraction
    "interaction_degree": INTERACTION_DEGREES,
    "select": SELECTIONS,
    "se": SE_RULES,
}  # the values an option takes, as the command's parser offers them
_INTEGERS = ("degree", "time_degree", "interaction_degree", "num_steps", "folds", "min_step")

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


@dataclass(frozen=True)
class FitOptions:
    """How to fit: which candidates, which rows of the traces, how to choose, what to compare and draw.

    None narrows nothing (every form, degree, mode; every branch's rows where the tables have no branch column,
    else cond) or leaves the value to the traces (``num_steps``) or to their size (``folds``: one per prompt up
    to ``calib.fit.selection.LOO_MAX_PROMPTS`` prompts). ``compare``: coefficients to score against the fit
    ('packaged', a fit.json, an mlx-teacache calibration .json[#SIGNAL], a .py module or numbers highest power
    first); ``x_range``: 'LO,HI', their calibrated x range when they are numbers. ``min_step``: the gate's
    skip_first_n_steps, fitted on steps >= it. ``no_plots``: draw no PNG.
    """

    form: str | None = None
    degree: int | None = None
    mode: str | None = None
    time_degree: int | None = None
    no_splines: bool = False
    interaction_degree: int | None = None
    branch: str | None = None
    variant: str | None = None
    num_steps: int | None = None
    folds: int | None = None
    compare: str | None = None
    x_range: str | None = None
    margin: float = DEFAULT_MARGIN
    select: str = DEFAULT_SELECTION
    allow_unsafe: bool = False
    se: str = SE_PAIRED
    no_plots: bool = False
    min_step: int = 1

    def __post_init__(self) -> None:
        for name in _INTEGERS:
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
                raise FitError(f"argument {_flag(name)}: invalid int value: {value!r}")
        if isinstance(self.margin, bool) or not isinstance(self.margin, (int, float)):
            raise FitError(f"argument --margin: invalid float value: {self.margin!r}")
        object.__setattr__(self, "margin", float(self.margin))  # as the command parses it (and quotes it)
        for name, choices in CHOICES.items():
            value = getattr(self, name)
            if value is not None and value not in choices:
                raise FitError(
                    f"argument {_flag(name)}: invalid choice: {value!r} (choose from {', '.join(map(repr, choices))})"
                )
        self._check_values()

    def _check_values(self) -> None:
        """The checks the command makes after parsing, before any trace is read, in its order."""
        if self.variant is not None:
            check_variant_name(self.variant)
        if self.margin < 0 or not math.isfinite(self.margin):
            raise FitError(f"--margin: expected a finite number >= 0, got {self.margin!r}")
        if self.min_step < 1:
            raise FitError(f"--min-step: expected an integer >= 1 (step 0 has no previous step), got {self.min_step}")
        if self.folds is not None and self.folds < 2:
            raise FitError(f"--folds: expected at least 2 (cross-validation holds prompts out), got {self.folds}")
        if self.compare is not None and not self.compare.strip():
            raise FitError(
                "--compare: expected 'packaged', a fit.json, an mlx-teacache calibration .json, a .py module or "
                "numbers highest power first; got an empty value"
            )
        if parse_x_range(self.x_range) is not None and not self.compare:
            raise FitError("--x-range: only with --compare (the range of the coefficients to score)")

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> FitOptions:
        """The options ``teacache-calib fit``'s parser read (its other arguments, TRACES, --out and --force, say
        what to read and where to write)."""
        return cls(**{field.name: getattr(args, field.name) for field in dataclasses.fields(cls)})

    def recorded(self) -> dict:
        """fit.json's ``options``."""
        return {name: getattr(self, name) for name in RECORDED_OPTIONS}


DEFAULTS = FitOptions()  # the command's parser takes its defaults from here


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def flags(options: Mapping[str, object]) -> list[str]:
    """The command-line arguments that give these options, in their order: ``--name value``, a true switch
    alone (a false one and a None left out). What a caller that fits without a command line records as the
    command that would have made the same fit."""
    argv: list[str] = []
    for name, value in options.items():
        if value is None:
            continue
        if isinstance(value, bool):
            argv += [_flag(name)] if value else []
        else:
            argv += [_flag(name), str(value)]
    return argv
