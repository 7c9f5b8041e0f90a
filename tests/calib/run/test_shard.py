"""Sharding over mlx.launch ranks (calib.run.shard, ranks, units): shares, contention, verdicts, two real ring ranks."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st

from calib.run import ranks, shard, units
from tests import ROOT
from tests.calib.run import shard_worker
from tests.conftest import free_port_pair

TIMING = ["wall_s", "rank", "contended"]  # what may differ between a sharded and a one-process run


# ----------------------------------------------------------------------------------------- shares


@given(st.integers(0, 40), st.integers(1, 6))
def test_shares_are_deterministic_disjoint_and_cover_the_plan(n_keys, size):
    keys = [f"p{i}-s0" for i in range(n_keys)]
    shares = units.assign(keys, size)
    assert shares == units.assign(list(keys), size)
    flat = [k for share in shares for k in share]
    assert sorted(flat) == sorted(keys) and len(flat) == len(set(flat))
    assert max(map(len, shares)) - min(map(len, shares)) <= 1
    for share in shares:
        assert share == [k for k in keys if k in share]  # plan order within a share


def test_shares_round_robin_over_the_plan():
    assert units.assign(["a", "b", "c", "d", "e"], 2) == [["a", "c", "e"], ["b", "d"]]


@given(st.lists(st.integers(0, 3), min_size=1, max_size=20), st.integers(1, 4))
def test_a_started_unit_stays_with_its_rank(owners, size):
    keys = [f"k{i}" for i in range(len(owners))]
    sticky = {k: r for k, r in zip(keys, owners, strict=True) if r % 2 == 0}
    shares = units.assign(keys, size, sticky)
    for key, rank in sticky.items():
        if rank < size:
            assert key in shares[rank]
    assert sorted(k for s in shares for k in s) == sorted(keys)


def test_assign_refuses_no_ranks():
    with pytest.raises(ValueError, match="size"):
        units.assign(["a"], 0)


# ------------------------------------------------------------------------------------- contention


def peer(rank, host="a", device="cpu", gpu=None, cores=(0, 1)):
    return ranks.Peer(rank=rank, host=host, device=device, gpu=gpu, cores=cores, hardware=f"{device}-x")


def test_ranks_on_one_host_sharing_cores_are_contended():
    assert ranks.contention([peer(0), peer(1)]) == {0: (1,), 1: (0,)}
    assert ranks.contention([peer(0, cores=None), peer(1, cores=(1,))]) == {0: (1,), 1: (0,)}


def test_ranks_with_their_own_cores_host_or_gpu_are_not_contended():
    assert ranks.contention([peer(0, cores=(0,)), peer(1, cores=(1,))]) == {0: (), 1: ()}
    assert ranks.contention([peer(0, host="a"), peer(1, host="b")]) == {0: (), 1: ()}
    cuda = [peer(0, device="cuda", gpu="0"), peer(1, device="cuda", gpu="1")]
    assert ranks.contention(cuda) == {0: (), 1: ()}


def test_ranks_on_one_gpu_are_contended():
    cuda = [peer(0, device="cuda", gpu="0"), peer(1, device="cuda", gpu="0"), peer(2, device="cuda", gpu="1")]
    assert ranks.contention(cuda) == {0: (1,), 1: (0,), 2: ()}
    metal = [peer(0, device="metal", gpu="0"), peer(1, device="metal", gpu="0")]
    assert ranks.contention(metal) == {0: (1,), 1: (0,)}


def test_world_flags_contention_in_rows_and_provenance():
    world = ranks.World(rank=1, size=2, backend="ring", peers=(peer(0), peer(1)))
    assert world.row_fields() == {"rank": 1, "hardware": "cpu-x", "contended": True}
    provenance = world.provenance()
    assert [r["contended_with"] for r in provenance["ranks"]] == [[1], [0]]
    assert "a" not in json.dumps(provenance["ranks"][0]["host"])  # host index, never the host name
    assert "ranks 0, 1 share the CPU cores of host 0" in world.contention_message()
    alone = ranks.World(rank=0, size=2, backend="ring", peers=(peer(0, host="a"), peer(1, host="b")))
    assert alone.contention_message() is None and alone.row_fields()["contended"] is False


def test_speedups_of_different_hardware_are_never_pooled():
    rows = pd.DataFrame({"pair_id": ["a", "a", "b", "c"], "hardware": ["cpu-x", "cpu-x", "metal-m2", "cpu-x"]})
    with pytest.raises(ranks.MixedHardware, match=r"2 kinds of hardware \(cpu-x: 2, metal-m2: 1 pairs\)"):
        ranks.one_hardware(rows)
    assert ranks.one_hardware(rows[rows["hardware"] == "cpu-x"]) == "cpu-x"
    assert ranks.one_hardware(rows.drop(columns="hardware")) is None
    mixed = ranks.World(0, 2, "ring", (peer(0), peer(1, device="metal", gpu="0")))
    assert mixed.hardware_message().startswith("the ranks run on 2 kinds of hardware (cpu-x: rank(s) 0; metal-x")
    assert ranks.World(0, 2, "ring", (peer(0), peer(1))).hardware_message() is None


# ----------------------------------------------------------------------------- folders and verdicts


def test_layout_lists_a_units_files_marker_last(tmp_path):
    folder = tmp_path / "shards" / "rank-1"
    shard_worker.save_unit(folder, tmp_path, "p1-s0", ranks.World(1, 2, "ring", (peer(0), peer(1))))
    (folder / "units" / "p1-s01.rows.json").write_bytes(b"")  # another unit whose name starts alike
    files = shard_worker.LAYOUT.files(tmp_path, folder, "p1-s0")
    assert files == [
        Path("shards/rank-1/units/p1-s0.extra.json"),
        Path("images/p1-s0-vanilla.txt"),
        Path("shards/rank-1/units/p1-s0.rows.json"),
    ]
    assert shard_worker.LAYOUT.saved(folder) == {"p1-s0", "p1-s01"}


def test_outcome_names_the_units_not_done_and_why():
    statuses = (
        shard.RankStatus(0, True, None, ("a",)),
        shard.RankStatus(1, False, "RuntimeError: out of memory", ()),
    )
    outcome = shard.Outcome(("a", "b", "c"), ("b", "c"), statuses, out=Path("OUT"))
    assert not outcome.complete
    message = outcome.message()
    assert message.startswith("2 of 3 pairs not done: b, c (rank 1 failed: RuntimeError: out of memory)")
    assert "rerun the same command to do only those" in message
    assert shard.Outcome(("a",), (), statuses).message() is None
    many = shard.Outcome(tuple(f"k{i}" for i in range(12)), tuple(f"k{i}" for i in range(12)), statuses[:1])
    assert "k7 and 4 more" in many.message() and "never reached rank 0" in many.message()


def _one_process_run(out: Path, **kw) -> shard.ShardedRun:
    return shard.ShardedRun(ranks.connect(hardware="cpu-test"), out, shard_worker.plan(3, 2), shard_worker.LAYOUT, **kw)


def test_one_process_writes_out_itself_and_resumes(tmp_path):
    run = _one_process_run(tmp_path)
    assert run.folder == tmp_path
    assert run.start() == shard_worker.plan(3, 2)
    for key in ["p0-s0", "p1-s1"]:
        shard_worker.save_unit(run.folder, tmp_path, key, run.world)
    outcome = run.finish(RuntimeError("stopped"))
    assert outcome.not_done == ("p0-s1", "p1-s0", "p2-s0", "p2-s1")
    assert "rank 0 failed: RuntimeError: stopped" in outcome.message()
    again = _one_process_run(tmp_path)
    assert again.start() == ["p0-s1", "p1-s0", "p2-s0", "p2-s1"]


def test_a_lost_shard_folder_is_redone_and_only_it(tmp_path):
    world = ranks.World(0, 2, "ring", (peer(0), peer(1)))
    shares = units.assign(shard_worker.plan(3, 2), 2)
    for rank, share in enumerate(shares):
        for key in share:
            shard_worker.save_unit(tmp_path / "shards" / f"rank-{rank}", tmp_path, key, world)
    assert _one_process_run(tmp_path).start() == []
    for path in sorted((tmp_path / "shards" / "rank-1").rglob("*"), reverse=True):
        path.unlink() if path.is_file() else path.rmdir()
    run = _one_process_run(tmp_path)
    assert run.start() == shares[1]
    outcome = run.finish()
    assert outcome.not_done == tuple(shares[1])
    assert all(outcome.locations[k] == tmp_path / "shards" / "rank-0" for k in shares[0])


def test_a_partial_unit_is_not_done_until_complete(tmp_path):
    run = _one_process_run(tmp_path, complete=lambda folder, key: key != "p0-s0")
    shard_worker.save_unit(tmp_path, tmp_path, "p0-s0", run.world)
    assert run.start()[0] == "p0-s0"
    assert "p0-s0" in run.finish().not_done


def test_a_launch_whose_backend_did_not_start_is_refused(monkeypatch):
    monkeypatch.setenv("MLX_RANK", "1")
    with pytest.raises(ranks.ShardError, match="rank 1.*one process"):
        ranks.connect(hardware="cpu-test")


# ------------------------------------------------------------------------------- two ring ranks


def launch(args: list[str], ranks: int = 2, timeout: float = 240) -> tuple[list[dict], str]:
    """``mlx.launch --backend ring -n RANKS`` on localhost running the worker; its reports by rank, and its output."""
    command = [
        sys.executable, "-c", "import sys; from mlx._distributed_utils.launch import main; sys.exit(main())",
        "--backend", "ring", "-n", str(ranks), "--starting-port", str(free_port_pair()),
        "--", sys.executable, *args,
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = Path(args[args.index("--out") + 1])
    for rank in range(ranks):
        shard_worker.report_path(out, rank).unlink(missing_ok=True)
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    paths = [shard_worker.report_path(out, rank) for rank in range(ranks)]
    return [json.loads(p.read_text()) for p in paths if p.exists()], done.stdout + done.stderr


def worker(*args) -> list[str]:
    return [str(ROOT / "tests" / "calib" / "run" / "shard_worker.py"), *map(str, args)]


@pytest.fixture(scope="module")
def one_process_table(tmp_path_factory):
    out = tmp_path_factory.mktemp("single")
    assert shard_worker.main(["--out", str(out)]) == 0
    return read_table(out / "table.json")


def read_table(path: Path) -> pd.DataFrame:
    return pd.DataFrame(json.loads(path.read_text())["rows"])


def _same_rows(sharded: pd.DataFrame, single: pd.DataFrame) -> None:
    pd.testing.assert_frame_equal(sharded.drop(columns=TIMING), single.drop(columns=TIMING))


def test_two_ring_ranks_merge_into_the_one_process_table(tmp_path, one_process_table):
    reports, stderr = launch(worker("--out", tmp_path))
    assert [r["rank"] for r in reports] == [0, 1], stderr
    assert all(r["size"] == 2 and r["complete"] for r in reports), stderr
    assert reports[0]["share"] and reports[1]["share"]  # both ranks used
    assert not set(reports[0]["share"]) & set(reports[1]["share"])
    table = read_table(tmp_path / "table.json")
    _same_rows(table, one_process_table)
    assert table.groupby("pair_id")["rank"].nunique().eq(1).all()  # every pair on one rank
    assert set(table["rank"]) == {0, 1} and set(one_process_table["rank"]) == {0}
    assert table["contended"].all() and not one_process_table["contended"].any()  # two ranks on 2 shared cores
    assert reports[0]["provenance"]["backend"] == "ring"


def test_a_failed_rank_names_its_pairs_and_a_rerun_does_only_those(tmp_path, one_process_table):
    reports, stderr = launch(worker("--out", tmp_path, "--fail-on", "p2-s1"))
    assert reports[1]["done"] == ["p0-s1", "p1-s1"], stderr
    assert not (tmp_path / "table.json").exists()  # no merged table from a partial run
    message = reports[0]["message"]
    assert message.startswith("1 of 6 pairs not done: p2-s1 (rank 1 failed: RuntimeError: injected failure on p2-s1)")
    assert message == reports[1]["message"]  # every rank gets rank 0's verdict
    reports, stderr = launch(worker("--out", tmp_path))
    assert reports[0]["share"] + reports[1]["share"] == ["p2-s1"], stderr
    _same_rows(read_table(tmp_path / "table.json"), one_process_table)


def test_ranks_without_a_shared_folder_send_their_pairs_to_rank_0(tmp_path, one_process_table):
    out, other_host = tmp_path / "host0", tmp_path / "host1"
    reports, stderr = launch(worker("--out", out, "--apart", other_host))
    assert all(r["complete"] for r in reports), stderr
    assert not (other_host / "table.json").exists()
    for key in reports[1]["share"]:
        for path in shard_worker.LAYOUT.files(other_host, other_host / "shards" / "rank-1", key):
            assert (out / path).read_bytes() == (other_host / path).read_bytes()
    _same_rows(read_table(out / "table.json"), one_process_table)


def test_a_crashed_rank_stops_the_others_who_name_what_is_not_done(tmp_path):
    # 3 s a pair: rank 0 is still at work when mlx.launch stops it, also on a loaded machine (at 1 s it reached the
    # closing barrier first there, and the ring's error replaced the stop)
    reports, output = launch(worker("--out", tmp_path, "--crash-on", "p1-s1", "--unit-s", "3"))
    assert [r["rank"] for r in reports] == [0], output  # rank 1 died without a word, after saving p0-s1
    saved = ["p0-s1", *reports[0]["done"]]
    not_done = [k for k in shard_worker.plan(3, 2) if k not in saved]
    assert reports[0]["stopped"] == (
        f"stopped (mlx.launch stops every rank when one fails): {len(saved)} of 6 pairs are saved on this host; "
        f"not done: {', '.join(not_done)}; rerun the same command to do only those"
    )
    assert "Node with rank 0 exited with code 143" in output
