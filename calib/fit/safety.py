"""The fit's safety check of rescale functions: it lives in :mod:`teacache.safety`, beside the gate, so that
coefficients a user hands to ``apply_teacache`` are held to the same check; re-exported here for the fit."""

from __future__ import annotations

from teacache.safety import (
    GRID_U,
    GRID_X,
    SLOPE_ROUNDING,
    TIME_RANGE,
    UNBOUNDED_TOP,
    UnsafeRescaleError,
    UnsafeRescaleWarning,
    check,
    check_given,
    describe,
    describe_intervals,
    flagged_intervals,
    positive_nowhere,
    region_grid,
    short,
    slope,
    unsafe_intervals,
)

__all__ = [
    "GRID_U",
    "GRID_X",
    "SLOPE_ROUNDING",
    "TIME_RANGE",
    "UNBOUNDED_TOP",
    "UnsafeRescaleError",
    "UnsafeRescaleWarning",
    "check",
    "check_given",
    "describe",
    "describe_intervals",
    "flagged_intervals",
    "positive_nowhere",
    "region_grid",
    "short",
    "slope",
    "unsafe_intervals",
]
