"""Table helpers shared by the calib commands. Trace tables have one reader, :mod:`calib.traces.reader`;
its names are available here too, for code that imported them from this module."""

from __future__ import annotations

import math

from calib.traces.reader import (  # noqa: F401  (re-exported)
    DEFAULT_BRANCH,
    OPTIONAL_COLUMNS,
    PROVENANCE_NAME,
    REQUIRED_COLUMNS,
    RunTrace,
    TraceError,
    Traces,
    file_sha256,
    load_traces,
    read_provenance_beside,
    read_table,
    run_key_columns,
    step_fraction,
)


def finite_or_none(value: float) -> float | None:
    """JSON has no infinity: an unbounded end of a range is stored as null."""
    return float(value) if math.isfinite(value) else None
