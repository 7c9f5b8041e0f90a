"""The one reader of trace tables: ``teacache-calib fit``, ``teacache-bench replay``, ``sweep --traces`` and
``compare-hardware`` all read traces through :func:`load_traces`, so they accept the same inputs and refuse
the same bad ones.

Inputs: Parquet, CSV, JSON (a list of records, or ``{"rows": [...]}``), JSONL, and mlx-teacache calibration
files (``_calibration_<variant>.json``; a file with several signals is named ``PATH#SIGNAL``). A run is
identified by ``run_id``, else by ``prompt_id`` (+ ``seed`` when present); rows are placed by their
``step`` column. ``num_steps`` comes from the table, else from ``--num-steps``, else is inferred per run as
max(step) + 1, and the source is kept (:attr:`Traces.num_steps_source`) so it reaches the provenance.

A bad table stops the command with one message that names the file, the column and what was expected,
before anything is computed or written. Pure pandas/numpy: no MLX, no mflux.
"""

from __future__ import annotations

import os
from pathlib import Path

import pandas as pd

from calib.traces.checks import (
    MAX_NUM_STEPS,
    check_every_step,
    checked_signal,
    keep_branch,
    keep_variant,
    resolve_num_steps,
    typed,
)
from calib.traces.errors import TraceError
from calib.traces.runs import Traces, run_key_columns
from calib.traces.table_files import read_provenance_beside, read_table, split_signal
from teacache.io import file_sha256

REQUIRED_COLUMNS = ("prompt_id", "step", "x_rel_l1", "y_rel_l1")  # a fit needs all four
REPLAY_COLUMNS = ("prompt_id", "step", "x_rel_l1")  # a replay needs the signal only
OPTIONAL_COLUMNS = ("num_steps", "sigma", "seed", "branch", "variant", "run_id")
NUM_STEPS_ARGUMENT = "--num-steps"  # the default name of the argument that gives num_steps


def load_traces(
    paths: list[str | os.PathLike],
    branch: str | None = None,
    variant: str | None = None,
    *,
    num_steps: int | None = None,
    require: tuple[str, ...] = REQUIRED_COLUMNS,
    every_step: bool = False,
    num_steps_arg: str = NUM_STEPS_ARGUMENT,
) -> Traces:
    """Read, concatenate and validate trace tables; raise TraceError on anything unusable.

    ``require``: the columns the command needs (a fit needs y, a replay does not); every column present
    is validated either way. ``num_steps``: the schedule length of runs without a num_steps column, given by
    the argument ``num_steps_arg`` (it must agree with the table where both exist). ``every_step``: each run must
    have a row for every step from 1 to num_steps - 1 (a replay places the gate at every step).
    Rows with NaN x or y on the first step of a run (no previous step) are dropped; any other
    non-finite x or y is an error, because it means the recording went wrong.
    """
    if not paths:
        raise TraceError("TRACES: expected at least one trace table")
    if num_steps is not None and (
        isinstance(num_steps, bool) or not isinstance(num_steps, int) or not 2 <= num_steps <= MAX_NUM_STEPS
    ):
        raise TraceError(
            f"{num_steps_arg}: expected an integer from 2 to {MAX_NUM_STEPS} (a schedule's length in steps), "
            f"got {num_steps!r}"
        )
    frames, files = _read_files(paths, require)
    data = pd.concat(frames, ignore_index=True, sort=False)
    source = ", ".join(f["name"] for f in files)
    warnings: list[str] = []
    data = typed(data, source)
    data, variants = keep_variant(data, files, variant, warnings)
    data, kept_branch = keep_branch(data, branch)
    key = run_key_columns(data)
    data, num_steps_source, notes = resolve_num_steps(data, key, num_steps, num_steps_arg, source)
    data, dropped = checked_signal(data, key, source, warnings)
    data = data.sort_values([*key, "step"], kind="stable").reset_index(drop=True)
    if every_step:
        check_every_step(data, key)
    return Traces(
        frame=data,
        files=files,
        variants=variants,
        branch=kept_branch,
        dropped_first_steps=dropped,
        warnings=warnings,
        num_steps_source=num_steps_source,
        notes=notes,
    )


def _read_files(paths, require: tuple[str, ...]) -> tuple[list[pd.DataFrame], list[dict]]:
    """Each table with the columns ``require`` names (its rows tagged with its file name), and what the
    provenance keeps of each file: path, SHA-256, rows, the provenance it carries or has beside it."""
    frames, files = [], []
    for path in paths:
        frame, embedded = read_table(path)
        name = Path(str(path)).name
        missing = [c for c in require if c not in frame.columns]
        if len(frame.columns) and missing:
            raise TraceError(
                f"TRACES: {name} lacks column(s) {', '.join(missing)} "
                f"(required: {', '.join(require)}); "
                f"columns found: {', '.join(map(str, frame.columns)) or '(none)'}"
            )
        real = split_signal(path)[0]
        files.append(
            {
                "path": str(path),
                "name": name,
                "sha256": file_sha256(real),
                "rows": len(frame),
                "provenance": embedded if embedded is not None else read_provenance_beside(path),
            }
        )
        if len(frame):
            frames.append(frame.assign(_source=name))
    if not frames:
        raise TraceError(f"TRACES: empty input: no rows in {', '.join(f['name'] for f in files)}")
    return frames, files
