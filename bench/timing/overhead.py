"""``teacache-bench overhead``: what the wrapper costs when it skips nothing.

Paired and interleaved in one process after a warm-up (``calib.run.interleave``: vanilla and the wrapper
take turns going first), for ``--pairs`` pairs. Two settings: threshold 0 (the fast path: the proxy
delegates) and the proxy active with a threshold no step can reach (signal, decision and host sync every
step, nothing skipped). A median outside the plausible band (calib.run.generation.PLAUSIBLE_OVERHEAD) is
reported as unreliable.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import warnings

from calib.run import arguments
from calib.run.command import command
from calib.run.generation import paired_overhead
from calib.run.interleave import Turn, interleave
from calib.run.prompts import default_set, load_prompts
from teacache import apply_teacache, variants

PROG = "teacache-bench overhead"


def setup_arg_parser() -> argparse.ArgumentParser:
    parser = arguments.CommandParser(prog=PROG, description=__doc__)
    arguments.add_model_arguments(parser, prompts=False)
    parser.add_argument("--steps", type=int, default=28)
    parser.add_argument("--size", default=None, help="WIDTHxHEIGHT (default: the model's own)")
    parser.add_argument("--pairs", type=int, default=10, help="interleaved vanilla/wrapped pairs per setting")
    return parser


def _generate_fn(model, steps: int, size: tuple[int, int] | None):
    prompt = next(iter(load_prompts(default_set(variants.variant_of(model))).values()))
    kwargs = {"num_inference_steps": steps}
    if size is not None:
        kwargs.update(width=size[0], height=size[1])

    def run() -> float:
        start = time.perf_counter()
        model.generate_image(seed=0, prompt=prompt, **kwargs)
        return time.perf_counter() - start

    return run


def measure(model, steps: int, size: tuple[int, int] | None, pairs: int, proxy: bool) -> dict:
    """proxy=False: threshold 0 (fast path). proxy=True: the variant's default threshold with every step
    forced to compute (skip_first_n_steps = steps), so the signal, decision and host sync run each step."""
    run = _generate_fn(model, steps, size)
    settings = {"rel_l1_thresh": None, "skip_first_n_steps": steps} if proxy else {"rel_l1_thresh": 0.0}
    run()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with apply_teacache(model, **settings):
            run()

        def run_turn(turn: Turn) -> float:
            if turn.arm == 0:
                return run()
            with apply_teacache(model, **settings) as handle:
                wrapped = run()
            assert handle.stats.skipped == 0
            return wrapped

        vanilla_times, wrapped_times = interleave(run_turn, 2, pairs)
    ratios = [w / v for v, w in zip(vanilla_times, wrapped_times, strict=True)]
    summary = paired_overhead(ratios)
    return {
        "proxy": proxy,
        "reliable": summary["reliable"],
        "reason": summary.get("reason"),
        "overhead_median": summary["median"],
        "overhead_min": summary["min"],
        "overhead_max": summary["max"],
        "vanilla_s": statistics.median(vanilla_times),
        "wrapped_s": statistics.median(wrapped_times),
    }


def check_args(args: argparse.Namespace) -> tuple[int, int] | None:
    """Every argument, before the model loads; the size to generate at (None: the model's own)."""
    _steps, width, height, _guidance = arguments.generation_settings(
        args.model, args.base_model, args.steps, args.size, None, 2, " steps"
    )
    arguments.check_at_least(args.pairs, 1, "--pairs")
    return (width, height) if args.size is not None else None


@command(PROG)
def main(argv: list[str] | None = None) -> int:
    args = setup_arg_parser().parse_args(argv)
    size = check_args(args)
    model = arguments.load_model(args.model, args.base_model, None)
    print(f"{args.model}, {args.steps} steps, {args.pairs} interleaved pairs after warm-up")
    for label, proxy in (("threshold 0 (fast path)", False), ("proxy active, every step computed", True)):
        r = measure(model, args.steps, size, args.pairs, proxy)
        timing = f"vanilla {1000 * r['vanilla_s']:.1f} ms, wrapped {1000 * r['wrapped_s']:.1f} ms"
        if not r["reliable"]:
            print(f"  {label:45s} overhead unreliable ({r['reason']}; {timing})")
            continue
        print(
            f"  {label:45s} overhead median {100 * r['overhead_median']:+6.2f}%  "
            f"(min {100 * r['overhead_min']:+.2f}%, max {100 * r['overhead_max']:+.2f}%; {timing})"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
