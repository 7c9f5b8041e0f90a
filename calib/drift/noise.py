"""The noise floor: how far the numbers of one release lie from themselves, over differently ordered processes.

Each process runs every (variant, dtype) of :mod:`calib.drift.numbers` in another order (rotated, reversed)
and with another OpenBLAS thread count (1 or 2: another summation order in float32 matmuls); the floor of a
(dtype, metric) is the largest distance between any two processes over every family. ``moved`` means more
than ``FLOOR_FACTOR`` times that floor, and more than the dtype's resolution (``MIN_MOVE``), so a move is
never byte inequality alone. Writes ``data/references/<hardware>/noise_floor.json`` with its provenance:
``teacache-calib drift-noise [--processes 4] [--out FILE]``.
"""

from __future__ import annotations

import argparse
import itertools
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from calib.drift import numbers
from calib.run.arguments import CommandParser
from teacache.errors import InputError

REFERENCES = Path(__file__).with_name("data") / "references"
FLOOR_FORMAT = 1
FLOOR_FACTOR = 10.0
# A quarter of the dtype's epsilon: about the relative L2 error of rounding a latent once more to the dtype
# (tests/test_drift_numbers.py measures it). Smaller distances are not a move, whatever the floor says.
MIN_MOVE = {"float32": 2.0**-25, "bfloat16": 2.0**-9}


def process_env(index: int) -> dict[str, str]:
    return {"OPENBLAS_NUM_THREADS": str(1 + index % 2), "TQDM_DISABLE": "1"}


def run_processes(count: int, fullsize: bool = False) -> list[dict]:
    """The numbers from ``count`` fresh processes, each in its own order and thread count."""
    from teacache.io import read_json_object

    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for index in range(count):
            out = Path(tmp) / f"{index}.json"
            cmd = [sys.executable, "-m", "calib.cli", "drift-numbers", "--out", str(out), "--order", str(index)]
            if fullsize:
                cmd.append("--fullsize")
            subprocess.run(cmd, check=True, env={**os.environ, **process_env(index)})
            results.append(read_json_object(out))
    return results


def floor_from(results: list[dict]) -> dict:
    """{dtype: {metric: largest distance between two processes}} and the same per run."""
    per_run: dict[str, dict[str, float]] = {}
    for a, b in itertools.combinations(results, 2):
        for key, run in a["runs"].items():
            other = b["runs"].get(key)
            if not numbers.comparable(run, other):  # a run that failed measures no noise
                continue
            measured = numbers.distances(run, other)
            slot = per_run.setdefault(key, dict.fromkeys(numbers.METRICS, 0.0))
            for metric, value in measured.items():
                slot[metric] = max(slot[metric], value)
    floor: dict[str, dict[str, float]] = {}
    for key, measured in per_run.items():
        dtype = key.split("/")[1]
        slot = floor.setdefault(dtype, dict.fromkeys(numbers.METRICS, 0.0))
        for metric, value in measured.items():
            slot[metric] = max(slot[metric], value)
    return {"floor": floor, "per_run": per_run}


def threshold(floor: dict, dtype: str, metric: str) -> float:
    """The distance above which a (dtype, metric) counts as moved."""
    return max(FLOOR_FACTOR * floor["floor"][dtype][metric], MIN_MOVE[dtype])


def floor_path(slug: str) -> Path:
    return REFERENCES / slug / "noise_floor.json"


def load_floor(path: Path) -> dict:
    from teacache.io import read_json_object

    data = read_json_object(path)
    if data.get("format_version") != FLOOR_FORMAT:
        raise InputError(f"{path}: format_version {data.get('format_version')}, expected {FLOOR_FORMAT}")
    return data


def measure(count: int, fullsize: bool = False) -> dict:
    from teacache.provenance import collect

    results = run_processes(count, fullsize)
    return {
        "format_version": FLOOR_FORMAT,
        **floor_from(results),
        "settings": results[0]["settings"] | {"order": None},
        "processes": [
            {"order": index, "env": process_env(index), "seconds": sum(r["seconds"] for r in res["runs"].values())}
            for index, res in enumerate(results)
        ],
        "provenance": collect(argv=["teacache-calib", "drift-noise", "--processes", str(count)]),
    }


def setup_arg_parser() -> argparse.ArgumentParser:
    parser = CommandParser(prog="teacache-calib drift-noise", description=__doc__.split("\n\n")[0])
    parser.add_argument("--processes", type=int, default=4)
    parser.add_argument("--out", type=Path, help="default: calib/drift/data/references/<hardware>/noise_floor.json")
    parser.add_argument("--fullsize", action="store_true")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = setup_arg_parser().parse_args(argv)
    if args.processes < 2:
        raise InputError("--processes: expected at least 2 (the floor is a distance between processes)")
    from teacache.io import write_json
    from teacache.provenance import hardware_slug

    out = args.out or floor_path(hardware_slug())
    floor = measure(args.processes, args.fullsize)
    write_json(out, floor)
    print(f"wrote {out}: {floor['floor']}")
    return 0
