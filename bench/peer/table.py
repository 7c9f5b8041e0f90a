"""``teacache-bench peer-table``: ours and mlx-teacache side by side, from ``teacache-bench fullsize --peer`` output.

One markdown row per model and setting: with every step computed (our proxy against its wrapper: the
speedup over vanilla of the same repeat, median [min, max], and whether the final latents equal vanilla's,
else their max-abs difference), then each threshold (skipped steps, speedup, and its ratio to the ideal
N / (N - skipped)). A model it could not run says why. Derived only from OUT/summary.csv.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

from bench.sweep.records import RecordError
from bench.timing.fullsize_records import SUMMARY, read_table
from calib.run.command import command
from teacache.errors import InputError

OURS_ALL, THEIRS_ALL, OURS, THEIRS = "proxy-all", "mlx-teacache-all", "gate", "mlx-teacache"
HEADER = [
    "| model | steps | guidance | vanilla ms/step | setting | ours: skipped, speedup | mlx-teacache: skipped, "
    "speedup | exact vs vanilla (ours / mlx-teacache) |",
    "|---|---|---|---|---|---|---|---|",
]


def _speed(row) -> str:
    if row is None or pd.isna(row.get("speedup")):
        return "-"
    spread = f" [{row['speedup_min']:.3f}, {row['speedup_max']:.3f}]" if row["repeats"] > 1 else ""
    ideal = f" ({row['ratio_to_ideal']:.2f} of ideal)" if row["skipped"] else ""
    return f"{row['speedup']:.3f}x{spread}{ideal}"


def _exact(row) -> str:
    if row is None or pd.isna(row.get("max_abs_diff")):
        return "-"
    if row.get("noop_exact") is True or str(row.get("noop_exact")) == "True":
        return "bit-exact"
    return f"max-abs {row['max_abs_diff']:.3g}"


def _skipped(row, predicted: bool = False) -> str:
    if row is None or pd.isna(row.get("skipped")):
        return "-"
    text = f"{int(row['skipped'])}"
    if predicted and not pd.isna(row.get("predicted_skipped")) and row["predicted_skipped"] != row["skipped"]:
        text += f" (replay {int(row['predicted_skipped'])})"
    return text


def side_by_side(summary: pd.DataFrame) -> list[str]:
    """The markdown table's lines (and a note line per model mlx-teacache could not run)."""
    lines, notes = list(HEADER), []
    for _, rows in summary.groupby(["model", "quantize", "resolution", "steps", "tag"], dropna=False, sort=False):
        by_arm = {arm: group.to_dict("records") for arm, group in rows.groupby("arm", sort=False)}
        if THEIRS_ALL not in by_arm and THEIRS not in by_arm:
            continue  # not a --peer run
        first = rows.iloc[0]
        head = (f"| {first['model']} | {first['steps']} | {first['guidance']:g} | "
                f"{first['vanilla_ms_per_step']:.0f} |")  # fmt: skip
        for row in by_arm.get(THEIRS, []):
            if isinstance(row.get("note"), str) and row["note"]:
                at = "" if pd.isna(row.get("threshold")) else f" at {row['threshold']:g}"
                notes.append(f"- {first['model']}: mlx-teacache not run{at}: {row['note']}")
        ours_all = (by_arm.get(OURS_ALL) or [None])[0]
        theirs_all = (by_arm.get(THEIRS_ALL) or [None])[0]
        lines.append(f"{head} every step computed | {_speed(ours_all)} | {_speed(theirs_all)} | "
                     f"{_exact(ours_all)} / {_exact(theirs_all)} |")  # fmt: skip
        theirs_at = {r["threshold"]: r for r in by_arm.get(THEIRS, []) if not pd.isna(r.get("speedup"))}
        for ours in by_arm.get(OURS, []):
            theirs = theirs_at.get(ours["threshold"])
            lines.append(
                f"{head} threshold {ours['threshold']:g} | {_skipped(ours)}, {_speed(ours)} | "
                f"{_skipped(theirs, predicted=True)}, {_speed(theirs)} | - |"
            )
    if len(lines) == len(HEADER):
        raise InputError("SUMMARY: no rows of a teacache-bench fullsize --peer run")
    return lines + ([""] + notes if notes else [])


def read_summary(path: Path) -> pd.DataFrame:
    """A fullsize run's summary.csv, through its one reader (bench.timing.fullsize_records): a missing file, one
    that is not CSV or one without its columns is refused in one line naming the file and the column."""
    try:
        return read_table(path, SUMMARY)
    except RecordError as exc:
        raise InputError(f"SUMMARY: {exc}") from None


def setup_arg_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="teacache-bench peer-table", description=__doc__.split("\n\n")[0])
    parser.add_argument("summary", type=Path, help="OUT/summary.csv of teacache-bench fullsize --peer (or OUT)")
    return parser


@command("teacache-bench peer-table")
def main(argv: list[str] | None = None) -> int:
    args = setup_arg_parser().parse_args(argv)
    path = args.summary / "summary.csv" if args.summary.is_dir() else args.summary
    lines = side_by_side(read_summary(path))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
