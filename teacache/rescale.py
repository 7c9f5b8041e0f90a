"""Rescale functions: map the rel-L1 change of block 0's modulated input (x) to a predicted rel-L1
change of the transformer output. Pure numpy: no MLX, no mflux.

Coefficients are stored highest power first, like ``np.polyfit`` and every published TeaCache tuple.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

FORM_POLY = "poly"
FORM_POLY_STEP = "poly+step"
FORM_POLY_SIGMA = "poly+sigma"
FORMS = (FORM_POLY, FORM_POLY_STEP, FORM_POLY_SIGMA)


@dataclass(frozen=True)
class RescaleFunction:
    """A calibrated rescale function with the x range it was fitted on and where it came from.

    ``form="poly"``: ``y = polyval(coefficients, x)``, the TeaCache polynomial.
    ``form="poly+step"`` / ``"poly+sigma"``: ``y = polyval(coefficients, x) + polyval(time_coefficients, u)``
    with ``u`` the step fraction ``step / (num_steps - 1)`` or the scheduler's sigma; ``time_coefficients``
    are highest power first and carry no constant term (the constant lives in ``coefficients``).
    ``interaction_coefficients`` (time-aware forms only, highest power first, no constant) add
    ``x * polyval((*interaction_coefficients, 0), u)``: a slope in x that changes over the schedule.
    """

    coefficients: tuple[float, ...]
    x_range: tuple[float, float] = (0.0, math.inf)
    form: str = FORM_POLY
    time_coefficients: tuple[float, ...] = ()
    provenance: dict = field(default_factory=dict, compare=False, hash=False)
    interaction_coefficients: tuple[float, ...] = ()

    def __post_init__(self) -> None:
        for name in ("coefficients", "time_coefficients", "interaction_coefficients"):
            _check_numbers(getattr(self, name), name)
        coeffs = tuple(float(c) for c in self.coefficients)
        if not coeffs or not all(math.isfinite(c) for c in coeffs):
            raise ValueError(
                f"coefficients: expected a non-empty sequence of finite numbers, got {self.coefficients!r}"
            )
        lo, hi = (float(v) for v in self.x_range)
        if not (lo >= 0 and hi > lo) or math.isnan(hi):
            raise ValueError(f"x_range: expected 0 <= low < high, got {self.x_range!r}")
        if self.form not in FORMS:
            raise ValueError(f"form: expected one of {', '.join(FORMS)}, got {self.form!r}")
        tcoeffs = tuple(float(c) for c in self.time_coefficients)
        if self.form == FORM_POLY and tcoeffs:
            raise ValueError("time_coefficients: only the time-aware forms take them")
        if self.form != FORM_POLY and not tcoeffs:
            raise ValueError(f"time_coefficients: form {self.form!r} needs at least one")
        if not all(math.isfinite(c) for c in tcoeffs):
            raise ValueError(f"time_coefficients: expected finite numbers, got {self.time_coefficients!r}")
        icoeffs = tuple(float(c) for c in self.interaction_coefficients)
        if icoeffs and self.form == FORM_POLY:
            raise ValueError("interaction_coefficients: only the time-aware forms take them")
        if not all(math.isfinite(c) for c in icoeffs):
            raise ValueError(f"interaction_coefficients: expected finite numbers, got {icoeffs!r}")
        object.__setattr__(self, "interaction_coefficients", icoeffs)
        object.__setattr__(self, "coefficients", coeffs)
        object.__setattr__(self, "time_coefficients", tcoeffs)
        object.__setattr__(self, "x_range", (lo, hi))
        self._check_values()

    def _check_values(self) -> None:
        """Finite values where the gate evaluates it: finite coefficients can still overflow float64."""
        hi = self.x_range[1] if math.isfinite(self.x_range[1]) else max(2.0, self.x_range[0])  # rel-L1 is below 2
        with np.errstate(over="ignore", invalid="ignore"):
            values = [self(x, u) for x in np.linspace(self.x_range[0], hi, 5) for u in (0.0, 1.0)]
        if not all(math.isfinite(v) for v in values):
            raise ValueError(
                f"coefficients: the rescale function overflows float64 on x {self.x_range[0]:g}..{hi:g}; expected "
                f"coefficients of a rescale function, got {self.coefficients!r}"
            )

    @property
    def is_time_aware(self) -> bool:
        return self.form != FORM_POLY

    def time_input(self, step: int, num_steps: int, sigma: float | None) -> float:
        """The time variable this form uses at a step (0.0 for the plain polynomial)."""
        if self.form == FORM_POLY_STEP:
            return step / max(num_steps - 1, 1)
        if self.form == FORM_POLY_SIGMA:
            if sigma is None or not math.isfinite(sigma):
                raise ValueError("sigma: form 'poly+sigma' needs the scheduler's sigma at every step")
            return float(sigma)
        return 0.0

    def __call__(self, x, u=0.0):
        """Evaluate at x (scalar or array); ``u`` is the time input of the time-aware forms."""
        y = np.polyval(self.coefficients, x)
        if self.time_coefficients:
            y = y + np.polyval((*self.time_coefficients, 0.0), u)
        if self.interaction_coefficients:
            y = y + np.asarray(x, dtype=float) * np.polyval((*self.interaction_coefficients, 0.0), u)
        return float(y) if np.ndim(y) == 0 else y

    def floor(self, u: float | Sequence[float] = 0.0, grid: int = 4001) -> tuple[float, float]:
        """(minimum of max(0, f) over the calibrated range, x where it is reached).

        Each gated step adds at least this much to the accumulator, so a threshold at or below it
        can never skip. For time-aware forms pass every ``u`` the schedule visits.
        """
        lo, hi = self.x_range
        hi = hi if math.isfinite(hi) else max(lo * 10, 1.0)
        xs = np.linspace(lo, hi, grid)
        us = np.atleast_1d(np.asarray(u, dtype=float))
        values = np.maximum(0.0, np.stack([np.asarray(self(xs, v), dtype=float) for v in us]))
        flat = int(np.argmin(values))
        return float(values.flat[flat]), float(xs[flat % grid])

    def to_dict(self) -> dict:
        data = {
            "form": self.form,
            "coefficients": list(self.coefficients),
            "time_coefficients": list(self.time_coefficients),
            "x_range": list(self.x_range),
            "provenance": self.provenance,
        }
        if self.interaction_coefficients:  # only when used, so earlier files keep their bytes
            data["interaction_coefficients"] = list(self.interaction_coefficients)
        return data

    @classmethod
    def from_dict(cls, data: dict) -> RescaleFunction:
        try:
            return cls(
                coefficients=tuple(data["coefficients"]),
                x_range=tuple(data.get("x_range", (0.0, math.inf))),
                form=data.get("form", FORM_POLY),
                time_coefficients=tuple(data.get("time_coefficients", ())),
                provenance=dict(data.get("provenance", {})),
                interaction_coefficients=tuple(data.get("interaction_coefficients", ())),
            )
        except KeyError as exc:
            raise ValueError(f"rescale function: missing field {exc.args[0]!r}") from None


def _check_numbers(values, name: str) -> None:
    if isinstance(values, str | bytes) or not isinstance(values, Sequence | np.ndarray):
        raise TypeError(f"{name}: expected a sequence of numbers, got {type(values).__name__}")
    for value in values:
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise TypeError(f"{name}: expected numbers, got {value!r} ({type(value).__name__})")


def as_rescale(coefficients: RescaleFunction | Sequence[float] | None, default: RescaleFunction) -> RescaleFunction:
    """Accept a RescaleFunction, a published tuple (highest power first, unbounded range) or None."""
    if coefficients is None:
        return default
    if isinstance(coefficients, RescaleFunction):
        return coefficients
    if isinstance(coefficients, str | bytes) or not isinstance(coefficients, Sequence | np.ndarray):
        raise TypeError(
            f"coefficients: expected a RescaleFunction or a sequence of numbers (highest power first), "
            f"got {type(coefficients).__name__}"
        )
    return RescaleFunction(coefficients=tuple(coefficients), provenance={"source": "user-supplied tuple"})
