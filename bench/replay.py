"""``teacache-bench replay``: the skip schedule recorded traces predict, for any thresholds, in milliseconds.

It drives the gate's own class (teacache.gate.replay) over each run's recorded x: no second
implementation of the rule. A recorded trace always advances the anchor, so the prediction assumes
that skipping does not change later signals; ``teacache-bench sweep`` reports predicted against actual.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import pandas as pd

from bench.common import parse_thresholds, resolve_rescale
from teacache.gate import GateConfig, replay
from teacache.io import write_text


def setup_arg_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="teacache-bench replay", description=__doc__.split("\n\n")[0])
    parser.add_argument("traces", type=Path, help="traces.parquet from teacache-calib record")
    parser.add_argument("--thresholds", required=True)
    parser.add_argument("--coefficients", default="packaged", help="packaged, a fit.json, or c4,...,c0")
    parser.add_argument("--variant", default=None, help="default: the traces' variant column")
    parser.add_argument("--skip-first", type=int, default=1)
    parser.add_argument("--skip-last", type=int, default=1)
    parser.add_argument("--max-consecutive-skips", type=int, default=8)
    parser.add_argument("--out", type=Path, default=None, help="write the schedules as CSV")
    return parser


def predict_schedules(traces: pd.DataFrame, configs: dict[float, GateConfig]) -> pd.DataFrame:
    """One row per (run, threshold): predicted skipped count and steps. Uses the cond branch."""
    if "branch" in traces:
        traces = traces[traces["branch"].fillna("cond") == "cond"]
    rows = []
    for run, group in traces.sort_values("step").groupby("run_id", sort=True):
        xs = [None if pd.isna(v) else float(v) for v in group["x_rel_l1"]]
        n = int(group["num_steps"].iloc[0]) if "num_steps" in group else len(xs)
        sigmas = group["sigma"].tolist() if "sigma" in group else None
        for threshold, config in configs.items():
            log = replay(config, xs, num_steps=n, sigmas=sigmas)
            skipped = [d.step for d in log if not d.compute]
            rows.append({
                "run_id": run,
                "prompt_id": group["prompt_id"].iloc[0],
                "seed": int(group["seed"].iloc[0]) if "seed" in group else -1,
                "threshold": threshold,
                "num_steps": n,
                "predicted_skipped": len(skipped),
                "predicted_skipped_steps": json.dumps(skipped),
            })  # fmt: skip
    return pd.DataFrame(rows)


def main(argv: list[str] | None = None) -> int:
    args = setup_arg_parser().parse_args(argv)
    try:
        thresholds = parse_thresholds(args.thresholds)
        if not args.traces.exists():
            raise ValueError(f"traces: {args.traces} does not exist")
        traces = pd.read_parquet(args.traces)
        missing = {"run_id", "prompt_id", "step", "x_rel_l1"} - set(traces.columns)
        if missing:
            raise ValueError(f"traces: missing columns {', '.join(sorted(missing))}")
        variant = args.variant or str(traces["variant"].iloc[0])
        rescale = resolve_rescale(args.coefficients, variant)
        configs = {
            t: GateConfig(t, rescale, args.skip_first, args.skip_last, args.max_consecutive_skips) for t in thresholds
        }
    except ValueError as exc:
        print(f"teacache-bench replay: {exc}", file=sys.stderr)
        return 2
    start = time.perf_counter()
    schedules = predict_schedules(traces, configs)
    elapsed = time.perf_counter() - start
    summary = schedules.groupby("threshold")["predicted_skipped"].agg(["min", "median", "max"])
    n = int(schedules["num_steps"].max())
    print(f"{variant}: {schedules['run_id'].nunique()} runs, {n} steps, replayed in {1000 * elapsed:.1f} ms")
    print(summary.to_string())
    if args.out:
        write_text(args.out, schedules.to_csv(index=False))
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
