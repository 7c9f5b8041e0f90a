"""What a refit changes in a packaged coefficient module, in lines for the person reviewing it (``teacache-calib
emit`` prints them before it writes)."""

from __future__ import annotations

import numpy as np

from teacache.rescale import FORM_MONO_STEP, FORM_POLY_SIGMA, FORM_POLY_STEP, RescaleFunction


def describe_changes(old: RescaleFunction | None, new: RescaleFunction, fit: dict) -> list[str]:
    """What replacing ``old`` by ``new`` changes, for a person reviewing the refit."""
    if old is None:
        return ["new module"]
    lines = []
    if old.form != new.form:
        lines.append(f"form: {old.form} -> {new.form}")
    lines.append(f"coefficients: {list(old.coefficients)} -> {list(new.coefficients)}")
    if old.time_coefficients or new.time_coefficients:
        lines.append(f"time coefficients: {list(old.time_coefficients)} -> {list(new.time_coefficients)}")
    if old.interaction_coefficients or new.interaction_coefficients:
        lines.append(f"x*u coefficients: {list(old.interaction_coefficients)} -> {list(new.interaction_coefficients)}")
    if old.knots or new.knots:
        lines.append(f"knots: {list(old.knots)} -> {list(new.knots)}")
        lines.append(f"time knots: {list(old.time_knots)} -> {list(new.time_knots)}")
    lines.append(f"x range: {_range(old.x_range)} -> {_range(new.x_range)}")
    diff, where = max_curve_difference(old, new, fit)
    lines.append(f"max |new - old| over the new x range: {diff:.6g} (at {where})")
    return lines


def _range(r: tuple[float, float]) -> str:
    return f"{r[0]:.6g}..{r[1]:.6g}"


def max_curve_difference(old: RescaleFunction, new: RescaleFunction, fit: dict) -> tuple[float, str]:
    """Largest |new - old| on a grid over the new x range and every time input either form uses."""
    lo, hi = new.x_range
    xs = np.linspace(lo, hi, 401)
    forms = {old.form, new.form}
    steps = np.linspace(0.0, 1.0, 21) if {FORM_POLY_STEP, FORM_MONO_STEP} & set(forms) else np.array([0.0])
    sig_range = (fit.get("data") or {}).get("sigma_range") or [0.0, 1.0]
    sigmas = np.linspace(sig_range[0], sig_range[1], 21) if FORM_POLY_SIGMA in forms else np.array([0.0])

    def at(fn: RescaleFunction, s, g):
        u = s if fn.form in (FORM_POLY_STEP, FORM_MONO_STEP) else (g if fn.form == FORM_POLY_SIGMA else 0.0)
        return np.asarray(fn(xs, u), dtype=float)

    best, where = -1.0, ""
    for s in steps:
        for g in sigmas:
            d = np.abs(at(new, s, g) - at(old, s, g))
            i = int(np.argmax(d))
            if d[i] > best:
                best = float(d[i])
                where = (
                    f"x={xs[i]:.4g}"
                    + (f", step fraction {s:.2f}" if len(steps) > 1 else "")
                    + (f", sigma {g:.3g}" if len(sigmas) > 1 else "")
                )
    return best, where
