"""Two numbers files of the drift (two releases on one machine), judged by a floor measured there.

``teacache-calib drift-compare BEFORE.json AFTER.json --repeat AFTER2.json [--out FILE.md]``: the floor is
the distance between AFTER and AFTER2 (the same release in two processes, in different orders); each
(variant, dtype) of AFTER is compared with BEFORE against it, as the drift command does. Prints a Markdown
table (and writes it to ``--out``). The full-size H200 run (``h200.sh`` in the release report's folder)
writes such files.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from calib.drift import noise
from calib.drift.against import compare_numbers, load_numbers
from calib.run.arguments import CommandParser
from calib.run.command import command


def table(before: dict, after: dict, floor: dict) -> str:
    result = compare_numbers(after, before, floor)
    versions = (before["provenance"]["versions"], after["provenance"]["versions"])
    lines = [
        f"mflux {versions[0]['mflux']} -> {versions[1]['mflux']} (MLX {versions[1]['mlx']}, "
        f"{after['provenance'].get('hardware', '?')}); {after['settings']['width']}x{after['settings']['height']}, "
        f"{after['settings']['steps']} steps"
        + (f", blocks={after['settings']['blocks']} (NOT full size)" if after["settings"].get("blocks") else "")
        + "; floor "
        + ", ".join(f"{d} {max(v.values()):.2g}" for d, v in floor["floor"].items()),
        "",
        "| model | dtype | verdict | vanilla rel-L2 | recorded rel-L2 | trace rel | threshold (vanilla) |",
        "|---|---|---|---|---|---|---|",
    ]
    for key, run in sorted(result.items()):
        m = run["metrics"]
        verdict = "bit-identical" if run["identical"] else ("**moved**" if run["moved"] else "unchanged")
        lines.append(
            f"| {after['runs'][key]['model']} | {run['dtype']} | {verdict} | {m['vanilla']['distance']:.3g} | "
            f"{m['recorded']['distance']:.3g} | {m['trace']['distance']:.3g} | {m['vanilla']['threshold']:.3g} |"
        )
    errors = [f"{k}: {r['error']}" for f in (before, after) for k, r in f["runs"].items() if "error" in r]
    return "\n".join(lines + [f"- error: {e}" for e in errors]) + "\n"


def setup_arg_parser() -> argparse.ArgumentParser:
    parser = CommandParser(prog="teacache-calib drift-compare", description=__doc__.split("\n\n")[0])
    parser.add_argument("before", type=Path)
    parser.add_argument("after", type=Path)
    parser.add_argument("--repeat", type=Path, required=True, help="AFTER's release again, another process")
    parser.add_argument("--out", type=Path)
    return parser


@command("teacache-calib drift-compare")
def main(argv: list[str] | None = None) -> int:
    args = setup_arg_parser().parse_args(argv)
    from teacache.io import write_text

    before, after, repeat = (load_numbers(p) for p in (args.before, args.after, args.repeat))
    text = table(before, after, noise.floor_from([after, repeat]))
    print(text)
    if args.out:
        write_text(args.out, text)
    return 0
