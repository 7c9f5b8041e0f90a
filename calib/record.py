"""``teacache-calib record``: vanilla generations that record the TeaCache signal at every step.

For every (prompt, seed) run and every gated step: x_rel_l1 (rel-L1 of block 0's modulated input
against the previous step, the gate's own function), y_rel_l1 (of the transformer output), the
cached residual's rel-L1 and the norms behind them; per CFG branch. Nothing is skipped: the recorder
is the gate's proxy in calibration mode, which is bit-exact with vanilla (tests/test_flux1.py).
Resumable per run: finished runs live in ``DIR/runs/<run_id>.parquet`` and are never redone.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import pandas as pd
from rich.progress import Progress

import teacache  # noqa: F401  (OpenBLAS preload before MLX)
from calib.generation import generate
from calib.prompts import default_set, load_prompts, parse_seeds, parse_size
from teacache import apply_teacache, load_model, variants
from teacache.io import FORMAT_VERSION, write_json, write_parquet
from teacache.loading import model_defaults
from teacache.provenance import collect

BRANCHES = {0: "cond", 1: "uncond"}
COLUMNS = [
    "run_id", "variant", "model", "prompt_id", "prompt", "seed", "step", "num_steps", "sigma", "branch",
    "x_rel_l1", "y_rel_l1", "residual_rel_l1", "x_norm", "y_norm", "residual_norm",
]  # fmt: skip


def setup_arg_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="teacache-calib record", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--model", default=variants.default_model(), help=f"one of {', '.join(variants.load_names())} or a folder"
    )
    parser.add_argument("--base-model", default=None, help="architecture of a local model folder")
    parser.add_argument("--prompts", default=None, help="built-in set or file (default: the model's own set)")
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--steps", type=int, default=None)
    parser.add_argument("--size", default=None, help="WIDTHxHEIGHT")
    parser.add_argument("--guidance", type=float, default=None)
    parser.add_argument("--quantize", type=int, default=None, choices=(3, 4, 5, 6, 8))
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--dry-run", action="store_true", help="print the plan and exit")
    parser.add_argument("--overhead-pairs", type=int, default=3, help="paired vanilla/recorded runs timed (0: skip)")
    return parser


def resolve_settings(args) -> dict:
    defaults = model_defaults(args.model, args.base_model)
    width, height = parse_size(args.size) if args.size else (defaults["width"], defaults["height"])
    steps = args.steps if args.steps is not None else defaults["steps"]
    if steps < 2:
        raise ValueError(f"--steps: expected at least 2 steps (a trace needs consecutive steps), got {steps}")
    prompts = load_prompts(args.prompts or default_set(args.model))
    return {
        "model": args.model,
        "prompts": prompts,
        "seeds": parse_seeds(args.seeds),
        "steps": steps,
        "width": width,
        "height": height,
        "guidance": args.guidance if args.guidance is not None else defaults["guidance"],
        "quantize": args.quantize,
    }


def run_id(prompt_id: str, seed: int) -> str:
    return f"{prompt_id}-s{seed}"


def record_run(model, handle, settings: dict, prompt_id: str, prompt: str, seed: int, variant: str):
    before = len(handle.records)
    gen = generate(model, prompt, seed, settings["steps"], settings["width"], settings["height"], settings["guidance"])
    rows = handle.records[before:]
    frame = pd.DataFrame(rows)
    frame["branch"] = frame["branch"].map(BRANCHES)
    frame = frame.assign(
        run_id=run_id(prompt_id, seed), variant=variant, model=settings["model"], prompt_id=prompt_id,
        prompt=prompt, seed=seed,
    )  # fmt: skip
    return frame[COLUMNS], gen.loop_s


def measure_overhead(model, settings: dict, prompt: str, pairs: int) -> dict:
    """Paired, interleaved loop times: vanilla against the recorder, after a warm-up of each."""
    args = (settings["steps"], settings["width"], settings["height"], settings["guidance"])
    generate(model, prompt, 0, *args)
    ratios = []
    for _ in range(pairs):
        vanilla = generate(model, prompt, 0, *args).loop_s
        with apply_teacache(model, calibrate=True):
            recorded = generate(model, prompt, 0, *args).loop_s
        ratios.append(recorded / vanilla)
    return {
        "pairs": pairs,
        "median": statistics.median(ratios) - 1,
        "min": min(ratios) - 1,
        "max": max(ratios) - 1,
    }


def main(argv: list[str] | None = None) -> int:
    args = setup_arg_parser().parse_args(argv)
    try:
        settings = resolve_settings(args)
    except ValueError as exc:
        print(f"teacache-calib record: {exc}", file=sys.stderr)
        return 2
    plan = [(pid, text, seed) for pid, text in settings["prompts"].items() for seed in settings["seeds"]]
    parts = args.out / "runs"
    done = {p.stem for p in parts.glob("*.parquet")} if parts.exists() else set()
    todo = [item for item in plan if run_id(item[0], item[2]) not in done]
    print(
        f"record {settings['model']}: {len(settings['prompts'])} prompts x {len(settings['seeds'])} seeds = "
        f"{len(plan)} runs ({len(plan) - len(todo)} already done), {settings['steps']} steps, "
        f"{settings['width']}x{settings['height']}, guidance {settings['guidance']} -> {args.out}"
    )
    if args.dry_run:
        for pid, _text, seed in todo:
            print(f"  would record {run_id(pid, seed)}")
        return 0
    model = load_model(args.model, base_model=args.base_model, quantize=args.quantize)
    overhead = None
    if todo and args.overhead_pairs > 0:
        overhead = measure_overhead(model, settings, plan[0][1], args.overhead_pairs)
        print(f"recording overhead (loop time, {overhead['pairs']} pairs): median {100 * overhead['median']:+.2f}%")
    with apply_teacache(model, calibrate=True) as handle, Progress() as progress:
        task = progress.add_task("recording", total=len(todo))
        for pid, text, seed in todo:
            frame, _ = record_run(model, handle, settings, pid, text, seed, handle.variant)
            write_parquet(parts / f"{run_id(pid, seed)}.parquet", frame)
            progress.advance(task)
        variant = handle.variant
    frames = [pd.read_parquet(parts / f"{run_id(pid, seed)}.parquet") for pid, _t, seed in plan]
    traces = pd.concat(frames, ignore_index=True)
    provenance = collect(
        model=settings["model"],
        variant=variant,
        model_path=args.model if Path(args.model).exists() else None,
        quantization=settings["quantize"],
        dtype=_dtype(),
        resolution=f"{settings['width']}x{settings['height']}",
        steps=settings["steps"],
        guidance=settings["guidance"],
        scheduler=_scheduler_name(model),
        prompts=[{"id": k, "text": v} for k, v in settings["prompts"].items()],
        seeds=settings["seeds"],
        n_runs=len(plan),
        recording_overhead=overhead,
        columns=COLUMNS,
    )
    write_parquet(args.out / "traces.parquet", traces)
    write_json(args.out / "provenance.json", provenance)
    print(f"wrote {args.out / 'traces.parquet'} ({len(traces)} rows, format_version {FORMAT_VERSION})")
    return 0


def _dtype() -> str:
    from mflux.models.common.config.model_config import ModelConfig

    return str(ModelConfig.precision)


def _scheduler_name(model) -> str:
    return getattr(model, "scheduler_name", None) or (
        "flow_match_euler_discrete" if "shapes" in str(type(model)).lower() else "linear"
    )


if __name__ == "__main__":
    sys.exit(main())
