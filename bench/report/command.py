"""``teacache-bench report RUNS --out DIR``: distribution tables, speed/quality plots and report.md.

A report is derived: a pure function of the sweep folder (runs.parquet, decisions.parquet,
provenance.json), so DIR can be deleted and rebuilt at any time. Reading and validating the folder
(``bench.report.input``), computing what it says (``bench.report.compute``) and drawing and formatting it
(``bench.report.render``) happen in memory; this module writes the files, atomically and only once all of
them succeeded, so bad input leaves no file behind.
"""

from __future__ import annotations

import sys
from pathlib import Path

from rich.console import Console
from rich.table import Table

from bench.report import baselines as report_baselines
from bench.report import plots, stats
from bench.report.compute import DEFAULT_FLOOR, DEFAULT_METRIC, analyse, validate_floor, validate_target
from bench.report.files import PROG, WRITES
from bench.report.input import DECISION_COLUMNS, RUN_COLUMNS, ReportInputError, Sweep, load_sweep, validate_runs
from bench.report.markdown import num, ratio
from bench.report.render import OUTPUTS, render_files
from bench.sweep.schedules import same_schedule_warnings
from calib.run.arguments import CommandParser, path_argument
from calib.run.command import command
from teacache.io import atomic_path, write_text

__all__ = [
    "DECISION_COLUMNS",
    "DEFAULT_FLOOR",
    "DEFAULT_METRIC",
    "OUTPUTS",
    "RUN_COLUMNS",
    "ReportInputError",
    "Sweep",
    "build_report",
    "load_sweep",
    "main",
    "plots",
    "print_summary",
    "print_warnings",
    "render",
    "validate_runs",
]


def render(
    sweep: Sweep, floor: float = DEFAULT_FLOOR, metric: str = DEFAULT_METRIC, target_speedup: float | None = None
) -> tuple[dict[str, bytes], dict]:
    """Every output file (name -> bytes) and the summary, computed in memory without writing anything."""
    # the threshold tables read one rescale function's TeaCache runs; the baselines section reads every row
    analysis = analyse(report_baselines.for_threshold_tables(sweep), floor, metric, target_speedup)
    return render_files(analysis, report_baselines.section(sweep.runs, sweep.provenance))


def build_report(
    runs_dir: str | Path,
    out_dir: str | Path,
    ssim_floor: float = DEFAULT_FLOOR,
    metric: str = DEFAULT_METRIC,
    target_speedup: float | None = None,
) -> dict:
    """Read a sweep folder, write the report into ``out_dir`` and return its summary.

    ``ssim_floor`` is the floor for ``metric`` (SSIM by default). Raises ReportInputError on bad input,
    before anything is written. The summary's ``warnings``: thresholds that gave one schedule, and why.
    """
    validate_floor(ssim_floor, metric)
    validate_target(target_speedup)
    sweep = load_sweep(runs_dir)
    files, summary = render(sweep, ssim_floor, metric, target_speedup)
    tables = report_baselines.for_threshold_tables(sweep)
    warnings = same_schedule_warnings(tables.runs, tables.decisions, tables.provenance)
    out_dir = Path(out_dir)
    for name, data in files.items():
        if name == "report.md":
            continue
        with atomic_path(out_dir / name) as tmp:
            tmp.write_bytes(data)
    write_text(out_dir / "report.md", files["report.md"].decode("utf-8"))  # last: its links then resolve
    for name in OUTPUTS - set(files):  # a rebuild that omits a plot must not leave the old one behind
        (out_dir / name).unlink(missing_ok=True)
    return {**summary, "out_dir": str(out_dir), "report": str(out_dir / "report.md"), "warnings": warnings}


# ---------------------------------------------------------------------------------------------- CLI


def print_summary(summary: dict, console=None) -> None:
    """One screen: the per-threshold medians, the recommendation and where report.md is."""
    console = console or Console()
    table = Table(title=f"TeaCache sweep: {summary['variant']} ({summary['model']}) on {summary['device_name']}")
    for name in ("threshold", "n", "skipped", "speedup [95% CI]", "ideal", "SSIM p5", "cosine p5"):
        table.add_column(name, justify="right")
    rec = summary["recommended_threshold"]
    for row in summary["thresholds"]:
        style = "bold green" if rec is not None and row["threshold"] == rec else None
        table.add_row(
            f"{row['threshold']:g}",
            str(row["n"]),
            num(row["skipped"]),
            f"{ratio(row['speedup'])} [{num(row['ci_low'], 2, 'f')}, {num(row['ci_high'], 2, 'f')}]",
            ratio(row["ideal"]),
            num(row["ssim_p5"], 4, "f"),
            num(row["cosine_p5"], 6, "f"),
            style=style,
        )
    console.print(table)
    if rec is None:
        console.print(f"Recommended threshold: [bold red]none[/] ({summary['reason']})")
    else:
        console.print(f"Recommended threshold: [bold green]{rec:g}[/] ({summary['reason']})")
    target = summary.get("target_speedup")
    if target is not None:
        if target["threshold"] is None:
            console.print(f"Threshold for {target['speedup']:g}x: [bold red]none[/] ({target['reason']})")
        else:
            console.print(
                f"Threshold for {target['speedup']:g}x: [bold]{target['threshold']:g}[/] (median skipped "
                f"{target['skipped']:g} of {target['num_steps']}, measured {ratio(target['measured_speedup'])})"
            )
    console.print(f"Report: {summary['report']}")


def print_warnings(summary: dict, prog: str = PROG) -> None:
    """The sweep's thresholds that gave one schedule (bench.sweep.schedules), on stderr."""
    for warning in summary.get("warnings", []):
        print(f"{prog}: warning: {warning}", file=sys.stderr)


def setup_arg_parser() -> CommandParser:
    parser = CommandParser(
        prog=PROG,
        description="Distribution tables, speed/quality plots and report.md from a sweep folder.",
    )
    parser.add_argument(
        "runs", metavar="RUNS", help="sweep folder with runs.parquet, decisions.parquet, provenance.json"
    )
    parser.add_argument(
        "--out",
        required=True,
        type=path_argument,
        metavar="DIR",
        help="folder for report.md, distribution.csv and plots",
    )
    parser.add_argument(
        "--ssim-floor",
        "--floor",
        dest="floor",
        type=float,
        default=DEFAULT_FLOOR,
        help=f"floor on p5 of the quality metric for the recommended threshold (default {DEFAULT_FLOOR})",
    )
    parser.add_argument(
        "--metric",
        choices=stats.QUALITY_METRICS,
        default=DEFAULT_METRIC,
        help=f"quality metric the floor applies to (default {DEFAULT_METRIC})",
    )
    parser.add_argument(
        "--target-speedup",
        type=float,
        metavar="S",
        help="also name the swept threshold whose median computed steps lie nearest N/S (as teacache-generate "
        "--teacache-speedup resolves one)",
    )
    return parser


@command(PROG)
def main(argv: list[str] | None = None) -> int:
    args, _ = setup_arg_parser().parse_checked(argv, WRITES)
    summary = build_report(
        args.runs, args.out, ssim_floor=args.floor, metric=args.metric, target_speedup=args.target_speedup
    )
    print_summary(summary)
    print_warnings(summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
