"""Where FLUX.1's proxy peaks above vanilla: the allocator's peak per phase (each step's evaluation, the
VAE decode), full-size random FLUX.1-dev, bf16, every step computed (decisions forced).

Arms: v (mflux's transformer), p-lazy (the proxy with its cache left lazy, as before the cache was evaluated
with the step), p (the proxy as shipped), p-sigfirst (shipped, and the body's input made to depend on the
step's unread signal, so the previous anchor is released before the body runs).

    PYTHONPATH=. python3 peaks.py STEPS SIZE REPEATS OUT.json
"""

import json  # noqa: I001
import sys
import time
import warnings

import teacache  # noqa: F401
import mlx.core as mx

from calib.run.generation import generate
from teacache import apply_teacache
from teacache.adapters import flux1 as ad
from teacache.core import StepController
from teacache.models import fullsize
from teacache._platform import use_float32_on_cpu
from teacache.rescale import RescaleFunction

STEPS, SIZE, REPEATS = (int(a) for a in sys.argv[1:4])
use_float32_on_cpu()
t0 = time.perf_counter()
model = fullsize.build_random("random-flux1-dev", seed=0, blocks=int(sys.argv[5]) if len(sys.argv) > 5 else None)
print(f"built in {time.perf_counter() - t0:.0f} s", flush=True)
IDENTITY = RescaleFunction((1.0, 0.0), provenance={"source": "identity"})
FORCED = {"rel_l1_thresh": 1.0, "coefficients": IDENTITY, "skip_first_n_steps": STEPS}
KW = {"prompt": "a lighthouse on a cliff at dusk", "seed": 7, "steps": STEPS, "width": SIZE, "height": SIZE, "guidance": 3.5}
SHIPPED_CALL = ad.TeaCacheFlux1Transformer.__call__
SHIPPED_CARRY = StepController.carry


def carry_lazy(self, output):
    unread = [signal for _, signal in self.state.unread]
    return mx.depends(output, unread) if unread else output


def call_sigfirst(self, t, config, hidden_states, prompt_embeds, pooled_prompt_embeds, *rest, **kw):
    modulated, embedded, temb = ad.flux1_signal(self.transformer, t, config, hidden_states, pooled_prompt_embeds)
    ctl = self._controller

    def body():
        unread = [s for _, s in ctl.state.unread]
        first = mx.depends(embedded, unread) if unread else embedded
        return self._body(first, temb, t, config, prompt_embeds, None, None, None)

    return self.cached_step(modulated, embedded, temb, branch=0, body=body)


class Phases:
    """Peak per phase: in_loop runs after a step is built and before mflux evaluates it."""

    def __init__(self):
        self.peaks, self.active = [], []

    def _mark(self):
        mx.synchronize()
        self.peaks.append(mx.get_peak_memory())
        self.active.append(mx.get_active_memory())
        mx.reset_peak_memory()

    def call_before_loop(self, *a, **k):
        pass

    def call_in_loop(self, *a, **k):
        self._mark()

    def call_after_loop(self, *a, **k):
        self._mark()


def run(arm):
    phases = Phases()
    mx.synchronize()
    mx.clear_cache()
    mx.reset_peak_memory()
    base = mx.get_active_memory()
    cache = 0
    if arm == "v":
        model.callbacks.register(phases)
        out = generate(model, **KW)
    else:
        StepController.carry = carry_lazy if arm == "p-lazy" else SHIPPED_CARRY
        ad.TeaCacheFlux1Transformer.__call__ = call_sigfirst if arm == "p-sigfirst" else SHIPPED_CALL
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                with apply_teacache(model, **FORCED) as handle:
                    model.callbacks.register(phases)  # after the controller's own callbacks
                    out = generate(model, **KW)
                    cache = handle.cache_bytes
        finally:
            StepController.carry, ad.TeaCacheFlux1Transformer.__call__ = SHIPPED_CARRY, SHIPPED_CALL
    for lst in (model.callbacks.in_loop, model.callbacks.after_loop, model.callbacks.before_loop):
        lst[:] = [c for c in lst if c is not phases]
    mx.synchronize()
    decode_peak = mx.get_peak_memory()
    # phases.peaks[0]: building step 0 (text encoding); [1..STEPS]: step k-1's evaluation; then the decode
    return {
        "base": base, "cache_bytes": cache, "loop_s": out.loop_s,
        "step_peaks": [p - base for p in phases.peaks[1:]], "build_peak": phases.peaks[0] - base,
        "active_between": [a - base for a in phases.active], "decode_peak": decode_peak - base,
        "latents": out.latents,
    }


ARMS = ["v", "p-lazy", "p", "p-sigfirst"]
runs = {arm: [] for arm in ARMS}
reference = None
for r in range(REPEATS + 1):  # round 0 is the warm-up
    order = ARMS if r % 2 == 0 else ARMS[::-1]
    for arm in order:
        res = run(arm)
        if reference is None:
            reference = res["latents"]
        res["max_abs_vs_vanilla"] = float(mx.max(mx.abs(res.pop("latents") - reference)).item())
        res["round"] = r
        runs[arm].append(res)
        v = runs["v"][-1] if runs["v"] else None
        print(arm, r, "max step peak", max(res["step_peaks"]), "decode", res["decode_peak"], "cache", res["cache_bytes"],
              "max-abs", res["max_abs_vs_vanilla"], flush=True)
with open(sys.argv[4], "w") as f:
    json.dump({"_meta": {"steps": STEPS, "size": SIZE, "repeats": REPEATS, "mlx": mx.__version__, "gate": "forced"},
               "runs": runs}, f, indent=1)
