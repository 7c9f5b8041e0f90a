"""A sweep's tables hold measured fields only; what follows from them is derived on reading, in one place.

The committed tables under results/ were written when runs.parquet still stored the derived columns; they stay
as they are (each report's summary.json records the sha256 of its runs.parquet), and reading them recomputes
those columns, which must equal the stored ones exactly.
"""

from __future__ import annotations

import math
import shutil

import numpy as np
import pandas as pd
import pytest

from bench.sweep import records
from tests import ROOT

COMMITTED = sorted(ROOT.glob("results/**/runs.parquet"))
DERIVED = [d.name for d in records.RUNS.derived]


def _rel(path) -> str:
    return str(path.relative_to(ROOT))


def test_the_declared_tables_hold_measured_columns_only():
    assert DERIVED == ["skipped", "wall_s_median", "speedup", "ideal_speedup", "speedup_in_process"]
    assert not set(DERIVED) & set(records.RUNS.names)
    assert records.NOOP.derived == () and records.DECISIONS.derived == ()  # noop's wall_s_median: one timed run


@pytest.mark.parametrize("path", COMMITTED, ids=_rel)
def test_a_committed_table_reads_with_its_stored_derived_columns_recomputed_exactly(path):
    stored = pd.read_parquet(path)
    assert set(DERIVED) - {"speedup_in_process"} <= set(stored.columns)  # written before they were derived
    read = records.read_table(path, records.RUNS)
    pd.testing.assert_frame_equal(read, stored, check_exact=True)  # same columns, order, dtypes and values
    raw = records.to_frame(records.RUNS, stored)
    assert not set(DERIVED) & set(raw.columns)
    pd.testing.assert_frame_equal(records.derive_columns(raw), stored, check_exact=True)


def _sweep_folder(tmp_path, name: str):
    src = ROOT / "results/cpu-amd-epyc-2c/tiny-shapes/0.24.0/baselines/isolated"  # in-process times too
    folder = tmp_path / name
    folder.mkdir()
    for file in records.SWEEP_FILES:
        shutil.copy(src / file, folder / file)
    return folder


def test_the_writer_leaves_out_derived_columns_and_both_formats_read_the_same(tmp_path):
    old = _sweep_folder(tmp_path, "old")
    new = _sweep_folder(tmp_path, "new")
    written = records.write_table(new / records.RUNS.file, records.RUNS, pd.read_parquet(old / records.RUNS.file))
    on_disk = pd.read_parquet(new / records.RUNS.file)
    assert list(on_disk.columns) == list(written.columns)
    assert not set(DERIVED) & set(on_disk.columns) and "wall_s_in_process" in on_disk.columns
    a, b = records.read_sweep(old), records.read_sweep(new)
    pd.testing.assert_frame_equal(a.runs, b.runs, check_exact=True)
    pd.testing.assert_frame_equal(a.noop, b.noop, check_exact=True)
    pd.testing.assert_frame_equal(a.decisions, b.decisions, check_exact=True)


def _rows() -> list[dict]:
    base = {"pair_id": "p-s0", "num_steps": 10}
    return [
        {**base, "run_id": "p-s0-vanilla", "kind": "vanilla", "computed": 10, "wall_s": [2.0, 4.0, 3.0]},
        {**base, "run_id": "p-s0-t0.1", "kind": "teacache", "computed": 4, "wall_s": [1.0, 1.5]},
        {"pair_id": "q-s0", "num_steps": 10, "run_id": "q-s0-t0.1", "kind": "teacache", "computed": 5, "wall_s": [1.0]},
    ]


def test_each_derived_column_from_its_inputs():
    runs = records.derive_columns(pd.DataFrame(_rows()))
    assert list(runs.columns) == ["pair_id", "num_steps", "run_id", "kind", "computed", "skipped", "wall_s",
                                  "wall_s_median", "speedup", "ideal_speedup"]  # fmt: skip
    assert list(runs["skipped"]) == [0, 6, 5] and str(runs["skipped"].dtype) == "int64"
    assert list(runs["wall_s_median"]) == [3.0, 1.25, 1.0]
    assert runs["speedup"].iloc[0] == 1.0 and runs["speedup"].iloc[1] == 3.0 / 1.25
    assert math.isnan(runs["speedup"].iloc[2])  # no vanilla run in its pair: validate_runs names it
    assert list(runs["ideal_speedup"]) == [1.0, 2.5, 2.0]
    isolated = pd.DataFrame(_rows()[:2]).assign(wall_s_in_process=[[4.0], np.array([0.5, 1.5])])
    assert list(records.derive_columns(isolated)["speedup_in_process"]) == [1.0, 4.0]


def test_a_derived_column_without_its_inputs_is_one_message_naming_file_and_column():
    runs = pd.DataFrame(_rows()).drop(columns=["wall_s"])
    with pytest.raises(records.RecordError) as caught:
        records.derive_columns(runs, file="sweep/runs.parquet")
    assert str(caught.value) == (
        "sweep/runs.parquet: column 'wall_s_median' is derived from wall_s; the table lacks wall_s"
    )
    assert "\n" not in str(caught.value)


def test_an_orphan_run_is_named_as_such_although_its_speedup_is_nan(tmp_path):
    folder = _sweep_folder(tmp_path, "orphan")
    runs = pd.read_parquet(folder / records.RUNS.file)
    vanilla = runs[runs["kind"] == "vanilla"]["run_id"].iloc[0]
    records.write_table(folder / records.RUNS.file, records.RUNS, runs[runs["run_id"] != vanilla])
    with pytest.raises(records.RecordError, match="missing vanilla pair for run_id"):
        records.read_sweep(folder)
