"""The sweep folder's tables: one declared schema each, shared by the writer and every reader."""

from __future__ import annotations

import dataclasses
import json
import math

import pandas as pd
import pytest

from bench.report import command as report
from bench.sweep import records
from teacache.gate import StepDecision
from teacache.io import FORMAT_VERSION, write_json


def test_decision_columns_are_the_step_decision_fields():
    assert records.DECISIONS.names == ("run_id", *(f.name for f in dataclasses.fields(StepDecision)))
    kinds = {c.name: c.dtype for c in records.DECISIONS.columns}
    assert kinds == {"run_id": "str", "step": "int", "num_steps": "int", "sigma": "float", "x": "float",
                     "x_used": "float", "rescaled": "float", "accumulated": "float", "compute": "bool",
                     "reason": "str"}  # fmt: skip


def test_the_report_reads_what_the_writer_declares():
    assert records.RUNS.names == report.RUN_COLUMNS
    assert set(report.DECISION_COLUMNS) <= set(records.DECISIONS.names)


def _decision_rows() -> list[dict]:
    first = StepDecision(0, 4, 1.0, None, None, None, 0.0, True, "first")
    skip = StepDecision(1, 4, 0.7, 0.01, 0.01, 0.02, 0.02, False, "skip")
    return [{"run_id": "p-s0-t0.1", **first.as_dict()}, {"run_id": "p-s0-t0.1", **skip.as_dict()}]


def test_written_tables_read_back_with_their_declared_dtypes(tmp_path):
    path = tmp_path / "decisions.parquet"
    records.write_table(path, records.DECISIONS, _decision_rows())
    frame = records.read_table(path, records.DECISIONS)
    assert list(frame.columns) == list(records.DECISIONS.names)
    assert str(frame["step"].dtype) == "int64" and str(frame["compute"].dtype) == "bool"
    assert math.isnan(frame["x"].iloc[0]) and frame["x"].iloc[1] == 0.01


def test_the_writer_refuses_a_column_it_does_not_declare(tmp_path):
    rows = [{**row, "extra": 1} for row in _decision_rows()]
    with pytest.raises(records.RecordError, match="undeclared columns extra"):
        records.write_table(tmp_path / "d.parquet", records.DECISIONS, rows)
    assert not (tmp_path / "d.parquet").exists()


def test_the_reader_names_a_column_of_the_wrong_kind(tmp_path):
    path = tmp_path / "decisions.parquet"
    frame = records.to_frame(records.DECISIONS, _decision_rows()).assign(step=["0", "1"])
    frame.to_parquet(path)
    with pytest.raises(records.RecordError, match="decisions.parquet: column 'step' holds .* expected whole numbers"):
        records.read_table(path, records.DECISIONS)


def test_read_sweep_gives_every_table_of_a_folder(tmp_path):
    base = {"format_version": FORMAT_VERSION, "pair_id": "p-s0", "variant": "v", "model": "m", "prompt_id": "p",
            "prompt": "a fox", "seed": 0, "num_steps": 4, "max_abs": 0.0, "mean_abs": 0.0, "max_rel": 0.0,
            "cosine": 1.0, "ssim": 1.0, "psnr": math.inf, "wall_s_median": 1.0}  # fmt: skip
    run = {"computed": 4, "skipped": 0, "skipped_steps": "[]", "longest_skip_streak": 0, "wall_s": [1.0],
           "speedup": 1.0, "ideal_speedup": 1.0, "adherence": math.nan, "image_path": None,
           "predicted_skipped": math.nan}  # fmt: skip
    runs = [
        {**base, **run, "run_id": "p-s0-vanilla", "kind": "vanilla", "threshold": math.nan},
        {**base, **run, "run_id": "p-s0-t0.1", "kind": "teacache", "threshold": 0.1},
    ]
    records.write_table(tmp_path / "runs.parquet", records.RUNS, runs)
    records.write_table(tmp_path / "decisions.parquet", records.DECISIONS, _decision_rows())
    noop = {**base, "run_id": "p-s0-proxy-noop", "kind": "proxy-noop", "bit_exact": True, "vanilla_repeats_equal": True}
    records.write_table(tmp_path / "noop.parquet", records.NOOP, [noop])
    write_json(tmp_path / "provenance.json", {"format_version": FORMAT_VERSION})
    found = records.read_sweep(tmp_path)
    assert len(found.runs) == 2 and len(found.decisions) == 2 and bool(found.noop["bit_exact"].iloc[0])
    assert found.provenance == json.loads((tmp_path / "provenance.json").read_text())
    (tmp_path / "noop.parquet").write_bytes(b"not parquet")
    with pytest.raises(records.RecordError, match="cannot read .*noop.parquet"):
        records.read_sweep(tmp_path)
    pd.DataFrame(runs).drop(columns=["kind"]).to_parquet(tmp_path / "runs.parquet")
    with pytest.raises(records.RecordError, match="runs.parquet lacks columns: kind"):
        records.read_sweep(tmp_path)


def test_a_damaged_pair_file_names_the_way_out(tmp_path):
    from bench.sweep.parts import read_part

    path = tmp_path / "p-s0.runs.parquet"
    path.write_bytes(b"PAR1 truncated")
    with pytest.raises(records.RecordError, match="delete that file and run the same command again"):
        read_part(path, records.RUNS)
