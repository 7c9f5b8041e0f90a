"""The sweep's side of sharding: pairs saved by ranks merged into the one table, foreign shard folders refused,
the rank columns, and a report that will not pool two hardware. Two real ring ranks run in the slow lane."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

import calib.run.generation
from bench.report import command as report_cmd
from bench.sweep import command as sweep_cmd
from bench.sweep import records
from bench.sweep import settings as sweep_settings
from bench.sweep.parts import restore_parts
from tests import ROOT
from tests.conftest import free_port_pair, patch_everywhere

SMALL = ["--model", "tiny-flux1", "--steps", "4", "--size", "32x32", "--seeds", "0", "--repeats", "1"]
PROMPTS = {"fox": "a red fox in the snow", "tower": "a lighthouse at dusk"}
TIMING = ["wall_s", "wall_s_median", "speedup", "rank", "contended"]  # what a sharded run may change


@pytest.fixture
def prompts(tmp_path) -> Path:
    path = tmp_path / "prompts.json"
    path.write_text(json.dumps(PROMPTS))
    return path


def sweep(out: Path, prompts: Path, *extra: str) -> int:
    argv = [*SMALL, "--prompts", str(prompts), "--thresholds", "0,0.5", "--out", str(out), *extra]
    return sweep_cmd.main(argv)


@pytest.fixture(scope="module")
def single_sweep(tmp_path_factory, tiny_flux1) -> Path:
    """One plain sweep, made once for this module's tests (they copy it, never change it)."""
    folder = tmp_path_factory.mktemp("single")
    prompts = folder / "prompts.json"
    prompts.write_text(json.dumps(PROMPTS))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(sweep_cmd.arguments, "load_model", lambda name, *args, **kwargs: tiny_flux1)
        assert sweep(folder / "sweep", prompts) == 0
    return folder / "sweep"


@pytest.fixture
def one_process(tmp_path, single_sweep) -> Path:
    out = tmp_path / "single"
    shutil.copytree(single_sweep, out)
    return out


def as_if_two_ranks(single: Path, out: Path) -> None:
    """The folder two ranks leave when each saved one pair and neither merged (interrupted at the barrier): the
    finished one-process sweep's pairs, as a rerun rebuilds them from its tables, spread over two shard folders."""
    saved = out.parent / "saved-pairs"
    shutil.copytree(single, saved)
    assert restore_parts(saved) == ["fox-s0", "tower-s0"]
    for rank, pid in enumerate(["fox-s0", "tower-s0"]):
        folder = out / "shards" / f"rank-{rank}"
        (folder / "pairs").mkdir(parents=True)
        shutil.copy(single / "fingerprint.json", folder / "fingerprint.json")
        for part in (saved / "pairs").glob(f"{pid}.*"):
            shutil.copy(part, folder / "pairs" / part.name)


def test_a_one_process_rerun_merges_what_the_ranks_saved_without_measuring_again(
    tmp_path, prompts, one_process, shared_model, monkeypatch
):
    out = tmp_path / "sharded"
    as_if_two_ranks(one_process, out)

    def no_generation(*args, **kwargs):
        raise AssertionError("a saved pair was measured again")

    patch_everywhere(monkeypatch, calib.run.generation, "generate", no_generation)
    assert sweep(out, prompts) == 0
    merged, single = pd.read_parquet(out / "runs.parquet"), pd.read_parquet(one_process / "runs.parquet")
    pd.testing.assert_frame_equal(merged, single)
    assert not (out / "pairs").exists()  # taken from the shard folders, not copied into OUT/pairs


def test_pairs_lacking_a_requested_threshold_are_not_done(tmp_path, prompts, one_process):
    run = sweep_cmd.sharded_run(
        sweep_settings.plan(
            "tiny-flux1", "0,0.5", tmp_path / "x", prompts=str(prompts), seeds="0", steps=4, size="32x32"
        ),
        world=_one_rank(),
    )
    assert not run.complete(one_process, "fox-s0")  # a finished sweep keeps no pairs/ ...
    restore_parts(one_process)  # ... and a rerun rebuilds them from its tables before it plans
    assert run.complete(one_process, "fox-s0")
    wider = sweep_settings.plan("tiny-flux1", "0,0.3,0.5", tmp_path / "x", prompts=str(prompts), seeds="0", steps=4)
    assert not sweep_cmd.sharded_run(wider, world=_one_rank()).complete(one_process, "fox-s0")


def _one_rank():
    from calib.run import ranks

    peer = ranks.Peer(rank=0, host="h", device="cpu", gpu=None, cores=None, hardware="cpu-test")
    return ranks.World(rank=0, size=1, backend="none", peers=(peer,))


def test_a_shard_folder_made_with_other_settings_is_refused_before_the_model_loads(
    tmp_path, prompts, one_process, monkeypatch, capsys
):
    out = tmp_path / "sharded"
    as_if_two_ranks(one_process, out)
    fp_path = out / "shards" / "rank-1" / "fingerprint.json"
    fp = json.loads(fp_path.read_text())
    fp["settings"]["steps"] = 6
    fp_path.write_text(json.dumps(fp))

    def no_load(*args, **kwargs):
        raise AssertionError("the model loaded")

    monkeypatch.setattr(sweep_cmd.arguments, "load_model", no_load)
    capsys.readouterr()
    assert sweep(out, prompts) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"teacache-bench sweep: --out: {out / 'shards' / 'rank-1'} was made with other settings")
    assert "steps" in err and len(err.splitlines()) == 1
    assert not (out / "runs.parquet").exists()


def test_rank_columns_are_written_when_present_and_keep_older_rows_apart():
    base = {"run_id": "r", "bit_exact": True, "wall_s_median": 1.0, "vanilla_repeats_equal": True}
    base |= {c: 0.0 for c in ("max_abs", "mean_abs", "max_rel", "cosine", "ssim", "psnr")}
    base |= {"format_version": 1, "pair_id": "p", "variant": "v", "model": "m", "prompt_id": "p", "prompt": "t"}
    base |= {"seed": 0, "num_steps": 4, "kind": "proxy-noop"}
    plain = records.to_frame(records.NOOP, [base])
    assert "rank" not in plain.columns  # an unsharded table of an earlier version gains no made-up ranks
    mixed = records.to_frame(records.NOOP, [base, {**base, "rank": 1, "hardware": "cpu-x", "contended": True}])
    assert mixed["rank"].tolist()[1] == 1 and pd.isna(mixed["rank"].tolist()[0])
    assert mixed["contended"].tolist()[1] is True and pd.isna(mixed["contended"].tolist()[0])
    records.validate(mixed, records.NOOP)


def test_the_report_refuses_to_pool_speedups_of_two_hardware(tmp_path, one_process, capsys):
    runs = pd.read_parquet(one_process / "runs.parquet")
    assert set(runs["hardware"]) == {runs["hardware"].iloc[0]}  # a plain sweep names its hardware
    runs.loc[runs["pair_id"] == "tower-s0", "hardware"] = "metal-apple-m2-max"
    runs.to_parquet(one_process / "runs.parquet")
    capsys.readouterr()
    assert report_cmd.main([str(one_process), "--out", str(tmp_path / "report")]) == 2
    err = capsys.readouterr().err
    assert "2 kinds of hardware" in err and "metal-apple-m2-max: 1" in err
    assert not (tmp_path / "report").exists()


# ----------------------------------------------------------------------------- two real ring ranks


def launch_command(out: Path, prompts: Path, seeds: str) -> list[str]:
    return [
        sys.executable, "-c", "import sys; from mlx._distributed_utils.launch import main; sys.exit(main())",
        "--backend", "ring", "-n", "2", "--starting-port", str(free_port_pair()), "--",
        sys.executable, "-m", "bench.cli", "sweep", *SMALL[:6], "--prompts", str(prompts), "--seeds", seeds,
        "--thresholds", "0,0.5", "--repeats", "1", "--out", str(out),
    ]  # fmt: skip


def launched(out: Path, prompts: Path, seeds: str = "0") -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    command = launch_command(out, prompts, seeds)
    return subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)


def same_runs(sharded: Path, single: Path) -> pd.DataFrame:
    a, b = pd.read_parquet(sharded / "runs.parquet"), pd.read_parquet(single / "runs.parquet")
    stored = [c for c in TIMING if c in a.columns]  # the derived timing columns are computed on reading, not stored
    pd.testing.assert_frame_equal(a.drop(columns=stored), b.drop(columns=[c for c in TIMING if c in b.columns]))
    for table in ("decisions.parquet", "noop.parquet"):
        x, y = pd.read_parquet(sharded / table), pd.read_parquet(single / table)
        drop = [c for c in TIMING if c in x.columns]
        pd.testing.assert_frame_equal(x.drop(columns=drop), y.drop(columns=drop))
    return a


@pytest.mark.slow
def test_two_ring_ranks_sweep_into_the_one_process_tables(tmp_path, prompts, one_process):
    done = launched(tmp_path / "sharded", prompts)
    output = done.stdout + done.stderr
    assert "wrote" in done.stdout, output
    runs = same_runs(tmp_path / "sharded", one_process)
    assert runs.groupby("pair_id")["rank"].nunique().eq(1).all()  # every pair on one rank
    assert set(runs["rank"]) == {0, 1}  # both ranks used
    assert runs["contended"].all()  # two ranks on this host's shared cores
    assert json.loads((tmp_path / "sharded" / "provenance.json").read_text())["distributed"]["backend"] == "ring"


@pytest.mark.slow
def test_an_interrupted_sharded_sweep_resumes_to_the_same_result(tmp_path, prompts, shared_model):
    single = tmp_path / "single"
    assert sweep(single, prompts, "--seeds", "0,1") == 0
    out = tmp_path / "sharded"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(launch_command(out, prompts, "0,1"), cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)  # fmt: skip
    lock, marker_dir = out / "shards" / "rank-1" / ".lock", out / "shards" / "rank-1" / "pairs"
    deadline = time.monotonic() + 300
    while not (marker_dir.is_dir() and any(marker_dir.glob("*.runs.parquet"))):  # rank 1 saved one pair
        assert time.monotonic() < deadline and proc.poll() is None, proc.communicate()[0]
        time.sleep(0.05)
    os.kill(json.loads(lock.read_text())["pid"], signal.SIGKILL)  # the lock names the rank's pid
    output = proc.communicate(timeout=300)[0]
    assert not (out / "runs.parquet").exists(), output  # nothing merged from a partial run
    saved = {p: p.stat().st_mtime_ns for p in (out / "shards").glob("rank-*/pairs/*.runs.parquet")}
    assert 1 <= len(saved) < 4, output
    done = launched(out, prompts, "0,1")
    assert "wrote" in done.stdout, done.stdout + done.stderr
    assert {p: p.stat().st_mtime_ns for p in saved} == saved  # saved pairs were not measured again
    runs = same_runs(out, single)
    assert set(runs["rank"]) == {0, 1}
