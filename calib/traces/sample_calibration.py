"""Write a sample mlx-teacache calibration file from this project's own traces and fit.

``python -m calib.traces.sample_calibration TRACES --out samples/_calibration_tiny_shapes.json`` takes the
cond rows of one seed of a recording, fits the classic TeaCache tuple (a free degree-4 polynomial) with
``calib.fit.fit`` (what ``teacache-calib fit`` runs), and writes both in the layout of mlx-teacache's
``_calibration_<variant>.json`` through the one writer of that format (``calib.traces.mlx_teacache_format``,
which ``teacache-calib emit --format mlx-teacache`` uses; ``calib.traces.mlx_teacache`` reads it back):
docs/refit-and-drift.md's "another tool" journey then runs on a file that ships, made from measurements of
this project, not copied from another tool's data. Also writes the same pairs as a plain table (``--table``,
a CSV with prompt_id, step, x_rel_l1, y_rel_l1).
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

from calib.run.arguments import CommandParser, Writes, check_input_file, check_out_file, path_argument
from calib.run.command import command
from calib.traces import mlx_teacache_format as fmt
from teacache.errors import InputError
from teacache.io import write_json, write_text

PROG = "python -m calib.traces.sample_calibration"
# Two files, each new or replaced with --force; the samples/ that ship are what it exists to regenerate.
WRITES = Writes(PROG, regenerates=("samples",))


def setup_arg_parser() -> argparse.ArgumentParser:
    parser = CommandParser(prog=PROG, description=__doc__.split("\n\n")[0])
    parser.add_argument("traces", type=path_argument, metavar="TRACES", help="traces.parquet of teacache-calib record")
    parser.add_argument("--out", type=path_argument, required=True, help="the _calibration_<variant>.json to write")
    parser.add_argument("--table", type=path_argument, default=None, help="also write the pairs as this CSV")
    parser.add_argument("--prompts", type=int, default=8, help="the first N prompts of the recording")
    parser.add_argument("--seed", type=int, default=0, help="the recording's seed to take")
    parser.add_argument("--force", action="store_true", help="replace --out and --table if they exist")
    return parser


def calibration(traces: Path, n_prompts: int, seed: int) -> tuple[dict, object]:
    """(the calibration file's object, the pairs as a table)."""
    # heavy (pandas, the fit): loaded after the arguments are checked
    import pandas as pd

    from calib.fit import FitOptions, fit

    try:
        frame = pd.read_parquet(traces)
    except Exception as exc:  # noqa: BLE001 - pyarrow raises many types for a damaged file
        raise InputError(f"TRACES: cannot read {traces} as parquet ({type(exc).__name__}: {exc})") from exc
    frame = frame[(frame["branch"] == "cond") & (frame["seed"] == seed) & (frame["step"] > 0)]
    prompt_ids = list(dict.fromkeys(frame["prompt_id"]))[:n_prompts]
    if len(prompt_ids) < n_prompts:
        raise InputError(f"--prompts: {traces} holds {len(prompt_ids)} prompts of seed {seed}, not {n_prompts}")
    frame = frame[frame["prompt_id"].isin(prompt_ids)].sort_values(["prompt_id", "step"], kind="stable")
    frame = frame.set_index("prompt_id").loc[prompt_ids].reset_index()
    variant = str(frame["variant"].iloc[0])
    with tempfile.TemporaryDirectory() as tmp:
        subset = Path(tmp) / "traces" / "traces.parquet"
        subset.parent.mkdir()
        frame.to_parquet(subset, index=False)
        if (traces.parent / "provenance.json").is_file():  # the recording's settings: size, guidance
            shutil.copyfile(traces.parent / "provenance.json", subset.parent / "provenance.json")
        fitted = fit(subset, FitOptions(form="poly", degree=4, mode="free", no_plots=True))
        data, _note = fmt.calibration_object(fitted, [str(subset)], variant)
    for field in ("fit_date_utc", "fit_git_commit"):  # a sample is the same bytes whenever it is rebuilt
        data.pop(field, None)
    data["generated_by"] = PROG
    data["note"] = (
        f"written by {PROG} from this project's {variant} traces (seed {seed}, cond branch) and its free degree-4 "
        "fit of them; the layout of mlx-teacache's _calibration_<variant>.json"
    )
    return data, frame[["prompt_id", "step", "x_rel_l1", "y_rel_l1"]]


@command(PROG)
def main(argv: list[str] | None = None) -> int:
    args = setup_arg_parser().parse_args(argv)
    check_input_file(args.traces, "TRACES")
    check_out_file(args.out, what="calibration .json", writes=WRITES, force=args.force)
    if args.table is not None:
        check_out_file(args.table, "--table", what="CSV file", writes=WRITES, force=args.force)
    data, table = calibration(args.traces, args.prompts, args.seed)
    write_json(args.out, data)
    print(f"wrote {args.out} ({data['num_pairs']} pairs, {data['num_prompts']} prompts)")
    if args.table is not None:
        write_text(args.table, table.to_csv(index=False))
        print(f"wrote {args.table}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
