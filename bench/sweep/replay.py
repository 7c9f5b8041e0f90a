"""``teacache-bench replay``: the skip schedule recorded traces predict, for any thresholds, in milliseconds.

All thresholds and runs are replayed at once over each run's recorded x, placed by its step column
(:mod:`teacache.gate_batch`, proven decision for decision identical to the gate class, which stays the
rule's one definition). A recorded trace always advances the anchor, so the prediction assumes that
skipping does not change later signals; ``teacache-bench sweep`` reports predicted against actual. Traces
are read and checked by :mod:`calib.traces.reader`, like every other command.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

from bench.common import parse_thresholds
from bench.peer import gate as peer_gate
from calib.fit.coefficient_sources import parse_x_range, resolve_coefficients
from calib.run.arguments import CommandParser, Writes, check_at_least, check_out_file, check_variant_name, path_argument
from calib.run.command import command
from calib.traces.checks import NUM_STEPS_INFERRED
from calib.traces.reader import REPLAY_COLUMNS, load_traces
from calib.traces.runs import NUM_STEPS_TABLE, RunTrace, Traces
from teacache import variants
from teacache.errors import InputError
from teacache.gate import DEFAULT_MAX_CONSECUTIVE_SKIPS, DEFAULT_SKIP_FIRST, DEFAULT_SKIP_LAST, GateConfig
from teacache.gate_batch import longest_streaks, replay_skip_masks, skipped_counts
from teacache.io import write_json, write_text
from teacache.provenance import collect, installed_version

SCHEDULE_COLUMNS = [
    "run_id", "prompt_id", "seed", "threshold", "num_steps", "predicted_skipped", "longest_streak",
    "predicted_skipped_steps",
]  # fmt: skip
PROG = "teacache-bench replay"
WRITES = Writes(PROG)  # one CSV and the files beside it: each new, or replaced with --force (teacache.outputs)
PEER_SUFFIXES = (".mlx-teacache.csv", ".mlx-teacache-steps.csv")


def setup_arg_parser() -> argparse.ArgumentParser:
    parser = CommandParser(prog=PROG, description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "traces",
        nargs="+",
        help="trace tables (.parquet, .csv, .json, .jsonl, mlx-teacache _calibration_<variant>.json[#SIGNAL])",
    )
    parser.add_argument("--thresholds", required=True, help="comma-separated, e.g. 0,0.1,0.2")
    parser.add_argument(
        "--coefficients",
        default="packaged",
        help="packaged, a fit.json, an mlx-teacache calibration .json, a .py module, or c4,...,c0",
    )
    parser.add_argument("--x-range", metavar="LO,HI", help="calibrated x range of --coefficients numbers")
    parser.add_argument("--variant", default=None, help="default: the traces' variant column or provenance")
    parser.add_argument("--branch", default=None, help="rows of this branch when there is a branch column (cond)")
    parser.add_argument("--num-steps", type=int, default=None, help="when the tables have no num_steps column")
    first_help = f"default: the variant's, else {DEFAULT_SKIP_FIRST}"
    parser.add_argument("--skip-first", type=int, default=None, help=first_help)
    parser.add_argument("--skip-last", type=int, default=None, help=f"default: {DEFAULT_SKIP_LAST}")
    parser.add_argument("--max-consecutive-skips", type=int, default=DEFAULT_MAX_CONSECUTIVE_SKIPS)
    parser.add_argument(
        "--gate",
        choices=("teacache", "mlx-teacache"),
        default="teacache",
        help="mlx-teacache: also replay mlx-teacache's gate (from the installed package) with the same coefficients, "
        "threshold and, when --skip-first/--skip-last are given, window (else its defaults 1/1); print and, with "
        "--out, write where and why the two decide differently (OUT.mlx-teacache.csv, OUT.mlx-teacache-steps.csv)",
    )
    parser.add_argument(
        "--out", type=path_argument, default=None, help="write the schedules as CSV (and provenance beside)"
    )
    parser.add_argument("--force", action="store_true", help="replace --out and the files beside it if they exist")
    return parser


def output_paths(out: Path, peer: bool) -> list[Path]:
    """--out and the files written beside it: the provenance and, with --gate mlx-teacache, the two comparisons."""
    paths = [out, out.with_name(f"{out.stem}.provenance.json")]
    return paths + ([out.with_name(out.stem + suffix) for suffix in PEER_SUFFIXES] if peer else [])


def num_steps_origin(source: str) -> str:
    """Where the schedules' lengths came from, in words: "table", "inferred", the argument, or several by '+'."""
    words = {NUM_STEPS_TABLE: "from the table", NUM_STEPS_INFERRED: "inferred as max(step) + 1"}
    return "num_steps " + " and ".join(words.get(part, f"from {part}") for part in source.split("+"))


def coefficients_origin(source: str) -> str:
    """The rescale function's source as a phrase: "coefficients 0.5,1.2,0.01" or "coefficients from fit PATH"."""
    return source if source.startswith("coefficients ") else f"coefficients from {source}"


def gate_defaults(variant: str | None) -> tuple[int, int, str]:
    """skip_first_n_steps and skip_last_n_steps the gate uses for ``variant``, and where they came from."""
    skip_first, skip_last = DEFAULT_SKIP_FIRST, DEFAULT_SKIP_LAST
    if variant is None:
        return skip_first, skip_last, "gate defaults (no variant known)"

    spec = variants.find(variant)
    if spec is None:
        return skip_first, skip_last, f"gate defaults ({variant!r} is not a known variant)"
    return spec.skip_first_n_steps, skip_last, f"variant {spec.name}"


def check_step_rules(args: argparse.Namespace) -> None:
    """--variant, --skip-first, --skip-last and --max-consecutive-skips, before any trace is read."""
    if args.variant is not None:
        check_variant_name(args.variant)
    for arg, value in (("--skip-first", args.skip_first), ("--skip-last", args.skip_last)):
        if value is not None:
            check_at_least(value, 0, arg)
    check_at_least(args.max_consecutive_skips, 1, "--max-consecutive-skips")


def check_gated_steps(args: argparse.Namespace, skip_first: int, skip_last: int, num_steps: list[int]) -> None:
    """Given --skip-first/--skip-last leave the gate a step it may skip in every run: else each schedule would be
    'compute everything', whatever the thresholds. The gate never skips step 0 (it has no previous step)."""
    given = [
        f"{arg} {v}" for arg, v in (("--skip-first", args.skip_first), ("--skip-last", args.skip_last)) if v is not None
    ]
    if not given:
        return
    for n in sorted(num_steps):
        lo, hi = max(skip_first, 1), n - 1 - skip_last
        if hi < lo:
            raise InputError(
                f"{' '.join(given)}: skip first {skip_first} / last {skip_last} leave no step the gate could skip "
                f"in the traces' {n}-step runs (it may skip steps {lo}..{hi}: none); expected skip-first + "
                f"skip-last below {n}"
            )


def read_replay_traces(
    paths, num_steps: int | None = None, variant=None, branch=None, num_steps_arg: str = "--num-steps"
) -> Traces:
    """Traces as a replay needs them: the signal at every step after the first, num_steps known per run."""
    traces = load_traces(
        paths,
        branch=branch,
        variant=variant,
        num_steps=num_steps,
        require=REPLAY_COLUMNS,
        every_step=True,
        num_steps_arg=num_steps_arg,
    )
    for note in traces.notes:
        print(f"traces: {note}", file=sys.stderr)
    return traces


def predict_schedules(traces: Traces, configs: dict[float, GateConfig]) -> pd.DataFrame:
    """One row per (run, threshold): predicted skipped count, longest streak and steps (SCHEDULE_COLUMNS).

    All thresholds and runs are replayed at once (:func:`teacache.gate_batch.replay_skip_masks`, checked
    decision for decision against the gate class); configs that differ in more than the threshold are
    replayed group by group.
    """
    runs = traces.runs()
    thresholds = list(configs)
    if not runs or not thresholds:
        return pd.DataFrame({c: [] for c in SCHEDULE_COLUMNS}).astype({"seed": "Int64"})
    masks = np.zeros((len(thresholds), len(runs), max(r.num_steps for r in runs)), dtype=bool)
    x, sigmas, num_steps = _dense_runs(runs)
    for rule, members in _rule_groups(configs).items():
        rescale = configs[thresholds[members[0]]].rescale
        masks[members] = replay_skip_masks(
            x,
            rescale,
            [thresholds[i] for i in members],
            num_steps,
            sigmas if rescale.form == "poly+sigma" else None,
            skip_first_n_steps=rule[1],
            skip_last_n_steps=rule[2],
            max_consecutive_skips=rule[3],
        )
    by_run = masks.transpose(1, 0, 2)  # rows are run-major, thresholds in their given order
    flat = by_run.reshape(-1, masks.shape[2])
    first, which = _distinct_rows(flat)  # few distinct schedules per run: each written to JSON once
    steps_json = np.array([json.dumps(np.flatnonzero(flat[i]).tolist()) for i in first], dtype=object)
    n_thr = len(thresholds)
    schedules = pd.DataFrame({
        "run_id": np.repeat([r.run_id for r in runs], n_thr),
        "prompt_id": np.repeat([r.prompt_id for r in runs], n_thr),
        "seed": pd.array(np.repeat([r.seed for r in runs], n_thr).tolist(), dtype="Int64"),
        "threshold": np.tile(np.asarray(thresholds, dtype=float), len(runs)),
        "num_steps": np.repeat([r.num_steps for r in runs], n_thr),
        "predicted_skipped": skipped_counts(flat),
        "longest_streak": longest_streaks(flat),
        "predicted_skipped_steps": steps_json[which],
    }, columns=SCHEDULE_COLUMNS)  # fmt: skip
    return schedules


def _distinct_rows(masks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(a row index per distinct row, the distinct row of every row) of a bool ``[rows, steps]`` array."""
    if masks.shape[1] <= 63:  # one integer per schedule sorts far faster than rows of bytes
        keys = masks.astype(np.int64) @ (np.int64(1) << np.arange(masks.shape[1], dtype=np.int64))
        _, first, which = np.unique(keys, return_index=True, return_inverse=True)
    else:
        _, first, which = np.unique(masks, axis=0, return_index=True, return_inverse=True)
    return first, which.reshape(-1)


def _dense_runs(runs: list[RunTrace]) -> tuple[np.ndarray, np.ndarray | None, np.ndarray]:
    """x and sigma as ``[runs, steps]`` (NaN where not recorded or past a run's end), and num_steps per run."""
    width = max(r.num_steps for r in runs)
    x = np.full((len(runs), width), np.nan)
    sigmas = np.full((len(runs), width), np.nan) if runs[0].sigma is not None else None
    for i, run in enumerate(runs):
        x[i, : run.num_steps] = [np.nan if v is None else v for v in run.x]
        if sigmas is not None:
            sigmas[i, : run.num_steps] = run.sigma
    return x, sigmas, np.array([r.num_steps for r in runs], dtype=np.int64)


def _rule_groups(configs: dict[float, GateConfig]) -> dict[tuple, list[int]]:
    """Threshold positions by everything but the threshold (rescale function and step rules)."""
    groups: dict[tuple, list[int]] = {}
    rescales: list = []
    for i, config in enumerate(configs.values()):
        index = next((j for j, fn in enumerate(rescales) if fn == config.rescale), None)
        if index is None:
            rescales.append(config.rescale)
            index = len(rescales) - 1
        rule = (index, config.skip_first_n_steps, config.skip_last_n_steps, config.max_consecutive_skips)
        groups.setdefault(rule, []).append(i)
    return groups


def peer_settings(args, rescale):
    """For --gate mlx-teacache: our config -> mlx-teacache's settings (ValueError if it cannot run them)."""
    import importlib.util

    if importlib.util.find_spec("mlx_teacache") is None:
        raise InputError("--gate mlx-teacache: the mlx-teacache package is not installed (the 'peer' extra)")
    coefficients = peer_gate.peer_coefficients(rescale)

    def peer_for(config: GateConfig) -> peer_gate.PeerSettings:
        first = 1 if args.skip_first is None else config.skip_first_n_steps
        last = 1 if args.skip_last is None else config.skip_last_n_steps
        return peer_gate.PeerSettings(coefficients, first, last)

    return peer_for


def peer_provenance(peer_for, configs: dict) -> dict:
    first = peer_for(next(iter(configs.values())))
    return {
        "mlx_teacache": installed_version("mlx-teacache"),
        "mlx_teacache_settings": {"coefficients": list(first.coefficients), "skip_first_n_steps":
                                  first.skip_first_n_steps, "skip_last_n_steps": first.skip_last_n_steps,
                                  "calibrated_range": None},
    }  # fmt: skip


@command(PROG)
def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = setup_arg_parser().parse_args(argv)
    thresholds = parse_thresholds(args.thresholds)
    x_range = parse_x_range(args.x_range)
    check_step_rules(args)
    if args.out is not None:
        main_out, *beside = output_paths(args.out, args.gate == "mlx-teacache")
        check_out_file(main_out, what="CSV file", writes=WRITES, force=args.force)
        for path in beside:
            check_out_file(path, what="file", writes=WRITES, force=args.force, beside=main_out.name)
    traces = read_replay_traces(args.traces, args.num_steps, args.variant, args.branch)
    variant = args.variant or (traces.variants[0] if len(traces.variants) == 1 else None)
    rescale, source = resolve_coefficients(args.coefficients, variant, x_range)
    if rescale.form == "poly+sigma" and "sigma" not in traces.frame.columns:
        raise InputError(f"--coefficients: {source} is a poly+sigma form; the traces have no finite sigma column")
    skip_first, skip_last, defaults_from = gate_defaults(variant)
    skip_first = skip_first if args.skip_first is None else args.skip_first
    skip_last = skip_last if args.skip_last is None else args.skip_last
    configs = {t: GateConfig(t, rescale, skip_first, skip_last, args.max_consecutive_skips) for t in thresholds}
    check_gated_steps(args, skip_first, skip_last, traces.num_steps["values"])
    peer_for = peer_settings(args, rescale) if args.gate == "mlx-teacache" else None
    for warning in traces.warnings:
        print(f"{PROG}: warning: {warning}", file=sys.stderr)
    start = time.perf_counter()
    schedules = predict_schedules(traces, configs)
    elapsed = time.perf_counter() - start
    summary = schedules.groupby("threshold")["predicted_skipped"].agg(["min", "median", "max"])
    steps = "/".join(str(n) for n in sorted(schedules["num_steps"].unique()))
    print(
        f"{variant or 'variant unknown'}: {schedules['run_id'].nunique()} runs, {steps} steps "
        f"({num_steps_origin(traces.num_steps_source)}), skip first {skip_first} / last {skip_last} "
        f"({'arguments' if args.skip_first is not None else defaults_from}); {coefficients_origin(source)}; "
        f"replayed in {1000 * elapsed:.1f} ms"
    )
    print(summary.to_string())
    peer_tables = None
    if peer_for is not None:
        peer_tables = peer_gate.compare(traces.runs(), configs, peer_for)
        for line in peer_gate.summary_lines(*peer_tables):
            print(f"{peer_gate.PEER}: {line}")
    if args.out:
        write_text(args.out, schedules.to_csv(index=False))
        if peer_tables is not None:
            for table, path in zip(peer_tables, output_paths(args.out, True)[2:], strict=True):
                write_text(path, table.to_csv(index=False))
        provenance = collect(
            ["teacache-bench", "replay", *argv],
            inputs=[{k: f[k] for k in ("path", "name", "sha256", "rows")} for f in traces.files],
            traces_provenance=traces.provenance,
            variant=variant,
            num_steps=traces.num_steps,
            notes=traces.notes,
            thresholds=thresholds,
            rescale=rescale.to_dict(),
            coefficients_source=source,
            skip_first_n_steps=skip_first,
            skip_last_n_steps=skip_last,
            max_consecutive_skips=args.max_consecutive_skips,
            gate_defaults_from="arguments" if args.skip_first is not None else defaults_from,
            gate=args.gate,
            **(peer_provenance(peer_for, configs) if peer_for is not None else {}),
        )
        path = output_paths(args.out, False)[1]
        write_json(path, provenance)
        extra = ", .mlx-teacache.csv, .mlx-teacache-steps.csv" if peer_tables is not None else ""
        print(f"wrote {args.out} and {path.name}{extra}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
