"""Table helpers shared by the calib commands (trace tables have one reader, :mod:`calib.traces.reader`)."""

from __future__ import annotations

import math


def finite_or_none(value: float) -> float | None:
    """JSON has no infinity: an unbounded end of a range is stored as null."""
    return float(value) if math.isfinite(value) else None
