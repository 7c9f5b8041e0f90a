"""FLUX.1's proxy with every step computed against vanilla, step against neighbouring step of one generation.

Loop-time ratios of whole runs spread by several percent between repeats here, which hides a cost of 0.5 %.
So each generation alternates the two arms in blocks of BLOCK steps (vanilla's blocks call mflux's own
transformer, the proxy's the proxy as shipped; the order flips every generation), and every step is timed
from the start of its transformer call to the start of the next (mflux evaluates the latents at the end of
each step, so the GPU is idle at both stamps). A block's first step is left out (it may carry the other
arm's arrays released late). The controller's in-loop callback (host bookkeeping) runs in both arms.
Then whole runs of each arm, interleaved, for the loop ratio and bit-exactness. Raw step times are kept.

ARM picks the proxy's gate: ``forced`` (every decision forced by skip_first_n_steps = steps, as fullsize's
proxy-all: since the decision needs no signal, the signal is read back after the step) or ``gated`` (every
step after the first gated by a threshold nothing stays under, so each step reads its signal back mid-step,
as every step a real run may skip does). Same measurement as measure3.py otherwise.

    ARM=forced PYTHONPATH=. python3 measure4.py STEPS SIZE GENERATIONS WHOLE_REPEATS OUT.json     # BLOCK=4 by default
"""

import json  # noqa: I001
import os
import statistics
import sys
import time
import warnings

import teacache  # noqa: F401
import mlx.core as mx

from bench.timing import fullsize_measure as fs
from calib.run.generation import generate
from calib.run.interleave import interleave
from teacache import apply_teacache
from teacache.adapters import flux1 as ad
from teacache.models import fullsize
from teacache._platform import use_float32_on_cpu
from teacache.rescale import RescaleFunction

STEPS, SIZE, GENERATIONS, WHOLE = (int(a) for a in sys.argv[1:5])
BLOCK = int(os.environ.get("BLOCK", "4"))
use_float32_on_cpu()  # a no-op on the GPU
t0 = time.perf_counter()
BLOCKS = int(os.environ["BLOCKS"]) if os.environ.get("BLOCKS") else None  # smoke runs only: NOT full size
model = fullsize.build_random("random-flux1-dev", seed=0, blocks=BLOCKS)
print(f"built in {time.perf_counter() - t0:.0f} s", flush=True)
ARM = os.environ.get("ARM", "forced")
IDENTITY = RescaleFunction((1.0, 0.0), provenance={"source": "identity"})
PROXY_ALL = {
    "forced": {"rel_l1_thresh": 1.0, "coefficients": IDENTITY, "skip_first_n_steps": STEPS},
    "gated": {"rel_l1_thresh": 1e-12, "coefficients": IDENTITY, "skip_first_n_steps": 1, "skip_last_n_steps": 0},
}[ARM]
KW = {"prompt": fs.PROMPT, "seed": fs.SEED, "steps": STEPS, "width": SIZE, "height": SIZE, "guidance": 3.5}
SHIPPED_CALL = ad.TeaCacheFlux1Transformer.__call__
STAMPS: list[float] = []
SCHEDULE: list[str] = []  # per step: "v" (mflux's transformer) or "p" (the proxy)


def switching_call(self, *args, **kwargs):
    STAMPS.append(time.perf_counter())
    if SCHEDULE[len(STAMPS) - 1] == "v":
        return self.transformer(*args, **kwargs)
    return SHIPPED_CALL(self, *args, **kwargs)


class End:
    def call_after_loop(self, *args, **kwargs):
        STAMPS.append(time.perf_counter())


model.callbacks.register(End())


def run(schedule: str) -> dict:
    """One generation: "v" * STEPS is vanilla, "p" * STEPS the proxy as shipped, else mixed by step."""
    SCHEDULE[:] = list(schedule)
    STAMPS.clear()
    mx.synchronize()
    mx.reset_peak_memory()
    reasons = {}
    if schedule == "v" * STEPS:
        out = generate(model, **KW)
        steps_s = []
    else:
        ad.TeaCacheFlux1Transformer.__call__ = switching_call
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                with apply_teacache(model, **PROXY_ALL) as handle:
                    out = generate(model, **KW)
            for decision in handle.stats.log:  # the proxy's steps: how each was decided
                reasons[decision.reason] = reasons.get(decision.reason, 0) + 1
        finally:
            ad.TeaCacheFlux1Transformer.__call__ = SHIPPED_CALL
        steps_s = [b - a for a, b in zip(STAMPS, STAMPS[1:], strict=False)]
    mx.synchronize()
    peak = mx.get_peak_memory() / 2**30
    return {"loop_s": out.loop_s, "peak_gib": peak, "latents": out.latents, "steps_s": steps_s, "reasons": reasons}


def mixed(first: str) -> str:
    other = "p" if first == "v" else "v"
    return "".join(first if (i // BLOCK) % 2 == 0 else other for i in range(STEPS))


def max_abs(a, b) -> float:
    return float(mx.max(mx.abs(a - b)).item())


t0 = time.perf_counter()
reference = run("v" * STEPS)  # warm-up of both paths
run("p" * STEPS)
print(f"warm-up {time.perf_counter() - t0:.0f} s", flush=True)

# 1. mixed generations: per step, by arm
per_step = {"v": [], "p": []}
block_means = []  # (vanilla block mean, proxy block mean) of neighbouring blocks
raw = []
for g in range(GENERATIONS):
    schedule = mixed("v" if g % 2 == 0 else "p")
    result = run(schedule)
    steps = result["steps_s"]
    raw.append({"schedule": schedule, "steps_s": steps, "reasons": result["reasons"],
                "max_abs_vs_vanilla": max_abs(result["latents"], reference["latents"])})
    kept = [(i, s) for i, s in enumerate(steps) if i > 0 and i % BLOCK != 0]  # a block's first step left out
    for i, s in kept:
        per_step[schedule[i]].append(s)
    blocks = {}
    for i, s in kept:
        blocks.setdefault(i // BLOCK, []).append(s)
    means = {b: statistics.fmean(v) for b, v in blocks.items()}
    for b in sorted(means):
        if b % 2 == 0 and b + 1 in means:  # neighbours, each block in one pair: one vanilla, one proxy
            pair = {schedule[b * BLOCK]: means[b], schedule[(b + 1) * BLOCK]: means[b + 1]}
            block_means.append((pair["v"], pair["p"]))
    print(f"mixed {g}: {schedule}, {result['reasons']}, max-abs vs vanilla {raw[-1]['max_abs_vs_vanilla']}", flush=True)

ratios = [p / v for v, p in block_means]
q = statistics.quantiles(ratios, n=20)
summary = {
    "_meta": {"arm": ARM, "gate": {k: v for k, v in PROXY_ALL.items() if k != "coefficients"}, "blocks_built": BLOCKS, "steps": STEPS, "size": SIZE, "generations": GENERATIONS, "block": BLOCK, "mlx": mx.__version__},
    "step_median_s": {arm: statistics.median(v) for arm, v in per_step.items()},
    "step_counts": {arm: len(v) for arm, v in per_step.items()},
    "neighbour_block_ratio_median": statistics.median(ratios),
    "neighbour_block_ratio_mean": statistics.fmean(ratios),
    "neighbour_block_ratio_p5_p95": [q[0], q[-1]],
    "neighbour_block_ratio_sem": statistics.stdev(ratios) / len(ratios) ** 0.5,
    "neighbour_block_pairs": len(ratios),
    "mixed_bit_exact": [r["max_abs_vs_vanilla"] == 0.0 for r in raw],
}
print(json.dumps(summary), flush=True)
with open(sys.argv[5], "w") as handle:  # the mixed part alone, in case the whole runs do not finish
    json.dump({**summary, "raw_mixed": raw}, handle, indent=1)

# 2. whole runs, interleaved
arms = {"vanilla": "v" * STEPS, f"proxy-{ARM}": "p" * STEPS}
names = list(arms)
whole = interleave(lambda turn: run(arms[names[turn.arm]]), len(names), WHOLE) if WHOLE else [[], []]
summary["whole"] = {
    name: {
        "loop_s": [r["loop_s"] for r in runs],
        "vs_vanilla": [r["loop_s"] / v["loop_s"] for r, v in zip(runs, whole[0], strict=True)],
        "peak_gib": [r["peak_gib"] for r in runs],
        "max_abs_vs_vanilla": [max_abs(r["latents"], reference["latents"]) for r in runs],
    }
    for name, runs in zip(names, whole, strict=True)
}
print(json.dumps(summary["whole"]), flush=True)
summary["raw_mixed"] = raw
with open(sys.argv[5], "w") as handle:
    json.dump(summary, handle, indent=1)
