"""The sweep folder's tables: one declared schema per table, one writer and one reader for each.

``runs.parquet`` (one row per run), ``decisions.parquet`` (one row per gated step of a TeaCache run,
the columns of :class:`teacache.gate.StepDecision`), ``noop.parquet`` (one proxy-noop run per
pair) and ``schedules.parquet`` (the skipped count the ``--traces`` replay predicts, per run), plus
``provenance.json``; their schemas are declared in :mod:`bench.sweep.schema`. The sweep writes them through
:func:`write_table`; the report, the tolerances and the notebook read them through :func:`read_sweep`, so a
column the writer drops or renames fails at the reader with one message instead of deep inside a plot.

A table file holds measured fields only. What follows from them (a run's median time, its speedup over the
pair's vanilla run, its skipped count and ideal speedup) is declared beside the table
(:class:`~bench.sweep.schema.Derived`) and computed on reading by :func:`derive_columns`, the one place that
computes it; a table of an earlier version that still stores those columns reads the same, its stored copies
replaced by the computed ones. A run's predicted skips cannot be recomputed from the folder (the traces replayed
are not in it): they have a table of their own, and a runs table of an earlier version keeps the ones it stored.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from bench.sweep.schema import DECISIONS, KINDS, NOOP, RUNS, SCHEDULES, Table
from teacache.errors import TeaCacheError
from teacache.io import FORMAT_VERSION, file_sha256, read_json_object, write_parquet

MAX_LISTED = 5  # offending rows named in one error message before "and N more"


class RecordError(TeaCacheError, ValueError):
    """A sweep table cannot be read; the message names the file, the column and what was expected."""


# ---------------------------------------------------------------------------------------------- write


def to_frame(table: Table, rows: list[dict] | pd.DataFrame) -> pd.DataFrame:
    """Rows as a frame with exactly the table's columns, in its order and dtypes; refuse unknown columns.

    Derived columns (a frame read back carries them) are left out: :func:`derive_columns` computes them on reading.
    """
    frame = rows if isinstance(rows, pd.DataFrame) else pd.DataFrame(list(rows))
    frame = frame.drop(columns=[d.name for d in table.derived if d.name in frame.columns])
    unknown = [c for c in frame.columns if c not in table.names]
    if unknown:
        raise RecordError(f"{table.file}: the writer got undeclared columns {', '.join(unknown)}")
    # an optional column the rows lack is left out, not written as a column of made-up values
    frame = frame.reindex(columns=[c.name for c in table.columns if c.required or c.name in frame.columns])
    for column in table.columns:
        if column.name not in frame.columns:
            continue
        gaps = not column.required and bool(frame[column.name].isna().any())  # rows of an earlier version
        if column.dtype == "int":
            frame[column.name] = frame[column.name].astype("Int64" if gaps else "int64")
        elif column.dtype == "float":
            frame[column.name] = pd.to_numeric(frame[column.name]).astype("float64")
        elif column.dtype == "bool":
            frame[column.name] = frame[column.name].astype("boolean" if gaps else bool)
    return frame


def write_table(path: str | Path, table: Table, rows: list[dict] | pd.DataFrame) -> pd.DataFrame:
    """Write ``rows`` atomically as ``table``; returns the frame written."""
    frame = to_frame(table, rows)
    write_parquet(path, frame)
    return frame


# ----------------------------------------------------------------------------------------------- read


def _read_parquet(path: Path) -> pd.DataFrame:
    try:
        return pd.read_parquet(path)
    except Exception as exc:  # noqa: BLE001 - pyarrow raises many types for a damaged file
        raise RecordError(f"cannot read {path}: {exc}") from None


def _dtype_problem(series: pd.Series, dtype: str) -> str | None:
    values = series.dropna() if dtype in ("str", "list") else series
    if dtype == "int" and not (pd.api.types.is_integer_dtype(series) and not pd.api.types.is_bool_dtype(series)):
        return "whole numbers"
    if dtype == "float" and not (pd.api.types.is_numeric_dtype(series) and not pd.api.types.is_bool_dtype(series)):
        return "numbers"
    if dtype == "bool" and not pd.api.types.is_bool_dtype(series):
        return "true/false values"
    if dtype == "str" and not all(isinstance(v, str) for v in values):
        return "text"
    if dtype == "list" and not all(hasattr(v, "__len__") and not isinstance(v, str) for v in values):
        return "lists of numbers"
    return None


def validate(frame: pd.DataFrame, table: Table) -> None:
    """Refuse a frame whose columns are missing or of the wrong kind, naming the first problem."""
    missing = [c for c in table.required if c not in frame.columns]
    if missing:
        raise RecordError(f"{table.file} lacks columns: {', '.join(missing)}")
    for column in table.columns:
        if column.name in frame.columns:
            expected = _dtype_problem(frame[column.name], column.dtype)
            if expected is not None:
                raise RecordError(
                    f"{table.file}: column {column.name!r} holds {frame[column.name].dtype} values; expected {expected}"
                )


# Every run has these as finite numbers; PSNR may also be +inf (identical images), nothing may be NaN or -inf.
FINITE = ("wall_s_median", "speedup", "ideal_speedup", "max_abs", "mean_abs", "max_rel", "cosine", "ssim")


RUN_KEY = ("pair_id", "run_id", "kind", "threshold", "arm", "arm_setting", "rescale")  # what makes a row one run


def _name(runs: pd.DataFrame, position: int) -> str:
    row = runs.iloc[position]
    return str(row["run_id"]) if "run_id" in runs.columns else f"{row['pair_id']} {row['kind']}"


def check_rows(runs: pd.DataFrame) -> None:
    """Checked like the trace reader checks traces: no run twice (it would count its pair twice in every
    percentile and tolerance), no NaN or infinite measurement (a CI of [4.49, inf] is no measurement).
    Only the columns the frame has: the tolerances read a subset."""
    key = [c for c in RUN_KEY if c in runs.columns]
    repeated = runs.duplicated(subset=key, keep=False).to_numpy()
    if repeated.any():
        first = _name(runs, int(np.flatnonzero(repeated)[0]))
        raise RecordError(
            f"runs.parquet: {int(repeated.sum())} rows repeat a run (first: {first}); a run counted twice moves every "
            "percentile: rebuild the table from the sweep's pairs (run the sweep again)"
        )
    for column in (c for c in (*FINITE, "psnr") if c in runs.columns):
        values = pd.to_numeric(runs[column], errors="coerce").to_numpy(dtype=float)
        bad = np.isnan(values) | (np.isinf(values) if column != "psnr" else np.isneginf(values))
        if bad.any():
            allowed = "finite or +inf (identical images)" if column == "psnr" else "finite"
            raise RecordError(
                f"runs.parquet: column {column!r} has {int(bad.sum())} NaN or infinite value(s) (first: run_id "
                f"{_name(runs, int(np.flatnonzero(bad)[0]))}); expected {allowed}: re-run the sweep for those pairs"
            )
    _check_ranges(runs)


# What a measurement can be at all (SSIM and cosine within [-1, 1] up to float rounding, errors >= 0): a value
# outside is no measurement, and a report would rank thresholds by it.
_RANGES = {
    "ssim": (-1.0 - 1e-6, 1.0 + 1e-6, "-1..1"),
    "cosine": (-1.0 - 1e-6, 1.0 + 1e-6, "-1..1"),
    "max_abs": (0.0, math.inf, ">= 0"),
    "mean_abs": (0.0, math.inf, ">= 0"),
    "max_rel": (0.0, math.inf, ">= 0"),
}


def _check_ranges(runs: pd.DataFrame) -> None:
    """Measurements inside what they can be, steps counted within the schedule, every timed repeat > 0 s."""
    for column, (lo, hi, expected) in _RANGES.items():
        if column in runs.columns:
            values = pd.to_numeric(runs[column], errors="coerce").to_numpy(dtype=float)
            _refuse_rows(runs, column, (values < lo) | (values > hi), expected, values)
    if {"computed", "num_steps"} <= set(runs.columns):
        computed, steps = (
            pd.to_numeric(runs[c], errors="coerce").to_numpy(dtype=float) for c in ("computed", "num_steps")
        )
        _refuse_rows(runs, "computed", ~((computed >= 1) & (computed <= steps)), "1..num_steps", computed)
    for column in ("wall_s", "wall_s_in_process"):
        if column in runs.columns:
            bad = runs[column].map(lambda w: w is not None and any(not (float(t) > 0) for t in w)).to_numpy(dtype=bool)
            _refuse_rows(runs, column, bad, "loop times > 0 s", None)


def _refuse_rows(runs: pd.DataFrame, column: str, bad: np.ndarray, expected: str, values: np.ndarray | None) -> None:
    """RecordError naming the column, how many rows and the first one, when ``bad`` flags any."""
    if not bad.any():
        return
    first = int(np.flatnonzero(bad)[0])
    value = "" if values is None else f" = {values[first]:g}"
    raise RecordError(
        f"runs.parquet: column {column!r} has {int(bad.sum())} value(s) outside {expected} (first: run_id "
        f"{_name(runs, first)}{value}); no sweep measures that: re-run the sweep for those pairs"
    )


def _check_layout(runs: pd.DataFrame) -> None:
    """The runs table's version, its measured columns and at least one row: what deriving the rest needs."""
    if "format_version" in runs.columns:
        versions = sorted({int(v) for v in runs["format_version"].dropna().unique()})
        if versions != [FORMAT_VERSION] and versions:
            found = ", ".join(str(v) for v in versions)
            raise RecordError(
                f"runs table from another tool version: format_version {found}, this tool reads "
                f"{FORMAT_VERSION}; re-run the sweep"
            )
    missing = [c for c in RUNS.required if c not in runs.columns]
    if missing:
        raise RecordError(f"runs.parquet lacks columns: {', '.join(missing)}")
    if runs.empty:
        raise RecordError("runs.parquet has no rows: the sweep recorded no run")


def validate_runs(runs: pd.DataFrame) -> None:
    """The runs table (derived columns included): its version, columns and kinds, a vanilla run for every
    TeaCache run's pair, and finite measurements (:func:`check_rows`)."""
    _check_layout(runs)
    validate(runs, RUNS)
    bad_kind = sorted(set(runs["kind"]) - set(KINDS))
    if bad_kind:
        raise RecordError(f"runs.parquet: unknown kind {', '.join(map(repr, bad_kind))}; expected {KINDS}")
    tc = runs[runs["kind"] == "teacache"]
    if tc.empty:
        raise RecordError("runs.parquet has no TeaCache runs (kind == 'teacache'): nothing to report")
    no_threshold = tc[pd.to_numeric(tc["threshold"], errors="coerce").isna()]
    if not no_threshold.empty:
        raise RecordError(f"TeaCache run_id {no_threshold['run_id'].iloc[0]} has no threshold")
    vanilla_pairs = set(runs.loc[runs["kind"] == "vanilla", "pair_id"])
    orphans = tc[~tc["pair_id"].isin(vanilla_pairs)]
    if not orphans.empty:  # before check_rows: an orphan's speedup is NaN, and the missing pair is the news
        listed = [
            f"missing vanilla pair for run_id {r.run_id} (prompt_id {r.prompt_id}, seed {r.seed})"
            for r in orphans.head(MAX_LISTED).itertuples()
        ]
        more = len(orphans) - len(listed)
        tail = f"; and {more} more" if more > 0 else ""
        raise RecordError("; ".join(listed) + tail + "; re-run the sweep for those pairs")
    check_rows(runs)


def _predicted(frame: pd.DataFrame, schedules: pd.DataFrame | None) -> pd.Series:
    """Each run's predicted skipped count: from the folder's schedules.parquet where it has one; else as a runs
    table of an earlier version stored it (the traces it was replayed from are not in the folder); else NaN."""
    if schedules is not None:
        by_run = schedules.drop_duplicates("run_id").set_index("run_id")["predicted_skipped"]
        return frame["run_id"].map(by_run).astype("float64")
    if "predicted_skipped" in frame.columns:
        return pd.to_numeric(frame["predicted_skipped"]).astype("float64")
    return pd.Series(np.nan, index=frame.index, dtype="float64")


def derive_columns(
    frame: pd.DataFrame, table: Table = RUNS, file: str | None = None, schedules: pd.DataFrame | None = None
) -> pd.DataFrame:
    """``frame`` with ``table``'s derived columns computed from its measured ones, each placed where the tables
    of earlier versions stored it; stored copies of them (those tables) are replaced. The one place they are
    computed: :func:`read_table` calls it for every reader. ``file``: the name a missing input is reported under;
    ``schedules``: the folder's schedules.parquet, where it has one.
    """
    out = frame.drop(columns=[d.name for d in table.derived if d.name in frame.columns])
    for derived in table.derived:
        missing = [c for c in derived.inputs if c not in out.columns]
        if derived.optional and derived.inputs[-1] in missing:
            continue
        if missing:
            raise RecordError(
                f"{file or table.file}: column {derived.name!r} is derived from {', '.join(derived.inputs)}; "
                f"the table lacks {', '.join(missing)}"
            )
        values = _predicted(frame, schedules) if derived.compute is None else derived.compute(out)
        at = out.columns.get_loc(derived.after) + 1 if derived.after in out.columns else len(out.columns)
        out.insert(at, derived.name, values)
    return out


def read_table(path: str | Path, table: Table, schedules: pd.DataFrame | None = None) -> pd.DataFrame:
    """One table file, its derived columns computed (:func:`derive_columns`), validated (runs get the full check of
    :func:`validate_runs`).

    ``schedules``: the predicted skips of the runs (:data:`SCHEDULES`), where the folder has them (a runs table
    of an earlier version stores them itself, as the pair parts of one did).
    """
    frame = _read_parquet(Path(path))
    if table is RUNS:
        _check_layout(frame)
        validate(frame, table)  # the measured columns' kinds first: deriving from a float wall_s would crash
        frame = derive_columns(frame, table, Path(path).name, schedules)
        validate_runs(frame)
    else:
        validate(frame, table)
    return frame


def read_provenance(folder: Path) -> dict:
    path = folder / "provenance.json"
    if not path.is_file():
        raise RecordError(f"no provenance.json in {folder}: a report needs to say where its runs came from")
    provenance = read_json_object(path, RecordError)
    if provenance.get("format_version") != FORMAT_VERSION:
        raise RecordError(
            f"provenance.json from another tool version: format_version {provenance.get('format_version')}, "
            f"this tool reads {FORMAT_VERSION}; re-run the sweep"
        )
    return provenance


@dataclass(frozen=True)
class SweepRecords:
    """The raw records of one sweep folder, validated."""

    runs: pd.DataFrame
    decisions: pd.DataFrame | None  # None: the folder has no decisions.parquet
    noop: pd.DataFrame | None  # None: the folder has no noop.parquet
    provenance: dict
    runs_sha256: str


def read_sweep(folder: str | Path) -> SweepRecords:
    """Read and validate a sweep folder; raises RecordError with one clear message."""
    folder = Path(folder)
    if not folder.is_dir():
        raise RecordError(f"no sweep folder at {folder}")
    runs_path = folder / RUNS.file
    if not runs_path.is_file():
        raise RecordError(f"no runs.parquet in {folder}: point at the folder `teacache-bench sweep` wrote (…/sweep)")
    schedules_path = folder / SCHEDULES.file
    schedules = read_table(schedules_path, SCHEDULES) if schedules_path.is_file() else None
    runs = read_table(runs_path, RUNS, schedules=schedules)
    provenance = read_provenance(folder)
    optional = {}
    for table in (DECISIONS, NOOP):
        path = folder / table.file
        optional[table.file] = read_table(path, table) if path.is_file() else None
    return SweepRecords(
        runs=runs,
        decisions=optional[DECISIONS.file],
        noop=optional[NOOP.file],
        provenance=provenance,
        runs_sha256=file_sha256(runs_path),
    )
