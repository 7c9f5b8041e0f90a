"""Where FLUX.1's proxy with every step computed spends its time and memory: one change at a time.

Full-size random FLUX.1-dev (bf16), 1024x1024, 20 steps, interleaved repeats after warm-up.
Arms: vanilla; proxy-all (as shipped); no-sync (the decision never reads the signal back: no rel_l1, no
.item()); no-signal (no block-0 norm1 either; residual still stored); rewalk (the body and tail only);
proxy-eval (as shipped, the residual handed to mx.async_eval when stored).

    PYTHONPATH=. python3 results/cuda-nvidia-h200/proxy-cost-flux1/measure.py STEPS SIZE REPEATS OUT.json [BLOCKS]
    ARMS=vanilla,proxy-all,proxy-eval PYTHONPATH=. python3 .../measure.py 20 1024 2 OUT.json
"""

import contextlib  # noqa: I001  (teacache before mlx: the OpenBLAS preload)
import json
import os
import statistics
import sys
import time
import warnings

import teacache  # noqa: F401  (first)
import mlx.core as mx

from bench.timing import fullsize_measure as fs
from calib.run.generation import generate
from calib.run.interleave import interleave
from teacache import apply_teacache, core
from teacache.adapters import flux1 as ad
from teacache.models import fullsize
from teacache.rescale import RescaleFunction

STEPS, SIZE, REPEATS = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
BLOCKS = int(sys.argv[5]) if len(sys.argv) > 5 else None
model = fullsize.build_random("random-flux1-dev", seed=0, blocks=BLOCKS)
rescale = RescaleFunction((1.0, 0.0), provenance={"source": "identity"})
PROXY_ALL = {"rel_l1_thresh": 1.0, "coefficients": rescale, "skip_first_n_steps": STEPS}


@contextlib.contextmanager
def patched(obj, name, value):
    old = getattr(obj, name)
    setattr(obj, name, value)
    try:
        yield
    finally:
        setattr(obj, name, old)


def no_sync_decide(self, modulated, step):
    self.state.anchor = modulated
    return True


def no_signal_call(self, t, config, hidden_states, prompt_embeds, pooled_prompt_embeds, cbs=None, cbss=None, kii=None):
    tr = self.transformer
    embedded = tr.x_embedder(hidden_states)
    temb = ad.Transformer.compute_text_embeddings(t, pooled_prompt_embeds, tr.time_text_embed, config)
    body_out = self._body(embedded, temb, t, config, prompt_embeds, cbs, cbss, kii)
    self._controller.store_residual(0, self._residual(body_out, embedded))
    self._controller.stats.computed += 1
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
        return {"loop_s": out.loop_s, "peak_gib": mx.get_peak_memory() / 2**30, "latents": out.latents}

    return run


def eval_store(self, branch, residual):
    mx.async_eval(residual)  # evaluated with the step, not kept as a lazy graph
    self.state.residuals[branch] = residual


ARMS = {
    "vanilla": arm(None),
    "proxy-all": arm([]),
    "no-sync": arm([(core.StepController, "_decide", no_sync_decide)]),
    "no-signal": arm([(ad.TeaCacheFlux1Transformer, "__call__", no_signal_call)]),
    "rewalk": arm([(ad.TeaCacheFlux1Transformer, "__call__", rewalk_call)]),
    "proxy-eval": arm([(core.StepController, "store_residual", eval_store)]),
}
if os.environ.get("ARMS"):
    ARMS = {k: ARMS[k] for k in os.environ["ARMS"].split(",")}
names = list(ARMS)
t0 = time.perf_counter()
for name in names:  # warm-up, each path once
    ARMS[name]()
print(f"warm-up {time.perf_counter() - t0:.0f} s", flush=True)
results = interleave(lambda turn: ARMS[names[turn.arm]](), len(names), REPEATS)
vanilla = results[0]
rows = {}
for name, runs in zip(names, results, strict=True):
    ratios = [r["loop_s"] / v["loop_s"] for r, v in zip(runs, vanilla, strict=True)]
    exact = all(bool(mx.array_equal(r["latents"], v["latents"]).item()) for r, v in zip(runs, vanilla, strict=True))
    rows[name] = {
        "loop_s": [round(r["loop_s"], 3) for r in runs],
        "vs_vanilla": [round(x, 4) for x in ratios],
        "median_ratio": round(statistics.median(ratios), 4),
        "peak_gib": round(max(r["peak_gib"] for r in runs), 3),
        "bit_exact": exact,
    }
    print(name, json.dumps(rows[name]), flush=True)
with open(sys.argv[4], "w") as handle:
    json.dump(rows, handle, indent=1)
