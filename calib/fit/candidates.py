"""The family of rescale functions ``teacache-calib fit`` chooses from, and fitting one member.

Plain polynomials in x (free, through the origin, or monotone: non-decreasing and positive on the
calibrated range), and the time-aware forms of :class:`teacache.rescale.RescaleFunction`: a polynomial in
x plus a polynomial in the time input u (step fraction or sigma, degree up to 5), optionally with x*u^j
interaction terms, free or monotone (non-decreasing in x at every u, positive on the region: the x range
per part of the schedule). Coefficients are highest power first at every interface.

And the ``mono+step`` form (:mod:`teacache.splines`, fitted by :mod:`calib.fit.splines`): piecewise linear and
non-decreasing in x with ``degree`` pieces, its weights piecewise linear in the step fraction with
``time_degree`` pieces (0: x only); safe by construction, as flexible as its pieces allow.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np

from calib.fit import splines as spline_fit
from calib.fit.errors import FitError
from calib.fit.monotone import fit_monotone, fit_monotone_time_aware, power_columns, prediction_floor
from teacache import splines
from teacache.rescale import FORM_MONO_STEP, FORM_POLY, FORM_POLY_SIGMA, FORM_POLY_STEP, FORMS, Region, RescaleFunction

MODE_FREE = "free"
MODE_ORIGIN = "origin"
MODE_MONOTONE = "monotone"
MODES = (MODE_FREE, MODE_ORIGIN, MODE_MONOTONE)
TIME_MODES = (MODE_FREE, MODE_MONOTONE)  # the time-aware forms always keep their constant
DEGREES = (1, 2, 3, 4)
TIME_DEGREES = (1, 2, 3, 4, 5)
INTERACTION_DEGREES = (0, 1, 2)
# mono+step: pieces in x and in the step fraction. Measured on the nine mlx-teacache trace sets
# (results/rescale-forms/RUN.md): Qwen-Image-2512's first signal needs 12+ pieces in the step fraction to reach
# its monotone ceiling; 16 pieces in x or 24 in u bought nothing there or elsewhere.
X_PIECES = (1, 2, 3, 4, 6)
STEP_PIECES = (0, 1, 2, 3, 4, 6, 8, 12, 16)
TIME_COLUMN = {FORM_POLY_STEP: "num_steps", FORM_POLY_SIGMA: "sigma", FORM_MONO_STEP: "num_steps"}


@dataclass(frozen=True)
class CandidateSpec:
    """One candidate: form, degree in x, mode, degree of the time terms and of the x*u terms."""

    form: str = FORM_POLY
    degree: int = 4
    mode: str = MODE_FREE
    time_degree: int = 0
    interaction_degree: int = 0

    def __post_init__(self) -> None:
        if self.form not in FORMS:
            raise FitError(f"form: expected one of {', '.join(FORMS)}, got {self.form!r}")
        if self.mode not in MODES:
            raise FitError(f"mode: expected one of {', '.join(MODES)}, got {self.mode!r}")
        if not isinstance(self.degree, int) or self.degree < 1:
            raise FitError(f"degree: expected an integer >= 1, got {self.degree!r}")
        if self.form == FORM_MONO_STEP:
            if self.mode != MODE_MONOTONE or self.interaction_degree != 0:
                raise FitError(f"form {FORM_MONO_STEP!r}: mode monotone only, no interaction terms")
            if not isinstance(self.time_degree, int) or self.time_degree < 0:
                raise FitError(
                    f"time_degree: expected an integer >= 0 (pieces in the step fraction), got {self.time_degree!r}"
                )
            return
        if self.form == FORM_POLY and (self.time_degree != 0 or self.interaction_degree != 0):
            raise FitError("time_degree/interaction_degree: only the time-aware forms have time terms")
        if self.form != FORM_POLY:
            if self.mode not in TIME_MODES or not isinstance(self.time_degree, int) or self.time_degree < 1:
                raise FitError(f"form {self.form!r}: fitted in mode {' or '.join(TIME_MODES)} with time_degree >= 1")
            if not isinstance(self.interaction_degree, int) or self.interaction_degree < 0:
                raise FitError(f"interaction_degree: expected an integer >= 0, got {self.interaction_degree!r}")

    @property
    def n_params(self) -> int:
        if self.form == FORM_MONO_STEP:
            return (self.degree + 1) * (self.time_degree + 1)
        return self.degree + (0 if self.mode == MODE_ORIGIN else 1) + self.time_degree + self.interaction_degree

    @property
    def is_time_aware(self) -> bool:
        return self.form != FORM_POLY

    @property
    def label(self) -> str:
        if self.form == FORM_POLY:
            return f"poly{self.degree}-{self.mode}"
        if self.form == FORM_MONO_STEP:
            return f"mono{self.degree}+step{self.time_degree}"
        name = self.form.split("+")[1]
        label = f"poly{self.degree}+{name}{self.time_degree}"
        if self.interaction_degree:
            label += f"+x*{name}{self.interaction_degree}"
        return label + ("-monotone" if self.mode == MODE_MONOTONE else "")


@dataclass(frozen=True)
class FittedModel:
    """A fitted candidate: its spec and the rescale function the fit made of it (the function carries the x range
    it was fitted on and, for the time-aware forms, the region: where the gate will evaluate it)."""

    spec: CandidateSpec
    function: RescaleFunction

    @classmethod
    def fit(cls, spec: CandidateSpec, x: np.ndarray, y: np.ndarray, u: np.ndarray | None = None) -> FittedModel:
        """Least-squares fit of ``spec`` to (x, y), with ``u`` the time input of the time-aware forms."""
        x = np.asarray(x, dtype=float)
        if spec.form == FORM_MONO_STEP:
            return cls._fit_spline(spec, x, y, u)
        return cls.from_params(spec, fit_params(spec, x, y, u), x, u)

    @classmethod
    def from_params(
        cls, spec: CandidateSpec, params: np.ndarray, x: np.ndarray, u: np.ndarray | None = None
    ) -> FittedModel:
        """The model of a polynomial form whose parameters (:func:`fit_params` order) were fitted to (x, u)."""
        x = np.asarray(x, dtype=float)
        n_x, n_t = spec.degree + 1, spec.time_degree
        function = RescaleFunction(
            coefficients=tuple(float(c) for c in params[:n_x]),
            x_range=(float(np.min(x)), float(np.max(x))),
            form=spec.form,
            time_coefficients=tuple(float(c) for c in params[n_x : n_x + n_t]),
            interaction_coefficients=tuple(float(c) for c in params[n_x + n_t :]),
            region=Region.from_data(x, u) if spec.is_time_aware else None,
        )
        return cls(spec, function)

    @classmethod
    def _fit_spline(cls, spec: CandidateSpec, x: np.ndarray, y: np.ndarray, u: np.ndarray | None) -> FittedModel:
        if u is None:
            raise FitError(f"{spec.label}: needs the time input ({TIME_COLUMN[spec.form]})")
        u = np.asarray(u, dtype=float)
        knots = spline_fit.x_knots(x, spec.degree)
        tknots = spline_fit.time_knots(u, spec.time_degree)
        weights = spline_fit.fit_weights(x, y, u, knots, tknots, prediction_floor(y))
        function = RescaleFunction(
            coefficients=tuple(float(w) for w in weights),
            x_range=(float(np.min(x)), float(np.max(x))),
            form=spec.form,
            region=Region.from_data(x, u),
            knots=knots,
            time_knots=tknots,
        )
        return cls(spec, function)

    def predict(self, x: np.ndarray, u: np.ndarray | None = None) -> np.ndarray:
        """The model's own linear form (design matrix times parameters), independent of evaluating the function."""
        f = self.function
        if self.spec.form == FORM_MONO_STEP:  # the gate clamps x below the lowest knot; the ramps saturate above
            return splines.design(x, u, f.knots, f.time_knots) @ np.asarray(f.coefficients)
        params = np.asarray(f.coefficients + f.time_coefficients + f.interaction_coefficients)
        return design_matrix(self.spec, x, u) @ params


def fit_params(
    spec: CandidateSpec,
    x: np.ndarray,
    y: np.ndarray,
    u: np.ndarray | None = None,
    design: np.ndarray | None = None,
) -> np.ndarray:
    """All parameters of ``spec`` fitted to (x, y), in :func:`design_matrix` order (``design``: that matrix,
    when the caller has it already)."""
    x = np.asarray(x, dtype=float)
    y = np.asarray(y, dtype=float)
    lo, hi = float(np.min(x)), float(np.max(x))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", np.exceptions.RankWarning)
        if spec.is_time_aware:
            if u is None:
                raise FitError(f"{spec.label}: needs the time input ({TIME_COLUMN[spec.form]})")
            u = np.asarray(u, dtype=float)
            design = design_matrix(spec, x, u) if design is None else design
            if spec.mode == MODE_MONOTONE:
                u_range = (float(np.min(u)), float(np.max(u)))
                return fit_monotone_time_aware(
                    design,
                    y,
                    spec.degree,
                    spec.time_degree,
                    spec.interaction_degree,
                    (lo, hi),
                    u_range,
                    Region.from_data(x, u),
                    prediction_floor(y),
                )
            return _lstsq_scaled(design, y)
        if spec.mode == MODE_FREE:
            return np.polyfit(x, y, spec.degree)
        if spec.mode == MODE_ORIGIN:
            params = np.linalg.lstsq(power_columns(x, spec.degree, constant=False), y, rcond=None)[0]
            return np.append(params, 0.0)
        return fit_monotone(x, y, spec.degree, (lo, hi), prediction_floor(y))


def design_matrix(spec: CandidateSpec, x: np.ndarray, u: np.ndarray | None = None) -> np.ndarray:
    """Columns x^d .. x^0, then u^k .. u^1, then x*u^j .. x*u^1: the parameter order of the fitted model."""
    columns = [power_columns(x, spec.degree)]
    if spec.time_degree:
        columns.append(power_columns(u, spec.time_degree, constant=False))
    if spec.interaction_degree:
        columns.append(np.asarray(x, dtype=float)[:, None] * power_columns(u, spec.interaction_degree, constant=False))
    return np.hstack(columns)


def _lstsq_scaled(design: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Least squares with unit-norm columns (better conditioned), mapped back to the raw columns."""
    scale = np.sqrt((design**2).sum(axis=0))
    scale[scale == 0] = 1.0
    return np.linalg.lstsq(design / scale, y, rcond=None)[0] / scale


def candidate_specs(
    has_step: bool,
    has_sigma: bool,
    form: str | None = None,
    degree: int | None = None,
    mode: str | None = None,
    time_degree: int | None = None,
    interaction_degree: int | None = None,
    with_splines: bool = False,
) -> list[CandidateSpec]:
    """Every candidate the data supports, narrowed by whichever of the arguments is given.

    Plain polynomials first, then by form, degree, time degree, interaction degree and mode, so that
    among candidates of equal size and score the list order prefers the simpler shape. ``with_splines`` (or
    ``form="mono+step"``) adds the mono+step candidates last, when the data has a step column.
    """
    specs = [CandidateSpec(FORM_POLY, d, m) for d in DEGREES for m in MODES]
    for f, ok in ((FORM_POLY_STEP, has_step), (FORM_POLY_SIGMA, has_sigma)):
        if ok or form == f:
            specs += [
                CandidateSpec(f, d, m, k, j)
                for d in DEGREES
                for k in TIME_DEGREES
                for j in INTERACTION_DEGREES
                if j <= k
                for m in TIME_MODES
            ]
    if has_step and (with_splines or form == FORM_MONO_STEP):
        specs += [CandidateSpec(FORM_MONO_STEP, k, MODE_MONOTONE, j) for k in X_PIECES for j in STEP_PIECES]
    return [
        s
        for s in specs
        if (form is None or s.form == form)
        and (degree is None or s.degree == degree)
        and (mode is None or s.mode == mode)
        and (time_degree is None or s.time_degree == time_degree)
        and (interaction_degree is None or s.interaction_degree == interaction_degree)
    ]
