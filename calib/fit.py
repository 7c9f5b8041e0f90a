"""``teacache-calib fit``: fit rescale functions to recorded traces and choose one by held-out prompts.

Candidates: polynomials of degree 1-4 (free, through the origin, or monotone on the calibrated range)
and the time-aware forms ``poly+step`` / ``poly+sigma`` of :class:`teacache.rescale.RescaleFunction`.
Selection is by cross-validated R^2 with prompts held out (a fit that only memorises the calibration
prompts scores well in-sample and badly on the next prompt); in-sample R^2 is reported next to it.
Writes ``fit.json`` plus plots into ``--out``, all at the end, so a failed fit leaves no partial files.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import io
import json
import math
import os
import sys
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from calib.tables import TraceError, Traces, finite_or_none, load_traces, run_key_columns, step_fraction
from teacache.io import FORMAT_VERSION, atomic_path, write_json
from teacache.rescale import FORM_POLY, FORM_POLY_SIGMA, FORM_POLY_STEP, FORMS, RescaleFunction

MODE_FREE = "free"
MODE_ORIGIN = "origin"
MODE_MONOTONE = "monotone"
MODES = (MODE_FREE, MODE_ORIGIN, MODE_MONOTONE)
DEGREES = (1, 2, 3, 4)
TIME_DEGREES = (1, 2)
MIN_PROMPTS = 3
LOO_MAX_PROMPTS = 20  # leave-one-prompt-out up to this many prompts, else DEFAULT_FOLDS folds
DEFAULT_FOLDS = 10
# A tie: cv MSE within 1% of the best one's (far below the sampling error of a cv score); among tied
# candidates the one with fewer parameters wins, so noise never buys a spurious term.
TIE_TOLERANCE = 0.01
DEFAULT_MARGIN = 0.10
FIT_KIND = "teacache-calib fit"
VERDICT_REFIT = "refit recommended"
VERDICT_OK = "packaged coefficients still fit"
PLOT_FILES = {"scatter": "fit_scatter.png", "residuals": "fit_residuals.png", "cv": "fit_cv.png"}
_MONOTONE_GRID = 129
_TIME_COLUMN = {FORM_POLY_STEP: "num_steps", FORM_POLY_SIGMA: "sigma"}


class FitError(ValueError):
    """The data cannot support the requested fit; the message says why."""


@dataclass(frozen=True)
class CandidateSpec:
    """One candidate rescale function: its form, degree in x, mode and degree of the time terms."""

    form: str = FORM_POLY
    degree: int = 4
    mode: str = MODE_FREE
    time_degree: int = 0

    def __post_init__(self) -> None:
        if self.form not in FORMS:
            raise FitError(f"form: expected one of {', '.join(FORMS)}, got {self.form!r}")
        if self.mode not in MODES:
            raise FitError(f"mode: expected one of {', '.join(MODES)}, got {self.mode!r}")
        if not isinstance(self.degree, int) or self.degree < 1:
            raise FitError(f"degree: expected an integer >= 1, got {self.degree!r}")
        if self.form == FORM_POLY and self.time_degree != 0:
            raise FitError("time_degree: only the time-aware forms have time terms")
        if self.form != FORM_POLY and (self.mode != MODE_FREE or self.time_degree < 1):
            raise FitError(f"form {self.form!r}: fitted in mode 'free' with time_degree >= 1")

    @property
    def n_params(self) -> int:
        return self.degree + (0 if self.mode == MODE_ORIGIN else 1) + self.time_degree

    @property
    def label(self) -> str:
        if self.form == FORM_POLY:
            return f"poly{self.degree}-{self.mode}"
        return f"poly{self.degree}+{self.form.split('+')[1]}{self.time_degree}"


@dataclass(frozen=True)
class FittedModel:
    """A fitted candidate: coefficients highest power first, the x range it was fitted on."""

    spec: CandidateSpec
    coefficients: tuple[float, ...]
    time_coefficients: tuple[float, ...]
    x_range: tuple[float, float]

    @classmethod
    def fit(cls, spec: CandidateSpec, x: np.ndarray, y: np.ndarray, u: np.ndarray | None = None) -> FittedModel:
        """Least-squares fit of ``spec`` to (x, y), with ``u`` the time input of the time-aware forms."""
        x = np.asarray(x, dtype=float)
        y = np.asarray(y, dtype=float)
        lo, hi = float(np.min(x)), float(np.max(x))
        tcoef: tuple[float, ...] = ()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", np.exceptions.RankWarning)
            if spec.form != FORM_POLY:
                if u is None:
                    raise FitError(f"{spec.label}: needs the time input ({_TIME_COLUMN[spec.form]})")
                params = _lstsq_scaled(_design(x, spec.degree, True, np.asarray(u, float), spec.time_degree), y)
                coef = tuple(params[: spec.degree + 1])
                tcoef = tuple(params[spec.degree + 1 :])
            elif spec.mode == MODE_FREE:
                coef = tuple(np.polyfit(x, y, spec.degree))
            elif spec.mode == MODE_ORIGIN:
                params = np.linalg.lstsq(_design(x, spec.degree, False), y, rcond=None)[0]
                coef = (*params, 0.0)
            elif spec.mode == MODE_MONOTONE:
                coef = tuple(fit_monotone(x, y, spec.degree, (lo, hi)))
            else:
                raise FitError(f"mode: expected one of {', '.join(MODES)}, got {spec.mode!r}")
        return cls(spec, tuple(float(c) for c in coef), tuple(float(c) for c in tcoef), (lo, hi))

    def predict(self, x: np.ndarray, u: np.ndarray | None = None) -> np.ndarray:
        """The model's own linear form (design matrix times parameters), independent of RescaleFunction."""
        spec = self.spec
        if spec.form == FORM_POLY:
            return _design(np.asarray(x, float), spec.degree, True) @ np.asarray(self.coefficients)
        design = _design(np.asarray(x, float), spec.degree, True, np.asarray(u, float), spec.time_degree)
        return design @ np.asarray(self.coefficients + self.time_coefficients)

    def to_rescale(self, provenance: dict | None = None) -> RescaleFunction:
        return RescaleFunction(
            coefficients=self.coefficients,
            x_range=self.x_range,
            form=self.spec.form,
            time_coefficients=self.time_coefficients,
            provenance=dict(provenance or {}),
        )


def _design(
    x: np.ndarray, degree: int, constant: bool, u: np.ndarray | None = None, time_degree: int = 0
) -> np.ndarray:
    """Columns x^degree .. x^1 (x^0 when ``constant``), then u^time_degree .. u^1: highest power first."""
    powers = np.arange(degree, -1 if constant else 0, -1)
    columns = [x[:, None] ** powers]
    if time_degree:
        columns.append(u[:, None] ** np.arange(time_degree, 0, -1))
    return np.hstack(columns)


def _lstsq_scaled(design: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Least squares with unit-norm columns (better conditioned), mapped back to the raw columns."""
    scale = np.sqrt((design**2).sum(axis=0))
    scale[scale == 0] = 1.0
    return np.linalg.lstsq(design / scale, y, rcond=None)[0] / scale


def fit_monotone(x: np.ndarray, y: np.ndarray, degree: int, x_range: tuple[float, float]) -> np.ndarray:
    """Least-squares polynomial (highest power first) that is non-decreasing on ``x_range``.

    Least squares with linear inequalities (derivative >= 0 on a grid), solved exactly as a least-distance
    problem by scipy's NNLS (Lawson & Hanson, ch. 23). Wherever the derivative still dips below zero
    between grid points (its local minima, from the roots of the second derivative), those points join
    the grid and the problem is solved again.
    """
    from scipy.optimize import nnls

    free = np.polyfit(x, y, degree)
    lo, hi = x_range
    if degree == 0 or _min_derivative(free, lo, hi)[0] >= 0:
        return free
    design = _design(x, degree, True)
    scale = np.sqrt((design**2).sum(axis=0))
    scale[scale == 0] = 1.0
    q, r = np.linalg.qr(design / scale)
    if np.min(np.abs(np.diag(r))) < 1e-12 * np.max(np.abs(np.diag(r))):
        raise FitError(f"monotone degree {degree}: too few distinct x values ({len(np.unique(x))})")
    f = q.T @ y
    powers = np.arange(degree, -1, -1)
    grid = np.linspace(lo, hi, _MONOTONE_GRID)
    coef = free
    tolerance = 1e-9 * max(float(np.ptp(y)), 1e-12) / max(hi - lo, 1e-12)  # on the derivative
    for _ in range(20):
        deriv = np.where(powers > 0, powers * grid[:, None] ** np.maximum(powers - 1, 0), 0.0) / scale
        e = np.linalg.solve(r.T, deriv.T).T  # constraint rows in the variable z = R c - f
        e /= np.maximum(np.abs(e).max(axis=1, keepdims=True), 1e-300)
        lhs = np.vstack([e.T, -(e @ f)[None, :]])
        rhs = np.zeros(degree + 2)
        rhs[-1] = 1.0
        weights = nnls(lhs, rhs, maxiter=100 * lhs.shape[1])[0]
        resid = lhs @ weights - rhs
        z = -resid[:-1] / resid[-1]
        coef = np.linalg.solve(r, z + f) / scale
        worst, where = _min_derivative(coef, lo, hi)
        if worst >= -tolerance:
            break
        grid = np.unique(np.concatenate([grid, where]))
    return coef


def _min_derivative(coef: np.ndarray, lo: float, hi: float) -> tuple[float, np.ndarray]:
    """Smallest derivative of a polynomial on [lo, hi] and the points where it is negative."""
    d1 = np.polyder(coef)
    points = [lo, hi]
    if len(d1) > 1:
        roots = np.roots(np.polyder(d1)) if len(d1) > 2 else np.array([])
        points += [float(t.real) for t in roots if abs(t.imag) < 1e-12 and lo <= t.real <= hi]
    points = np.asarray(points)
    values = np.polyval(d1, points)
    return float(values.min()), points[values < 0]


def candidate_specs(
    has_step: bool,
    has_sigma: bool,
    form: str | None = None,
    degree: int | None = None,
    mode: str | None = None,
    time_degree: int | None = None,
) -> list[CandidateSpec]:
    """Every candidate the data supports, narrowed by whichever of form/degree/mode/time_degree is given."""
    specs = [CandidateSpec(FORM_POLY, d, m) for d in DEGREES for m in MODES]
    for f, ok in ((FORM_POLY_STEP, has_step), (FORM_POLY_SIGMA, has_sigma)):
        if ok or form == f:
            specs += [CandidateSpec(f, d, MODE_FREE, k) for d in DEGREES for k in TIME_DEGREES]
    return [
        s
        for s in specs
        if (form is None or s.form == form)
        and (degree is None or s.degree == degree)
        and (mode is None or s.mode == mode)
        and (time_degree is None or s.time_degree == time_degree)
    ]


def group_folds(groups: Sequence, n_folds: int | None = None) -> np.ndarray:
    """Fold index per row, whole groups per fold (like scikit-learn's GroupKFold).

    Default: one fold per group up to LOO_MAX_PROMPTS groups, else DEFAULT_FOLDS folds; groups are
    dealt largest first to the fold with the fewest rows, so the split is deterministic.
    """
    groups = np.asarray(groups)
    names, inverse, counts = np.unique(groups, return_inverse=True, return_counts=True)
    n_groups = len(names)
    k = n_folds or (n_groups if n_groups <= LOO_MAX_PROMPTS else DEFAULT_FOLDS)
    if not 2 <= k <= n_groups:
        raise FitError(f"--folds: expected 2 to {n_groups} (the number of prompts), got {k}")
    load = np.zeros(k)
    fold_of_group = np.empty(n_groups, dtype=int)
    for g in np.argsort(-counts, kind="stable"):
        f = int(np.argmin(load))
        fold_of_group[g] = f
        load[f] += counts[g]
    return fold_of_group[inverse]


def time_input(form: str, frame: pd.DataFrame) -> np.ndarray | None:
    """The per-row time input of a form, computed as the gate computes it at run time."""
    if form == FORM_POLY_STEP:
        if "num_steps" not in frame.columns:
            raise FitError(f"form {form!r} needs column 'num_steps'; columns found: {', '.join(_cols(frame))}")
        return step_fraction(frame)
    if form == FORM_POLY_SIGMA:
        if "sigma" not in frame.columns:
            raise FitError(
                f"form {form!r} needs column 'sigma' (finite on every row); columns found: {', '.join(_cols(frame))}"
            )
        return frame["sigma"].to_numpy(dtype=float)
    return None


def _cols(frame: pd.DataFrame) -> list[str]:
    return [str(c) for c in frame.columns if not str(c).startswith("_")]


def r2_score(y: np.ndarray, pred: np.ndarray) -> float:
    ss_tot = float(np.sum((y - np.mean(y)) ** 2))
    return 1.0 - float(np.sum((y - pred) ** 2)) / ss_tot


def rmse(y: np.ndarray, pred: np.ndarray) -> float:
    return float(np.sqrt(np.mean((y - pred) ** 2)))


def evaluate_candidate(spec: CandidateSpec, frame: pd.DataFrame, folds: np.ndarray) -> dict:
    """Fit on all rows (in-sample scores) and per fold (pooled out-of-fold scores)."""
    x = frame["x_rel_l1"].to_numpy(dtype=float)
    y = frame["y_rel_l1"].to_numpy(dtype=float)
    u = time_input(spec.form, frame)
    model = FittedModel.fit(spec, x, y, u)
    pred = model.predict(x, u)
    oof = np.empty_like(y)
    for k in np.unique(folds):
        test = folds == k
        part = FittedModel.fit(spec, x[~test], y[~test], None if u is None else u[~test])
        oof[test] = part.predict(x[test], None if u is None else u[test])
    return {
        "label": spec.label,
        "form": spec.form,
        "degree": spec.degree,
        "mode": spec.mode,
        "time_degree": spec.time_degree,
        "n_params": spec.n_params,
        "coefficients": list(model.coefficients),
        "time_coefficients": list(model.time_coefficients),
        "r2": r2_score(y, pred),
        "cv_r2": r2_score(y, oof),
        "rmse": rmse(y, oof),
        "rmse_in_sample": rmse(y, pred),
        "x_range": list(model.x_range),
        "n_prompts": int(frame["prompt_id"].nunique()),
        "n_pairs": len(y),
        "selected": False,
    }


def select(candidates: list[dict], tie_tolerance: float = TIE_TOLERANCE) -> int:
    """Index of the best cv R^2; candidates tied with it (cv MSE within ``tie_tolerance`` relative,
    i.e. 1 - cv R^2 within that factor) go by fewer parameters, then by list order."""
    best = max(c["cv_r2"] for c in candidates)
    limit = (1.0 - best) * (1.0 + tie_tolerance) + 1e-12
    tied = [i for i, c in enumerate(candidates) if 1.0 - c["cv_r2"] <= limit]
    return min(tied, key=lambda i: (candidates[i]["n_params"], -candidates[i]["cv_r2"], i))


def fit_frame(frame: pd.DataFrame, specs: list[CandidateSpec], n_folds: int | None = None) -> dict:
    """Evaluate every candidate on a validated frame; return the selection part of fit.json."""
    if not specs:
        raise FitError("no candidate to fit: the --form/--degree/--mode/--time-degree combination matches none")
    n_prompts = int(frame["prompt_id"].nunique())
    if n_prompts < MIN_PROMPTS:
        raise FitError(
            f"column 'prompt_id': {n_prompts} distinct prompt(s); cross-validation holds prompts out "
            "and needs "
            f"at least {MIN_PROMPTS}. Record more prompts."
        )
    x = frame["x_rel_l1"].to_numpy(dtype=float)
    y = frame["y_rel_l1"].to_numpy(dtype=float)
    if not np.max(x) > np.min(x):
        raise FitError(f"column 'x_rel_l1': every row holds {x[0]!r}; a fit needs a spread of x values")
    if not np.max(y) > np.min(y):
        raise FitError(f"column 'y_rel_l1': every row holds {y[0]!r}; R^2 is undefined without a spread of y")
    folds = group_folds(frame["prompt_id"].to_numpy(), n_folds)
    candidates = [evaluate_candidate(s, frame, folds) for s in specs]
    chosen = select(candidates)
    candidates[chosen]["selected"] = True
    n_f = len(np.unique(folds))
    return {
        "selected": dict(candidates[chosen]),
        "candidates": candidates,
        "selection": {
            "criterion": "cv_r2",
            "cv": "leave-one-prompt-out" if n_f == n_prompts else f"{n_f}-fold grouped by prompt_id",
            "n_folds": n_f,
            "tie_rule": f"cv MSE within {TIE_TOLERANCE:.0%} of the best: fewer parameters win",
        },
    }


def describe_data(traces: Traces) -> dict:
    frame = traces.frame
    x = frame["x_rel_l1"].to_numpy(dtype=float)
    y = frame["y_rel_l1"].to_numpy(dtype=float)
    data = {
        "n_pairs": len(frame),
        "n_prompts": traces.n_prompts,
        "prompts": sorted(frame["prompt_id"].unique().tolist()),
        "n_runs": int(frame.groupby(run_key_columns(frame), sort=False).ngroups),
        "steps": sorted(int(s) for s in frame["step"].unique()),
        "x_range": [float(x.min()), float(x.max())],
        "y_range": [float(y.min()), float(y.max())],
        "branch": traces.branch,
        "dropped_first_step_rows": traces.dropped_first_steps,
        "warnings": list(traces.warnings),
    }
    if "seed" in frame.columns:
        data["seeds"] = sorted({_plain(s) for s in frame["seed"].unique()}, key=str)
    if "num_steps" in frame.columns:
        data["num_steps"] = sorted(int(n) for n in frame["num_steps"].unique())
    if "sigma" in frame.columns:
        data["sigma_range"] = [float(frame["sigma"].min()), float(frame["sigma"].max())]
    return data


def _plain(value):
    return value.item() if hasattr(value, "item") else value


def rescale_from_fit(fit: dict | str | os.PathLike) -> RescaleFunction:
    """The selected candidate of a fit.json (dict, file or folder holding fit.json) as a RescaleFunction."""
    data = read_fit(fit) if not isinstance(fit, dict) else fit
    sel = data["selected"]
    prov = data.get("provenance") or {}
    variants = (data.get("input") or {}).get("variants") or []
    provenance = {
        "source": FIT_KIND,
        "fitted_model": sel.get("label") or CandidateSpec(sel["form"], sel["degree"], sel["mode"]).label,
        "r2": sel["r2"],
        "cv_r2": sel["cv_r2"],
        "rmse_cv": sel["rmse"],
        "n_prompts": sel["n_prompts"],
        "n_pairs": sel["n_pairs"],
        "date_utc": prov.get("date_utc"),
        "git_commit": (prov.get("git") or {}).get("commit"),
        "variant": variants[0] if len(variants) == 1 else (variants or None),
    }
    return RescaleFunction(
        coefficients=tuple(sel["coefficients"]),
        x_range=tuple(sel["x_range"]),
        form=sel["form"],
        time_coefficients=tuple(sel.get("time_coefficients") or ()),
        provenance=provenance,
    )


def read_fit(path: str | os.PathLike) -> dict:
    """Load and check a fit.json (or a folder holding one)."""
    p = Path(path)
    if p.is_dir():
        p = p / "fit.json"
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise FitError(f"FIT: {p} does not exist") from None
    except (OSError, ValueError) as exc:
        raise FitError(f"FIT: cannot read {p} as JSON: {exc}") from None
    if not isinstance(data, dict) or "selected" not in data:
        raise FitError(f"FIT: {p} is not a fit.json written by teacache-calib fit (no 'selected' field)")
    if data.get("format_version") != FORMAT_VERSION:
        raise FitError(
            f"FIT: {p} has format_version {data.get('format_version')!r}; this toolkit reads {FORMAT_VERSION}"
        )
    return data


def load_comparison(source: str, variant: str | None) -> tuple[RescaleFunction, str]:
    """Coefficients to score: 'packaged', a fit.json, a module (.py) or numbers highest power first."""
    if source == "packaged":
        from teacache.coefficients import load_packaged, module_name

        if variant is None:
            raise FitError("--compare packaged: no variant known; pass --variant (the traces have no variant column)")
        try:
            module = module_name(variant)
        except ValueError as exc:
            raise FitError(f"--compare packaged: {exc}") from None
        try:
            return load_packaged(variant), f"packaged teacache.coefficients.{module} ({variant})"
        except ModuleNotFoundError:
            raise FitError(
                f"--compare packaged: variant {variant!r} has no module "
                f"teacache/coefficients/{module}.py yet; "
                "emit one with teacache-calib emit"
            ) from None
    path = Path(source)
    if path.suffix == ".json" or path.is_dir():
        return rescale_from_fit(read_fit(path)), f"fit {path}"
    if path.suffix == ".py":
        if not path.is_file():
            raise FitError(f"--compare: {path} does not exist")
        module = import_module_from_path(path)
        rescale = getattr(module, "RESCALE", None)
        if not isinstance(rescale, RescaleFunction):
            raise FitError(f"--compare: {path} defines no RESCALE = RescaleFunction(...)")
        return rescale, f"module {path}"
    try:
        numbers = tuple(float(v) for v in source.split(",") if v.strip())
        return RescaleFunction(coefficients=numbers, provenance={"source": "--compare"}), "coefficients " + source
    except ValueError:
        raise FitError(
            "--compare: expected 'packaged', a fit.json path, a coefficient module (.py) or comma-separated "
            f"numbers highest power first; got {source!r}"
        ) from None


def import_module_from_path(path: str | os.PathLike):
    """Import a Python file under a private name (never registered in sys.modules)."""
    path = Path(path)
    spec = importlib.util.spec_from_file_location(f"_teacache_coeffs_{abs(hash(str(path.resolve())))}", path)
    if spec is None or spec.loader is None:
        raise FitError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception as exc:  # noqa: BLE001 - report any failure of a user file as one message
        raise FitError(f"cannot import {path}: {type(exc).__name__}: {exc}") from None
    return module


def compare(rescale: RescaleFunction, source: str, frame: pd.DataFrame, selected: dict, margin: float) -> dict:
    """Score existing coefficients on all rows against the new fit.

    They were not fitted on these traces, so their in-sample score is an out-of-sample one.
    """
    x = frame["x_rel_l1"].to_numpy(dtype=float)
    y = frame["y_rel_l1"].to_numpy(dtype=float)
    u = time_input(rescale.form, frame) if rescale.is_time_aware else 0.0
    pred = np.asarray(rescale(x, u), dtype=float)
    old_rmse = rmse(y, pred)
    new_rmse = float(selected["rmse"])
    refit = old_rmse > new_rmse * (1.0 + margin)
    lo, hi = rescale.x_range
    return {
        "source": source,
        "form": rescale.form,
        "coefficients": list(rescale.coefficients),
        "time_coefficients": list(rescale.time_coefficients),
        "x_range": [finite_or_none(lo), finite_or_none(hi)],
        "rows_outside_x_range": int(np.count_nonzero((x < lo) | (x > hi))),
        "r2": r2_score(y, pred),
        "rmse": old_rmse,
        "new_cv_rmse": new_rmse,
        "new_cv_r2": float(selected["cv_r2"]),
        "excess": finite_or_none(old_rmse / new_rmse - 1.0) if new_rmse > 0 else None,
        "margin": margin,
        "verdict": VERDICT_REFIT if refit else VERDICT_OK,
    }


# ---------------------------------------------------------------------------------------------- plots


def render_plots(fit: dict, frame: pd.DataFrame) -> dict[str, bytes]:
    """PNG bytes of the three fit plots, rendered in memory so nothing is written before the end."""
    from matplotlib.figure import Figure

    sel = fit["selected"]
    rescale = rescale_from_fit(fit)
    x = frame["x_rel_l1"].to_numpy(dtype=float)
    y = frame["y_rel_l1"].to_numpy(dtype=float)
    steps = frame["step"].to_numpy()
    u = time_input(sel["form"], frame) if rescale.is_time_aware else 0.0
    resid = y - np.asarray(rescale(x, u), dtype=float)
    lo, hi = rescale.x_range
    title = f"{sel['label']}  R^2 {sel['r2']:.4f}  cv R^2 {sel['cv_r2']:.4f}  ({sel['n_prompts']} prompts)"
    out = {}

    fig = Figure(figsize=(7.5, 5), dpi=100, layout="constrained")
    ax = fig.subplots()
    sc = ax.scatter(x, y, c=steps, cmap="viridis", s=12, alpha=0.8)
    fig.colorbar(sc, ax=ax, label="step")
    ax.axvspan(lo, hi, color="tab:orange", alpha=0.08, label="calibrated x range")
    span = hi - lo
    xs = np.linspace(max(0.0, lo - 0.05 * span), hi + 0.05 * span, 400)
    inside = (xs >= lo) & (xs <= hi)
    for value, name in _curve_times(sel["form"], u):
        ys = np.asarray(rescale(xs, value), dtype=float)
        line = ax.plot(xs[inside], ys[inside], lw=2, label=f"{sel['label']}{name}")[0]
        ax.plot(xs[~inside], ys[~inside], lw=1, ls="--", color=line.get_color())
    ax.set_xlabel("x: rel-L1 change of the modulated input")
    ax.set_ylabel("y: rel-L1 change of the output")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=8)
    out["scatter"] = _png(fig)

    fig = Figure(figsize=(7.5, 4), dpi=100, layout="constrained")
    ax = fig.subplots()
    uniq = np.unique(steps)
    ax.boxplot([resid[steps == s] for s in uniq], positions=uniq, widths=0.6, showfliers=True)
    ax.axhline(0.0, color="grey", lw=1)
    ax.set_xlabel("step")
    ax.set_ylabel("residual y - f(x)")
    ax.set_title(f"residuals of {sel['label']} by step (in-sample)", fontsize=9)
    if len(uniq) > 20:
        ax.set_xticks(uniq[:: max(1, len(uniq) // 10)])
    out["residuals"] = _png(fig)

    cands = fit["candidates"]
    errors = np.array([c["rmse"] for c in cands])
    fig = Figure(figsize=(7.5, 1.4 + 0.28 * len(cands)), dpi=100, layout="constrained")
    ax = fig.subplots()
    pos = np.arange(len(cands))
    ax.barh(pos, errors, color=["tab:orange" if c["selected"] else "tab:blue" for c in cands])
    for p, c in zip(pos, cands, strict=True):
        ax.text(
            c["rmse"],
            p,
            f" cv R^2 {c['cv_r2']:.4f}" + ("  selected" if c["selected"] else ""),
            va="center",
            fontsize=7,
        )
    ax.set_yticks(pos, [c["label"] for c in cands], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlim(0, errors.max() * 1.35)
    ax.set_xlabel("cross-validated RMSE (prompts held out; lower is better)")
    ax.set_title(f"candidates, selected {sel['label']} (cv R^2 {sel['cv_r2']:.4f})", fontsize=9)
    out["cv"] = _png(fig)
    return out


def _curve_times(form: str, u) -> list[tuple[float, str]]:
    if form == FORM_POLY:
        return [(0.0, "")]
    name = "step fraction" if form == FORM_POLY_STEP else "sigma"
    values = np.quantile(np.asarray(u, dtype=float), [0.0, 0.5, 1.0])
    return [(float(v), f" at {name} {v:.2f}") for v in values]


def _png(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue()


# ------------------------------------------------------------------------------------------------ CLI


def setup_arg_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="teacache-calib fit",
        description="Fit rescale functions to trace tables; choose one by leave-prompts-out CV.",
    )
    parser.add_argument("traces", nargs="+", metavar="TRACES", help="trace tables: .parquet, .csv, .json, .jsonl")
    parser.add_argument("--out", required=True, metavar="DIR", help="folder for fit.json and the plots")
    parser.add_argument("--form", choices=FORMS, help="fit only this form")
    parser.add_argument("--degree", type=int, choices=DEGREES, help="fit only this degree in x")
    parser.add_argument("--mode", choices=MODES, help="fit only this mode (time-aware forms are 'free')")
    parser.add_argument("--time-degree", type=int, choices=TIME_DEGREES, help="fit only this degree of time terms")
    parser.add_argument("--branch", help="rows of this branch when the tables have a branch column (default: cond)")
    parser.add_argument("--variant", help="the variant the traces belong to (checked against the tables)")
    parser.add_argument(
        "--folds",
        type=int,
        help=f"grouped CV folds (default: one per prompt up to {LOO_MAX_PROMPTS} prompts, else {DEFAULT_FOLDS})",
    )
    parser.add_argument(
        "--compare",
        metavar="COEFFS",
        help="score existing coefficients: 'packaged', a fit.json, a .py module "
        "or comma-separated numbers highest power first",
    )
    parser.add_argument(
        "--margin",
        type=float,
        default=DEFAULT_MARGIN,
        help="refit when the old RMSE exceeds the new cv RMSE by more than this (default 0.10)",
    )
    parser.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    parser.add_argument(
        "--min-step",
        type=int,
        default=1,
        help="fit on steps >= this (the gate's skip_first_n_steps: earlier steps are always computed)",
    )
    return parser


def run(args: argparse.Namespace, argv: list[str]) -> tuple[dict, dict[str, bytes]]:
    """Everything except writing: validated traces -> fit.json content and plot bytes."""
    if args.margin < 0 or not math.isfinite(args.margin):
        raise FitError(f"--margin: expected a finite number >= 0, got {args.margin!r}")
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise FitError(f"--out: {out} exists and is not a folder")
    traces = load_traces(args.traces, branch=args.branch, variant=args.variant)
    if args.min_step < 1:
        raise FitError(f"--min-step: expected an integer >= 1 (step 0 has no previous step), got {args.min_step}")
    if args.min_step > 1:  # steps the gate always computes say nothing about when it may skip
        traces = dataclasses.replace(traces, frame=traces.frame[traces.frame["step"] >= args.min_step])
    frame = traces.frame
    if args.form in _TIME_COLUMN and _TIME_COLUMN[args.form] not in frame.columns:
        raise FitError(
            f"--form {args.form}: needs column {_TIME_COLUMN[args.form]!r}; columns found: {', '.join(_cols(frame))}"
        )
    specs = candidate_specs(
        "num_steps" in frame.columns,
        "sigma" in frame.columns,
        args.form,
        args.degree,
        args.mode,
        args.time_degree,
    )
    comparison_source = None
    if args.compare:  # resolve before fitting so a bad --compare fails fast
        variant = args.variant or (traces.variants[0] if len(traces.variants) == 1 else None)
        comparison_source = load_comparison(args.compare, variant)
    result = fit_frame(frame, specs, args.folds)
    from teacache.provenance import collect

    fit = {
        "format_version": FORMAT_VERSION,
        "kind": FIT_KIND,
        "variant": traces.variants[0] if len(traces.variants) == 1 else None,
        "form": result["selected"]["form"],
        "fitted_model": result["selected"]["label"],
        **result,
        "data": describe_data(traces),
        "options": {
            k: getattr(args, k)
            for k in ("form", "degree", "mode", "time_degree", "branch", "variant", "folds", "min_step")
        },
        "input": {
            "files": traces.files,
            "provenance": traces.provenance,
            "variants": traces.variants,
        },
        "provenance": collect(["teacache-calib", "fit", *argv]),
    }
    if comparison_source is not None:
        fit["comparison"] = compare(*comparison_source, frame, fit["selected"], args.margin)
    plots = {} if args.no_plots else render_plots(fit, frame)
    fit["plots"] = [PLOT_FILES[name] for name in plots]
    return fit, plots


def print_summary(fit: dict, path: Path) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(width=max(100, Console().width))
    data = fit["data"]
    table = Table(
        title=f"{data['n_pairs']} pairs, {data['n_prompts']} prompts, {fit['selection']['cv']}",
        title_justify="left",
    )
    for name, justify in (
        ("candidate", "left"),
        ("k", "right"),
        ("R^2", "right"),
        ("cv R^2", "right"),
        ("cv RMSE", "right"),
        ("", "left"),
    ):
        table.add_column(name, justify=justify)
    for c in fit["candidates"]:
        table.add_row(
            c["label"],
            str(c["n_params"]),
            f"{c['r2']:.4f}",
            f"{c['cv_r2']:.4f}",
            f"{c['rmse']:.4g}",
            "selected" if c["selected"] else "",
        )
    console.print(table)
    sel = fit["selected"]
    console.print(
        f"selected {sel['label']}: coefficients {sel['coefficients']}"
        + (f", time coefficients {sel['time_coefficients']}" if sel["time_coefficients"] else "")
        + f", x range {sel['x_range'][0]:.4g}..{sel['x_range'][1]:.4g}",
        highlight=False,
    )
    comp = fit.get("comparison")
    if comp:
        console.print(
            f"compare {comp['source']}: R^2 {comp['r2']:.4f}, RMSE {comp['rmse']:.4g} vs new cv RMSE "
            f"{comp['new_cv_rmse']:.4g} ({_pct(comp['excess'])}, margin {comp['margin']:.0%}): "
            f"{comp['verdict']}",
            highlight=False,
        )
    console.print(f"wrote {path}", highlight=False, soft_wrap=True)


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value:+.1%}"


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        args = setup_arg_parser().parse_args(argv)
    except SystemExit as exc:
        return int(exc.code or 0)
    try:
        fit, plots = run(args, argv)
    except (TraceError, FitError) as exc:
        print(f"teacache-calib fit: error: {exc}", file=sys.stderr)
        return 2
    for message in fit["data"]["warnings"]:
        print(f"teacache-calib fit: warning: {message}", file=sys.stderr)
    out = Path(args.out)
    for name, png in plots.items():
        with atomic_path(out / PLOT_FILES[name]) as tmp:
            tmp.write_bytes(png)
    path = out / "fit.json"
    write_json(path, fit)
    print_summary(fit, path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
