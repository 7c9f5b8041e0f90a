"""FLUX.1's proxy with every step computed: which part of storing the residual costs, and a candidate fix.

Full-size random FLUX.1-dev (bf16), 1024x1024, STEPS steps, interleaved repeats after a warm-up of each arm.
Arms: vanilla; proxy-all (as shipped); no-store (as shipped, store_residual does nothing); pair (the cache holds
body_out and embedded, the residual is formed only where a skip replays it); rewalk (body and tail only).

    PYTHONPATH=. python3 results/cuda-nvidia-h200/proxy-cost-flux1/measure2.py STEPS SIZE REPEATS OUT.json
"""

import contextlib  # noqa: I001
import itertools
import json
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
from teacache import apply_teacache, core
from teacache.adapters import _proxy
from teacache.adapters import flux1 as ad
from teacache.models import fullsize
from teacache.rescale import RescaleFunction

STEPS, SIZE, REPEATS = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
QUANT = int(os.environ["QUANT"]) if os.environ.get("QUANT") else None
t0 = time.perf_counter()
model = fullsize.build_random("random-flux1-dev", seed=0, quantize=QUANT)
print(f"built in {time.perf_counter() - t0:.0f} s (quantize {QUANT})", flush=True)
rescale = RescaleFunction((1.0, 0.0), provenance={"source": "identity"})


class StepTimer:
    """Timestamps at each step's in-loop callback (before mflux evaluates that step) and after the loop."""

    def __init__(self):
        self.stamps = []

    def call_before_loop(self, *args, **kwargs):
        self.stamps = []

    def call_in_loop(self, *args, **kwargs):
        self.stamps.append(time.perf_counter())

    def call_after_loop(self, *args, **kwargs):
        self.stamps.append(time.perf_counter())

    def steps(self):
        return [b - a for a, b in itertools.pairwise(self.stamps)]


TIMER = StepTimer()
model.callbacks.register(TIMER)
PROXY_ALL = {"rel_l1_thresh": 1.0, "coefficients": rescale, "skip_first_n_steps": STEPS}


@contextlib.contextmanager
def patched(obj, name, value):
    old = getattr(obj, name)
    setattr(obj, name, value)
    try:
        yield
    finally:
        setattr(obj, name, old)


def no_store(self, branch, residual):
    return None


def pair_step(self, modulated, embedded, temb, branch, body):
    ctl = self._controller
    if ctl.should_compute(modulated, branch=branch):
        body_out = body()
        ctl.state.residuals[branch] = (body_out, embedded)
    else:
        old_out, old_embedded = ctl.state.residuals[branch]
        body_out = embedded + (old_out - old_embedded)
    return self._tail(body_out, temb)


def rewalk_call(self, t, config, hidden_states, prompt_embeds, pooled_prompt_embeds, cbs=None, cbss=None, kii=None):
    tr = self.transformer
    embedded = tr.x_embedder(hidden_states)
    temb = ad.Transformer.compute_text_embeddings(t, pooled_prompt_embeds, tr.time_text_embed, config)
    return self._tail(self._body(embedded, temb, t, config, prompt_embeds, cbs, cbss, kii), temb)


def arm(patches):
    def run():
        mx.synchronize()
        mx.reset_peak_memory()
        kw = {"prompt": fs.PROMPT, "seed": fs.SEED, "steps": STEPS, "width": SIZE, "height": SIZE, "guidance": 3.5}
        with contextlib.ExitStack() as stack:
            for p in patches or []:
                stack.enter_context(patched(*p))
            if patches is None:
                out = generate(model, **kw)
            else:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    with apply_teacache(model, **PROXY_ALL):
                        out = generate(model, **kw)
        mx.synchronize()
        return {
            "loop_s": out.loop_s,
            "peak_gib": mx.get_peak_memory() / 2**30,
            "latents": out.latents,
            "steps_s": TIMER.steps(),
        }

    return run


ARMS = {
    "vanilla": arm(None),
    "proxy-all": arm([]),
    "no-store": arm([(core.StepController, "store_residual", no_store)]),
    "pair": arm([(_proxy.CachingProxy, "cached_step", pair_step)]),
    "rewalk": arm([(ad.TeaCacheFlux1Transformer, "__call__", rewalk_call)]),
}
if os.environ.get("ARMS"):
    ARMS = {k: ARMS[k] for k in os.environ["ARMS"].split(",")}
names = list(ARMS)
t0 = time.perf_counter()
warm = {name: ARMS[name]() for name in names}  # warm-up, each path once
print(f"warm-up {time.perf_counter() - t0:.0f} s", flush=True)
results = interleave(lambda turn: ARMS[names[turn.arm]](), len(names), REPEATS)
vanilla = results[0]
rows = {"_meta": {"steps": STEPS, "size": SIZE, "repeats": REPEATS, "quantize": QUANT, "mlx": mx.__version__}}
for name, runs in zip(names, results, strict=True):
    ratios = [r["loop_s"] / v["loop_s"] for r, v in zip(runs, vanilla, strict=True)]
    exact = [bool(mx.array_equal(r["latents"], v["latents"]).item()) for r, v in zip(runs, vanilla, strict=True)]
    max_abs = max(float(mx.max(mx.abs(r["latents"] - v["latents"])).item()) for r, v in zip(runs, vanilla, strict=True))
    # per step, the arm's time over vanilla's same step of the same repeat (steps 1.. : step 0 holds the warm-in)
    step_ratios = [
        a / b
        for r, v in zip(runs, vanilla, strict=True)
        for a, b in zip(r["steps_s"][1:], v["steps_s"][1:], strict=True)
    ]
    rows[name] = {
        "step_ratio_median": round(statistics.median(step_ratios), 4),
        "step_ratio_q25_q75": [round(q, 4) for q in statistics.quantiles(step_ratios, n=4)[::2]],
        "step_s_median": round(statistics.median(s for r in runs for s in r["steps_s"][1:]), 4),
        "loop_s": [round(r["loop_s"], 3) for r in runs],
        "vs_vanilla": [round(x, 4) for x in ratios],
        "median_ratio": round(statistics.median(ratios), 4),
        "peak_gib": [round(r["peak_gib"], 3) for r in runs],
        "bit_exact": exact,
        "max_abs_vs_vanilla": max_abs,
        "warm_equal_to_first_vanilla": bool(mx.array_equal(warm[name]["latents"], vanilla[0]["latents"]).item()),
    }
    print(name, json.dumps(rows[name]), flush=True)
vv = [bool(mx.array_equal(a["latents"], vanilla[0]["latents"]).item()) for a in vanilla]
rows["_meta"]["vanilla_max_abs_vs_first"] = [
    float(mx.max(mx.abs(a["latents"] - vanilla[0]["latents"])).item()) for a in [warm["vanilla"], *vanilla]
]
print("vanilla (warm-up, then each repeat) max-abs vs the first timed:", rows["_meta"]["vanilla_max_abs_vs_first"])
rows["_meta"]["vanilla_runs_equal_to_first"] = vv
print("vanilla runs equal to the first:", vv, flush=True)
with open(sys.argv[4], "w") as handle:
    json.dump(rows, handle, indent=1)
