"""A tiny sharded command for the tests of calib.run.shard: deterministic rows per unit, no model.

Run as ``python tests/calib/run/shard_worker.py --out DIR`` (one process) or under ``mlx.launch``; each rank writes
its report to ``DIR.rank-<r>.json`` (not stdout: mlx.launch drops what a rank prints once it stops it) and
rank 0 writes ``DIR/table.json`` when every unit is done.
JSON rather than Parquet: a rank that imports no pandas starts in half a second.
``--fail-on KEY`` makes the rank that gets KEY raise there, ``--crash-on KEY`` makes it die at once (as a
killed process does) while the other ranks take ``--unit-s`` per unit; ``--apart DIR2`` gives ranks above 0
their own output folder, as on hosts without a shared folder.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time
from pathlib import Path

from calib.run import ranks, shard, units
from teacache.io import write_json, write_text

LAYOUT = units.UnitLayout("units", ".rows.json", noun="pairs", shared=("images/{key}-*.txt",))
ARMS = ("vanilla", "t0.1", "t0.2")


def plan(prompts: int, seeds: int) -> list[str]:
    return [f"p{p}-s{s}" for p in range(prompts) for s in range(seeds)]


def unit_rows(key: str, world: ranks.World) -> list[dict]:
    rows = []
    for arm in ARMS:
        value = int(hashlib.sha256(f"{key}/{arm}".encode()).hexdigest()[:8], 16) / 2**32
        rows.append({"pair_id": key, "arm": arm, "value": value, "wall_s": time.perf_counter(), **world.row_fields()})
    return rows


def save_unit(folder: Path, out: Path, key: str, world: ranks.World) -> None:
    parts = folder / LAYOUT.subdir
    write_json(parts / f"{key}.extra.json", {"pair_id": key, "n": len(ARMS)})
    write_text(out / "images" / f"{key}-vanilla.txt", f"image of {key}\n")
    write_json(parts / f"{key}{LAYOUT.marker}", {"rows": unit_rows(key, world)})  # last: marks it saved


def report_path(out: Path, rank: int) -> Path:
    return out.with_name(f"{out.name}.rank-{rank}.json")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--prompts", type=int, default=3)
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--fail-on", default=None)
    parser.add_argument("--crash-on", default=None)
    parser.add_argument("--unit-s", type=float, default=0.0)
    parser.add_argument("--apart", type=Path, default=None)
    args = parser.parse_args(argv)
    world = ranks.connect()
    out = args.apart if args.apart is not None and world.rank > 0 else args.out
    run = shard.ShardedRun(world, out, plan(args.prompts, args.seeds), LAYOUT, settings={"arms": ARMS})
    share = run.start()
    done = []
    error = None
    try:
        for key in share:
            if key == args.fail_on:
                raise RuntimeError(f"injected failure on {key}")
            if key == args.crash_on:
                os._exit(9)
            time.sleep(args.unit_s)
            save_unit(run.folder, out, key, world)
            done.append(key)
    except Exception as exc:  # noqa: BLE001 - reported at the barrier
        error = exc
    except shard.Stopped:
        stopped = {"rank": world.rank, "done": done, "stopped": run.stopped_message()}
        write_json(report_path(args.out, world.rank), stopped)
        return 143
    outcome = run.finish(error)
    try:
        if outcome.complete and world.rank == 0:
            paths = [outcome.locations[k] / LAYOUT.subdir / f"{k}{LAYOUT.marker}" for k in run.plan]
            write_json(out / "table.json", {"rows": [r for p in paths for r in json.loads(p.read_text())["rows"]]})
    finally:
        run.close()
    report = {
        "rank": world.rank,
        "size": world.size,
        "share": share,
        "done": done,
        "complete": outcome.complete,
        "message": outcome.message(),
        "contended": world.contended,
        "provenance": world.provenance(),
    }
    write_json(report_path(args.out, world.rank), report)
    if outcome.message() and world.rank == 0:
        print(f"shard_worker: {outcome.message()}", file=sys.stderr)
    return 1 if (error is not None or (world.rank == 0 and not outcome.complete)) else 0


if __name__ == "__main__":
    sys.exit(main())
