"""A sweep's tables hold measured fields only; what follows from them is derived on reading, in one place.

The committed tables under results/ were written when runs.parquet still stored the derived columns; they stay
as they are (each report's summary.json records the sha256 of its runs.parquet), and reading them recomputes
those columns, which must equal the stored ones exactly. The predicted skips (a replay of traces the folder does
not hold) move to schedules.parquet; a runs table of an earlier version keeps the ones it stored.
"""

from __future__ import annotations

import math
import shutil
import subprocess

import numpy as np
import pandas as pd
import pytest

from bench.sweep import records, schema
from tests import ROOT, committed

DERIVED = [d.name for d in records.RUNS.derived]


def _stores_derived(path) -> bool:
    """A table written when runs.parquet still stored the derived columns (a later sweep stores none)."""
    import pyarrow.parquet as pq

    return "speedup" in pq.read_schema(path).names


TABLES = committed("results/**/runs.parquet")  # not a demo's, a journey's or a user's own
COMMITTED = [p for p in TABLES if _stores_derived(p)]
CURRENT = [p for p in TABLES if not _stores_derived(p)]


def _rel(path) -> str:
    return str(path.relative_to(ROOT))


def test_the_declared_tables_hold_measured_columns_only():
    assert DERIVED == [
        "skipped",
        "wall_s_median",
        "speedup",
        "ideal_speedup",
        "speedup_in_process",
        "predicted_skipped",
    ]
    assert not set(DERIVED) & set(records.RUNS.names)
    assert records.NOOP.derived == () and records.DECISIONS.derived == ()  # noop's wall_s_median: one timed run
    assert records.SCHEDULES.names == ("run_id", "predicted_skipped")


def test_only_the_tables_git_tracks_are_checked(tmp_path):
    def git(*args: str) -> None:
        subprocess.run(["git", "-C", str(tmp_path), *args], check=True, capture_output=True)

    git("init", "-q")
    (tmp_path / ".gitignore").write_text("/results/demo/\n/results/mine/\n")
    for folder in ("committed/sweep", "demo/tiny-open-flux2/sweep", "mine/sweep", "new/sweep"):
        (tmp_path / "results" / folder).mkdir(parents=True)
        (tmp_path / "results" / folder / "runs.parquet").write_bytes(b"not a table")
    git("add", ".gitignore", "results/committed/sweep/runs.parquet")
    assert committed("results/**/runs.parquet", tmp_path) == [tmp_path / "results/committed/sweep/runs.parquet"]
    assert all(p.is_relative_to(ROOT) for p in TABLES) and TABLES  # the project's own, from its checkout


@pytest.mark.parametrize("path", CURRENT, ids=_rel)
def test_a_table_of_todays_format_stores_measured_fields_only_and_reads_with_them_derived(path):
    stored = pd.read_parquet(path)
    assert not set(DERIVED) & set(stored.columns)
    read = records.read_table(path, records.RUNS)
    assert set(DERIVED) - {"speedup_in_process"} <= set(read.columns)
    assert (read["skipped"] >= 0).all() and (read["ideal_speedup"] >= 1.0).all()


@pytest.mark.parametrize("path", COMMITTED, ids=_rel)
def test_a_committed_table_reads_with_its_stored_derived_columns_recomputed_exactly(path):
    stored = pd.read_parquet(path)
    assert set(DERIVED) - {"speedup_in_process"} <= set(stored.columns)  # written before they were derived
    read = records.read_table(path, records.RUNS)
    pd.testing.assert_frame_equal(read, stored, check_exact=True)  # same columns, order, dtypes and values
    raw = records.to_frame(records.RUNS, stored)
    assert not set(DERIVED) & set(raw.columns)
    schedules = stored.loc[stored["predicted_skipped"].notna(), ["run_id", "predicted_skipped"]]
    pd.testing.assert_frame_equal(records.derive_columns(raw, schedules=schedules), stored, check_exact=True)


ISOLATED = "results/cpu-amd-epyc-2c/tiny-shapes/0.24.0/baselines/isolated"  # in-process times too
PREDICTED = "results/cpu-amd-epyc-2c/tiny-shapes/0.24.0/baselines/sweep"  # baseline arms, some runs predicted


def _sweep_folder(tmp_path, name: str, src: str = ISOLATED):
    folder = tmp_path / name
    folder.mkdir()
    for file in schema.SWEEP_FILES:
        if (ROOT / src / file).is_file():
            shutil.copy(ROOT / src / file, folder / file)
    return folder


@pytest.mark.parametrize("src", [ISOLATED, PREDICTED])
def test_the_writer_leaves_out_derived_columns_and_both_formats_read_the_same(tmp_path, src):
    old = _sweep_folder(tmp_path, "old", src)
    new = _sweep_folder(tmp_path, "new", src)
    assert not (old / records.SCHEDULES.file).exists()  # written before the predictions had a table
    stored = pd.read_parquet(old / records.RUNS.file)
    written = records.write_table(new / records.RUNS.file, records.RUNS, stored)
    predicted = stored.loc[stored["predicted_skipped"].notna(), ["run_id", "predicted_skipped"]]
    records.write_table(new / records.SCHEDULES.file, records.SCHEDULES, predicted)
    on_disk = pd.read_parquet(new / records.RUNS.file)
    assert list(on_disk.columns) == list(written.columns)
    assert not set(DERIVED) & set(on_disk.columns) and "wall_s" in on_disk.columns
    a, b = records.read_sweep(old), records.read_sweep(new)
    pd.testing.assert_frame_equal(a.runs, b.runs, check_exact=True)
    pd.testing.assert_frame_equal(a.noop, b.noop, check_exact=True)
    pd.testing.assert_frame_equal(a.decisions, b.decisions, check_exact=True)
    assert (src == PREDICTED) == bool(b.runs["predicted_skipped"].notna().any())


def test_without_schedules_a_new_table_has_no_predictions(tmp_path):
    folder = _sweep_folder(tmp_path, "plain", PREDICTED)
    records.write_table(folder / records.RUNS.file, records.RUNS, pd.read_parquet(folder / records.RUNS.file))
    assert records.read_sweep(folder).runs["predicted_skipped"].isna().all()
    records.write_table(folder / records.SCHEDULES.file, records.SCHEDULES, [])  # a sweep without --traces
    assert records.read_sweep(folder).runs["predicted_skipped"].isna().all()


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
                                  "wall_s_median", "speedup", "ideal_speedup", "predicted_skipped"]  # fmt: skip
    assert list(runs["skipped"]) == [0, 6, 5] and str(runs["skipped"].dtype) == "int64"
    assert list(runs["wall_s_median"]) == [3.0, 1.25, 1.0]
    assert runs["speedup"].iloc[0] == 1.0 and runs["speedup"].iloc[1] == 3.0 / 1.25
    assert math.isnan(runs["speedup"].iloc[2])  # no vanilla run in its pair: validate_runs names it
    assert list(runs["ideal_speedup"]) == [1.0, 2.5, 2.0] and runs["predicted_skipped"].isna().all()
    predicted = pd.DataFrame({"run_id": ["p-s0-t0.1"], "predicted_skipped": [5.0]})
    assert list(records.derive_columns(runs, schedules=predicted)["predicted_skipped"].fillna(-1)) == [-1, 5.0, -1]
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
