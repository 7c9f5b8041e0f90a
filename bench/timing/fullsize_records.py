"""``teacache-bench fullsize``'s tables: one declared schema each, one writer and one reader for both.

``runs.csv`` (the raw table: one row per generation, or per arm that could not run, at full precision) and
``summary.csv`` (derived from it: one row per configuration and arm). Declared with the sweep's
:class:`~bench.sweep.schema.Column` and :class:`~bench.sweep.schema.Table`; written only through
:func:`write_table` and read only through :func:`read_table` (fullsize's merge, ``teacache-bench peer-table``,
the rebuild test), so a column the writer drops or renames fails at the reader with one message naming the
file and the column.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from bench.sweep.records import RecordError
from bench.sweep.schema import Column, Table
from teacache.io import write_text

# The configuration a row belongs to: rows are merged, resumed and summarized by it.
CONFIG_KEY = ("model", "quantize", "resolution", "steps", "tag")
_KEY = (Column("model", "str"), Column("quantize", "int"), Column("resolution", "str"), Column("steps", "int"),
        Column("tag", "str"))  # fmt: skip


def _later(*columns: Column) -> tuple[Column, ...]:
    """Columns that campaigns measured before runs.csv held every field the summary is derived from lack
    (results/cuda-nvidia-h200/fullsize and fullsize-peer): readers accept tables without them."""
    return tuple(Column(c.name, c.dtype, required=False) for c in columns)


RUNS = Table(
    "runs.csv",
    _KEY
    + (
        Column("repeat", "int"),
        Column("position", "int"),  # in its repeat's interleaved order
        Column("arm", "str"),  # vanilla, proxy-all, fast-path, "gate <threshold>", mlx-teacache...
        Column("loop_s", "float"),  # the denoising loop
        Column("total_s", "float"),
        Column("skipped", "int"),
        Column("peak_memory_gib", "float"),
        Column("cache_memory_mib", "float"),
    )
    + _later(
        Column("kind", "str"),  # the arm without its threshold; empty in the rows of those older campaigns
        Column("threshold", "float"),
        Column("predicted_skipped", "float"),  # replayed from the proxy-all warm-up run's signal
        Column("exact", "bool"),  # final latents equal to the vanilla run's of the same repeat
        Column("max_abs_diff", "float"),
        Column("branches", "int"),
        Column("family", "str"),
        Column("variant", "str"),
        Column("params_b", "float"),
        Column("dtype", "str"),
        Column("guidance", "float"),
        Column("full_size", "bool"),
        Column("rescale", "str"),
        Column("hardware", "str"),
        Column("note", "str"),  # why an arm could not run here (then no timing)
        Column("blocks", "int"),  # First-Block Cache's arms: the body's blocks (block 0 runs at every step)
    ),
)
SUMMARY = Table(
    "summary.csv",
    tuple(
        Column(name, dtype)
        for name, dtype in (
            ("family", "str"),
            ("model", "str"),
            ("variant", "str"),
            ("params_b", "float"),
            ("dtype", "str"),
            ("quantize", "int"),
            ("resolution", "str"),
            ("steps", "int"),
            ("guidance", "float"),
            ("branches", "int"),
            ("arm", "str"),
            ("threshold", "float"),
            ("skipped", "int"),
            ("predicted_skipped", "float"),
            ("speedup", "float"),
            ("speedup_min", "float"),
            ("speedup_max", "float"),
            ("ideal", "float"),
            ("ratio_to_ideal", "float"),
            ("vanilla_ms_per_step", "float"),
            ("vanilla_ms_per_step_min", "float"),
            ("vanilla_ms_per_step_max", "float"),
            ("arm_ms_per_step", "float"),
            ("proxy_overhead_pct", "float"),
            ("proxy_overhead_pct_min", "float"),
            ("proxy_overhead_pct_max", "float"),
            ("peak_memory_gib", "float"),
            ("vanilla_peak_memory_gib", "float"),
            ("cache_memory_mib", "float"),
            ("noop_exact", "bool"),
            ("max_abs_diff", "float"),
            ("repeats", "int"),
            ("full_size", "bool"),
            ("rescale", "str"),
            ("tag", "str"),
            ("hardware", "str"),
        )
    )  # fmt: skip
    + (Column("note", "str", required=False),),  # the first H200 campaign's summary predates it
)
FLOAT_FORMAT = {RUNS.file: None, SUMMARY.file: "%.6g"}  # runs at full precision; the summary as people read it
_BOOLS = {True, False, "True", "False"}


def _problem(series: pd.Series, dtype: str) -> str | None:
    """What a CSV column should hold, when it does not (empty cells are missing values in every kind)."""
    numeric = pd.api.types.is_numeric_dtype(series) and not pd.api.types.is_bool_dtype(series)
    if dtype in ("int", "float") and not numeric:
        return "numbers"
    if dtype == "int" and not all(float(v).is_integer() for v in series.dropna()):
        return "whole numbers"
    if dtype == "bool" and not pd.api.types.is_bool_dtype(series) and not set(series.dropna()) <= _BOOLS:
        return "True/False"
    return None


def check_columns(frame: pd.DataFrame, table: Table, where: str | Path) -> None:
    """Refuse a table that lacks a required column or holds one of the wrong kind, in one line naming both."""
    missing = [c for c in table.required if c not in frame.columns]
    if missing:
        more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
        raise RecordError(f"{where}: no column {missing[0]!r}{more}; expected teacache-bench fullsize's {table.file}")
    for column in table.columns:
        if column.name in frame.columns:
            expected = _problem(frame[column.name], column.dtype)
            if expected is not None:
                found = frame[column.name].dtype
                raise RecordError(f"{where}: column {column.name!r} holds {found}; expected {expected}")


def read_table(path: str | Path, table: Table) -> pd.DataFrame:
    """A table fullsize wrote, read back as written ("" is missing; floats round-trip), with every declared
    column: those an older campaign lacks come back empty."""
    path = Path(path)
    if not path.is_file():
        raise RecordError(f"{path} does not exist; expected teacache-bench fullsize's {table.file}")
    try:
        frame = pd.read_csv(path, keep_default_na=False, na_values=[""], dtype={"tag": str})
    except (ValueError, UnicodeDecodeError) as exc:  # pandas' parser errors are ValueErrors
        raise RecordError(f"{path} is not a readable CSV file ({exc})") from None
    check_columns(frame, table, path)
    return frame.reindex(columns=[*table.names, *(c for c in frame.columns if c not in table.names)])


def to_frame(table: Table, rows: list[dict] | pd.DataFrame) -> pd.DataFrame:
    """Rows as a frame with exactly the table's columns in its order; refuse undeclared columns."""
    frame = rows if isinstance(rows, pd.DataFrame) else pd.DataFrame(list(rows))
    unknown = [c for c in frame.columns if c not in table.names]
    if unknown:
        raise RecordError(f"{table.file}: the writer got undeclared columns {', '.join(map(str, unknown))}")
    return frame.reindex(columns=list(table.names))


def csv_text(table: Table, rows: list[dict] | pd.DataFrame) -> str:
    """The text of ``rows`` as ``table`` (every declared column, in order): what :func:`write_table` writes and a
    rebuild compares with the committed file."""
    return to_frame(table, rows).to_csv(index=False, float_format=FLOAT_FORMAT[table.file])


def write_table(path: str | Path, table: Table, rows: list[dict] | pd.DataFrame) -> None:
    """Write ``rows`` atomically as ``table``."""
    write_text(path, csv_text(table, rows))
