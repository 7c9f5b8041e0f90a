"""The input of a report: a sweep folder's runs, decisions and provenance, read and validated.

The tables' schemas live in ``bench.sweep.schema``, their reader in ``bench.sweep.records`` (the sweep writes
through it); every problem found becomes one ReportInputError whose message says what is wrong and what to do,
raised before anything is computed or written.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from bench.sweep import records, schema
from calib.run import ranks
from teacache.errors import TeaCacheError

RUN_COLUMNS: tuple[str, ...] = records.RUNS.names
DECISION_COLUMNS: tuple[str, ...] = records.DECISIONS.required
KINDS = schema.KINDS


class ReportInputError(TeaCacheError, ValueError):
    """The sweep folder cannot be reported on; the message says what is wrong and what to do."""


@dataclass(frozen=True)
class Sweep:
    """The raw records of one sweep folder, validated."""

    runs: pd.DataFrame
    decisions: pd.DataFrame | None
    provenance: dict
    runs_sha256: str
    folder: Path | None = None  # the sweep folder (its images/ feed the image grids)


def validate_runs(runs: pd.DataFrame) -> None:
    """Refuse a runs table this tool cannot read, with one message naming the first problem found."""
    try:
        records.validate_runs(runs)
    except records.RecordError as exc:
        raise ReportInputError(str(exc)) from None


def load_sweep(runs_dir: str | Path) -> Sweep:
    """Read and validate a sweep folder (bench.sweep.records); raises ReportInputError with one clear message."""
    try:
        found = records.read_sweep(runs_dir)
    except records.RecordError as exc:
        raise ReportInputError(str(exc)) from None
    try:
        ranks.one_hardware(found.runs)  # a sharded sweep over unlike machines: no speedup pooled across them
    except ranks.MixedHardware as exc:
        raise ReportInputError(f"{runs_dir}: {exc}") from None
    return Sweep(found.runs, found.decisions, found.provenance, found.runs_sha256, Path(runs_dir))
