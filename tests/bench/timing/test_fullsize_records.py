"""fullsize's declared tables: the committed ones read, their summaries rebuild byte for byte, and a table
without a required column is refused in one line naming the file and the column."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from bench.sweep.records import RecordError
from bench.timing import fullsize_records as records
from bench.timing import fullsize_tables
from tests import ROOT

RESULTS = ROOT / "results"
RUNS = sorted({*RESULTS.glob("*/fullsize*/runs.csv"), *RESULTS.glob("cuda-nvidia-h200/fullsize-50-steps/*/runs.csv")})


def _rel(path: Path) -> str:
    return str(path.relative_to(ROOT))


def test_the_committed_campaigns_are_found():
    assert len(RUNS) >= 4


@pytest.mark.parametrize("path", RUNS, ids=_rel)
def test_committed_tables_read_through_the_reader(path):
    runs = records.read_table(path, records.RUNS)
    summary = records.read_table(path.with_name("summary.csv"), records.SUMMARY)
    assert list(runs.columns) == list(records.RUNS.names) and len(runs)
    assert list(summary.columns) == list(records.SUMMARY.names) and len(summary)


@pytest.mark.parametrize("path", RUNS, ids=_rel)
def test_committed_summary_rebuilds_byte_identically_from_its_runs(path):
    """Where runs.csv holds every raw field (kind, exact, ...) summary.csv is derived from it alone; the older
    campaigns (no kind) keep the summary they were written with."""
    runs = records.read_table(path, records.RUNS)
    if runs["kind"].isna().all():
        pytest.skip("measured before runs.csv held every field the summary is derived from")
    rebuilt = records.csv_text(records.SUMMARY, fullsize_tables.summarize(runs))
    assert rebuilt == path.with_name("summary.csv").read_text(encoding="utf-8")


def test_a_table_without_a_required_column_is_refused_in_one_line(tmp_path):
    source = RESULTS / "cuda-nvidia-h200" / "fullsize-50-steps" / "z-image" / "runs.csv"
    broken = tmp_path / "runs.csv"
    pd.read_csv(source).drop(columns="loop_s").to_csv(broken, index=False)
    with pytest.raises(RecordError) as caught:
        records.read_table(broken, records.RUNS)
    message = str(caught.value)
    assert "\n" not in message and str(broken) in message and "'loop_s'" in message


def test_an_optional_column_may_be_absent_and_comes_back_empty(tmp_path):
    path = tmp_path / "runs.csv"
    frame = pd.read_csv(RESULTS / "cuda-nvidia-h200" / "fullsize-50-steps" / "z-image" / "runs.csv")
    frame.drop(columns=["note", "kind"]).to_csv(path, index=False)
    runs = records.read_table(path, records.RUNS)
    assert runs["note"].isna().all() and runs["kind"].isna().all()


def test_a_column_of_the_wrong_kind_is_refused(tmp_path):
    path = tmp_path / "runs.csv"
    frame = pd.read_csv(RESULTS / "cuda-nvidia-h200" / "fullsize-50-steps" / "z-image" / "runs.csv")
    frame.assign(loop_s="slow").to_csv(path, index=False)
    with pytest.raises(RecordError, match="'loop_s' holds .*; expected numbers"):
        records.read_table(path, records.RUNS)


def test_the_writer_refuses_undeclared_columns(tmp_path):
    with pytest.raises(RecordError, match="undeclared columns speed"):
        records.write_table(tmp_path / "summary.csv", records.SUMMARY, [{"model": "m", "speed": 1.0}])
    assert not (tmp_path / "summary.csv").exists()


def test_peer_table_reads_through_the_reader(tmp_path, capsys):
    from bench.peer import table as peer_table

    pd.read_csv(RESULTS / "cuda-nvidia-h200" / "fullsize-peer" / "summary.csv").drop(columns="arm").to_csv(
        tmp_path / "summary.csv", index=False
    )
    assert peer_table.main([str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "'arm'" in err[0] and "summary.csv" in err[0]
