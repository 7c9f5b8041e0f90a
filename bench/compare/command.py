"""``teacache-bench compare-hardware``: two hardware's campaigns side by side.

A and B are hardware folders (``results/<hardware>/``, holding ``<variant>/<mflux-version>/``
campaigns), variant folders or campaign folders (``teacache-bench campaign`` output: ``fit/``,
``sweep/``). For every variant present in both it compares the fitted rescale
functions and their cross-validated R^2 (and how each fit scores on the other hardware's traces),
the skip schedules at the thresholds both swept, the quality distributions, the per-step time and the
speedups against the ideal bound N/(N-k), and the generated tolerance constants (a campaign's own
``tolerances.py``, else ``tests/tolerances/<hardware>.py``): which differ and by how much. Writes
``compare.md``, ``compare.json`` and ``speedup_vs_threshold.png`` into ``--out`` (default
``results/comparisons/<A>-vs-<B>/``), each atomically and only when every input reads.

Jobs: ``bench.compare.input`` finds and reads the campaigns, ``bench.compare.compute`` computes the
comparison, ``bench.compare.render`` draws and formats it; this module is the command that writes it.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from bench.compare.compute import KIND, build, jsonable
from bench.compare.input import PROJECT_ROOT, CompareError
from bench.compare.render import render_markdown, render_plot
from bench.report.compute import validate_floor
from calib.run.arguments import CommandParser, Writes, check_out_dir, path_argument
from calib.run.command import command
from teacache.errors import InputError
from teacache.io import atomic_path, write_json, write_text
from teacache.provenance import collect

__all__ = ["KIND", "PLOT", "CompareError", "build", "default_out", "main", "render_markdown", "render_plot"]

PLOT = "speedup_vs_threshold.png"
# Its files, in a folder of its own; its default, results/comparisons/, is what it exists to regenerate.
WRITES = Writes(KIND, names=("compare.md", "compare.json", PLOT), regenerates=("results/comparisons",))


def default_out(result: dict) -> Path:
    """results/comparisons/<A>-vs-<B>/ under the project."""
    return PROJECT_ROOT / "results" / "comparisons" / f"{result['a']['label']}-vs-{result['b']['label']}"


# ---------------------------------------------------------------------------------------------- CLI


def setup_arg_parser() -> argparse.ArgumentParser:
    parser = CommandParser(prog=KIND, description=__doc__.split("\n\n")[0])
    parser.add_argument("a", type=Path, metavar="A", help="hardware folder (results/<hardware>) or campaign folder")
    parser.add_argument("b", type=Path, metavar="B", help="the other hardware or campaign folder")
    parser.add_argument("--out", type=path_argument, default=None, help="default: results/comparisons/<A>-vs-<B>/")
    parser.add_argument("--ssim-floor", type=float, default=0.95, help="floor for the recommended threshold")
    parser.add_argument("--no-plot", action="store_true")
    return parser


@command(KIND)
def main(argv: list[str] | None = None) -> int:
    args = setup_arg_parser().parse_args(argv)
    if args.out is not None:
        check_out_dir(args.out, writes=WRITES)
    validate_floor(args.ssim_floor)
    if Path(args.a).resolve() == Path(args.b).resolve():
        raise InputError(f"B: {args.b} is A itself; compare two machines' folders (results/<hardware>)")
    result = build(args.a, args.b, args.ssim_floor)
    out = args.out if args.out is not None else check_out_dir(default_out(result), writes=WRITES)
    text = render_markdown(result)
    png = None if args.no_plot else render_plot(result)
    data = jsonable(result)
    data["files"] = ["compare.md", "compare.json"] + ([PLOT] if png else [])

    data["provenance"] = collect([KIND, *(argv if argv is not None else sys.argv[1:])])
    if png:
        with atomic_path(out / PLOT) as tmp:
            tmp.write_bytes(png)
    write_json(out / "compare.json", data)
    write_text(out / "compare.md", text)
    for variant, v in result["variants"].items():
        s = v.get("speed")
        if s:
            print(f"{variant}: {s['per_step_ms_a']:.3g} ms/step ({result['a']['label']}) vs "
                  f"{s['per_step_ms_b']:.3g} ms/step ({result['b']['label']})")  # fmt: skip
    print(f"wrote {out / 'compare.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
