"""The sweep folder's tables declared: one schema per table (its measured columns, their kinds, and the columns
derived from them on reading), and the files a sweep folder holds.

``runs.parquet`` (one row per run), ``decisions.parquet`` (one row per gated step of a TeaCache run, the columns of
:class:`teacache.gate.StepDecision`), ``noop.parquet`` (one proxy-noop run per pair) and ``schedules.parquet``
(the skipped count the ``--traces`` replay predicts, per run). :mod:`bench.sweep.records` writes and reads them.
"""

from __future__ import annotations

import dataclasses
import statistics
import typing
from collections.abc import Callable
from dataclasses import dataclass

import pandas as pd

from teacache.gate import StepDecision

KINDS = ("vanilla", "teacache", "fewer-steps", "static", "step-cache", "mlx-teacache")  # the last four: --baselines
SWEEP_FILES = ("runs.parquet", "decisions.parquet", "noop.parquet", "schedules.parquet", "provenance.json")


@dataclass(frozen=True)
class Column:
    name: str
    dtype: str  # "int", "float" (None is NaN), "bool", "str" (None allowed), "list" (of floats)
    required: bool = True  # False: readers accept tables without it (the writer always writes it)


@dataclass(frozen=True)
class Derived:
    """A column computed from others of its table on reading (:func:`derive_columns`); the writer leaves it out."""

    name: str
    after: str  # the column it follows in the frame readers see (where tables of earlier versions stored it)
    inputs: tuple[str, ...]
    compute: Callable[[pd.DataFrame], pd.Series] | None  # None: from the folder's schedules.parquet (see _predicted)
    optional: bool = False  # derived only where the table has its last input (an optional column)


@dataclass(frozen=True)
class Table:
    file: str
    columns: tuple[Column, ...]  # what the file holds: measured fields only
    derived: tuple[Derived, ...] = ()

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.columns)

    @property
    def required(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.columns if c.required)


def _from_hint(hint) -> str:
    """The column dtype of a StepDecision field: int, float (optional floats too), bool or str."""
    args = [a for a in typing.get_args(hint) if a is not type(None)] or [hint]
    kind = args[0]
    return {int: "int", float: "float", bool: "bool", str: "str"}[kind]


def _decision_columns() -> tuple[Column, ...]:
    hints = typing.get_type_hints(StepDecision)
    fields = [f.name for f in dataclasses.fields(StepDecision)]
    # x_used joined the log after the first synthetic fixtures; nothing downstream needs it
    return (Column("run_id", "str"),) + tuple(Column(n, _from_hint(hints[n]), required=n != "x_used") for n in fields)


_PAIR_BASE = (
    Column("format_version", "int"),
    Column("pair_id", "str"),
    Column("variant", "str"),
    Column("model", "str"),
    Column("prompt_id", "str"),
    Column("prompt", "str"),
    Column("seed", "int"),
    Column("num_steps", "int"),
    Column("run_id", "str"),
    Column("kind", "str"),
)
_QUALITY = tuple(Column(n, "float") for n in ("max_abs", "mean_abs", "max_rel", "cosine", "ssim", "psnr"))
# Which rank of a sharded run (calib.run.shard) measured the row, on which hardware, and whether ranks shared its
# cores or GPU; tables of earlier versions lack them.
_RANK = (Column("rank", "int", required=False), Column("hardware", "str", required=False),
         Column("contended", "bool", required=False))  # fmt: skip


def _medians(times: pd.Series) -> pd.Series:
    """The median of every row's timed repeats (NaN for a row without them), as the sweep took it."""
    return times.map(lambda w: float(statistics.median(w)) if w is not None and len(w) else float("nan"))


def _over_vanilla(runs: pd.DataFrame, times: str) -> pd.Series:
    """The pair's vanilla median over each row's median (NaN for a row whose pair has no vanilla run)."""
    medians = _medians(runs[times])
    vanilla = runs["kind"] == "vanilla"
    reference = pd.Series(medians[vanilla].to_numpy(), index=runs.loc[vanilla, "pair_id"].to_numpy())
    reference = reference[~reference.index.duplicated()]  # a repeated run is refused by check_rows
    return runs["pair_id"].map(reference).astype("float64") / medians


_RUNS_DERIVED = (
    Derived("skipped", "computed", ("num_steps", "computed"), lambda r: r["num_steps"] - r["computed"]),
    Derived("wall_s_median", "wall_s", ("wall_s",), lambda r: _medians(r["wall_s"])),
    Derived("speedup", "wall_s_median", ("pair_id", "kind", "wall_s"), lambda r: _over_vanilla(r, "wall_s")),
    # N over the steps whose transformer body ran (fewer-steps: N over N')
    Derived("ideal_speedup", "speedup", ("num_steps", "computed"), lambda r: r["num_steps"] / r["computed"]),
    Derived("speedup_in_process", "wall_s_in_process", ("pair_id", "kind", "wall_s_in_process"),
            lambda r: _over_vanilla(r, "wall_s_in_process"), optional=True),
    Derived("predicted_skipped", "image_path", (), None),  # NaN without --traces; by run_id from schedules.parquet
)  # fmt: skip

RUNS = Table(
    "runs.parquet",
    _PAIR_BASE
    + (
        Column("threshold", "float"),  # NaN for vanilla
        Column("computed", "int"),
        Column("skipped_steps", "str"),  # JSON list of step indices
        Column("longest_skip_streak", "int"),
        Column("wall_s", "list"),  # loop time of every repeat, in measured order
    )
    + _QUALITY
    + (
        Column("adherence", "float"),
        Column("image_path", "str"),  # images/<run_id>.png; no such file for a t0 run equal to vanilla (sweep.images)
    )
    + _RANK
    # a sweep with --baselines, --compare-coefficients or --isolate only: what ran and how it was timed
    + (
        Column("arm", "str", required=False),  # vanilla, teacache or a baseline arm
        Column("arm_setting", "str", required=False),  # threshold, N', schedule or ratio
        Column("rescale", "str", required=False),  # teacache: the rescale function's source
        Column("steps_run", "int", required=False),  # loop steps (fewer-steps: N')
        Column("wall_s_in_process", "list", required=False),  # --isolate: the in-process times
    ),
    _RUNS_DERIVED,
)
DECISIONS = Table("decisions.parquet", _decision_columns())
# One row per run whose skip schedule replaying --traces predicted (merge.write_tables); what runs.parquet's
# predicted_skipped reads from. Always written, empty without --traces.
SCHEDULES = Table("schedules.parquet", (Column("run_id", "str"), Column("predicted_skipped", "float")))
NOOP = Table(
    "noop.parquet",
    _PAIR_BASE
    + (Column("bit_exact", "bool"), Column("wall_s_median", "float"))  # the one timed run's loop time, as measured
    + _QUALITY
    + (Column("vanilla_repeats_equal", "bool"),)
    + _RANK,
)
