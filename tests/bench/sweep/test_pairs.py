"""A finished sweep folder keeps its merged tables, not its pairs: pairs/ goes once the tables are merged, and a
rerun rebuilds it from them before it plans, so it resumes, extends and merges again as if pairs/ had been kept.
An interrupted sweep keeps its pairs and resumes from them."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import pandas as pd
import pytest

import calib.run.generation
from bench.sweep import merge
from bench.sweep.files import TABLES
from bench.sweep.parts import restore_parts
from tests.conftest import patch_everywhere, sweep

TOWER = "a lighthouse at dusk"  # the second pair's prompt (tests.conftest's prompts)
WIDER = ("--thresholds", "0,0.3,0.5")  # the folder's thresholds and one more


def tables(folder: Path) -> dict[str, bytes]:
    return {name: (folder / name).read_bytes() for name in TABLES}


def parts(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted((folder / "pairs").iterdir())}


@pytest.fixture
def generations(monkeypatch) -> list[str]:
    """Every generation's prompt, in order; each one timed 1 s, so two folders that measured the same runs hold the
    same bytes."""
    real, prompts = calib.run.generation.generate, []

    def timed(model, prompt, *args, **kwargs):
        prompts.append(prompt)
        return dataclasses.replace(real(model, prompt, *args, **kwargs), loop_s=1.0, total_s=1.0)

    patch_everywhere(monkeypatch, calib.run.generation, "generate", timed)
    return prompts


@pytest.fixture
def kept(tmp_path, prompts, shared_model, generations, monkeypatch) -> Path:
    """A finished sweep whose pairs/ is kept, as an earlier version left every folder."""
    out = tmp_path / "kept"
    with monkeypatch.context() as patch:
        patch.setattr(merge, "discard_parts", lambda out: None)
        assert sweep(out, prompts) == 0
    assert sorted(p.name for p in (out / "pairs").glob("*.runs.parquet")) == ["fox-s0.runs.parquet",
                                                                                "tower-s0.runs.parquet"]  # fmt: skip
    generations.clear()
    return out


def without_pairs(folder: Path, copy: Path) -> Path:
    shutil.copytree(folder, copy)
    shutil.rmtree(copy / "pairs")
    return copy


def test_a_sweep_leaves_its_tables_and_no_pairs(tmp_path, prompts, shared_model):
    out = tmp_path / "sweep"
    assert sweep(out, prompts) == 0
    assert not (out / "pairs").exists()
    assert set(pd.read_parquet(out / "runs.parquet")["pair_id"]) == {"fox-s0", "tower-s0"}
    assert all((out / name).is_file() for name in (*TABLES, "provenance.json", "fingerprint.json"))


def test_the_parts_rebuilt_from_the_tables_are_those_the_sweep_saved(tmp_path, kept):
    rebuilt = without_pairs(kept, tmp_path / "rebuilt")
    assert restore_parts(rebuilt) == ["fox-s0", "tower-s0"]
    assert parts(rebuilt) == parts(kept)  # byte for byte
    assert restore_parts(rebuilt) == []  # nothing is rebuilt twice
    for name in ("tower-s0.runs.parquet", "tower-s0.noop.parquet"):  # a pair lacking parts is rebuilt alone
        (rebuilt / "pairs" / name).unlink()
    fox = (rebuilt / "pairs" / "fox-s0.runs.parquet").stat().st_mtime_ns
    assert restore_parts(rebuilt) == ["tower-s0"]
    assert parts(rebuilt) == parts(kept)
    assert (rebuilt / "pairs" / "fox-s0.runs.parquet").stat().st_mtime_ns == fox


def test_a_rerun_of_a_finished_sweep_measures_nothing_and_keeps_its_tables(tmp_path, prompts, kept, generations,
                                                                           capsys):  # fmt: skip
    out = without_pairs(kept, tmp_path / "finished")
    before = {**tables(out), "provenance.json": (out / "provenance.json").read_bytes()}
    capsys.readouterr()
    assert sweep(out, prompts) == 0
    assert generations == []
    assert "2 pairs (2 done)" in capsys.readouterr().out
    assert {**tables(out), "provenance.json": (out / "provenance.json").read_bytes()} == before
    assert not (out / "pairs").exists()
    assert sweep(kept, prompts) == 0  # a folder of an earlier version, its pairs kept: the same, pairs/ then goes
    assert generations == [] and not (kept / "pairs").exists()


def test_an_extension_without_pairs_gives_the_tables_of_one_with_pairs_kept(tmp_path, prompts, kept, generations):
    rebuilt = without_pairs(kept, tmp_path / "rebuilt")
    assert sweep(kept, prompts, *WIDER) == 0
    measured_kept = list(generations)
    generations.clear()
    assert sweep(rebuilt, prompts, *WIDER) == 0
    assert generations == measured_kept  # the same runs measured: the new threshold's, no finished one again
    assert tables(rebuilt) == tables(kept)  # byte for byte
    assert not (rebuilt / "pairs").exists() and not (kept / "pairs").exists()
    runs = pd.read_parquet(rebuilt / "runs.parquet")
    assert sorted(runs.loc[runs["kind"] == "teacache", "threshold"]) == [0.0, 0.0, 0.3, 0.3, 0.5, 0.5]


def test_an_interrupted_sweep_keeps_its_pairs_and_resumes(tmp_path, prompts, shared_model, generations, monkeypatch):
    out = tmp_path / "sweep"

    def stopped_at_the_second_pair(model, prompt, *args, **kwargs):
        if prompt == TOWER:
            raise KeyboardInterrupt
        return real(model, prompt, *args, **kwargs)

    real = calib.run.generation.generate
    with monkeypatch.context() as patch:
        patch_everywhere(patch, calib.run.generation, "generate", stopped_at_the_second_pair)
        assert sweep(out, prompts) == 130
    assert sorted(p.name for p in (out / "pairs").iterdir()) == [
        "fox-s0.decisions.parquet", "fox-s0.noop.parquet", "fox-s0.runs.parquet",
    ]  # fmt: skip
    assert not (out / "runs.parquet").exists()
    saved = pd.read_parquet(out / "pairs" / "fox-s0.runs.parquet")
    generations.clear()
    assert sweep(out, prompts) == 0
    assert set(generations) == {TOWER}  # the saved pair is not measured again
    assert not (out / "pairs").exists()
    runs = pd.read_parquet(out / "runs.parquet")
    pd.testing.assert_frame_equal(runs[runs["pair_id"] == "fox-s0"].reset_index(drop=True), saved)
