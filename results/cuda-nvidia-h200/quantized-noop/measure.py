"""Is the no-op bit-exact under quantization on CUDA, and if not, how far does vanilla move from itself?

1. ``mx.quantized_matmul`` on the shapes of FLUX.1-dev's linears (tokens 1 to 4608, 3072 <-> 12288), the same
   inputs five times, each evaluated alone: bit-identical? The same for the bfloat16 matmul beside it.
2. Full-size random FLUX.1-dev quantized to QUANT bits, SIZE x SIZE, STEPS steps: vanilla and the proxy with
   every step computed (proxy-all), interleaved REPEATS times after a warm-up of each; every run's final
   latents against every other's (max-abs and relative RMS): vanilla against vanilla beside proxy against
   vanilla.

    QUANT=8 PYTHONPATH=. python3 results/cuda-nvidia-h200/quantized-noop/measure.py STEPS SIZE REPEATS OUT.json

``KEEP_BF16=x_embedder`` (comma-separated layer paths) swaps those quantized linears for bfloat16 ones holding
their dequantized weights after the build: the same values, through the bfloat16 matmul instead of the
quantized kernel.
"""

import datetime as dt  # noqa: I001
import itertools
import json
import os
import sys
import time
import warnings
from importlib import metadata

import teacache  # noqa: F401
import mlx.core as mx
import mlx.nn as nn
from mlx.utils import tree_unflatten

from bench.timing import fullsize_measure as fs
from calib.run.generation import generate
from calib.run.interleave import interleave
from teacache import apply_teacache
from teacache.models import fullsize
from teacache.rescale import RescaleFunction

STEPS, SIZE, REPEATS = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
QUANT = int(os.environ["QUANT"])
BLOCKS = int(os.environ["BLOCKS"]) if os.environ.get("BLOCKS") else None  # smoke tests only
GROUP = 64  # mflux's quantization (nn.quantize's default group size)
KEEP_BF16 = [name for name in os.environ.get("KEEP_BF16", "").split(",") if name]


def keep_bfloat16(transformer, names: list[str]) -> None:
    """Replace each named QuantizedLinear by a bfloat16 Linear with its dequantized weight (and its bias)."""
    layers = dict(transformer.named_modules())
    for name in names:
        q = layers[name]
        weight = mx.dequantize(q.weight, q.scales, q.biases, q.group_size, q.bits).astype(mx.bfloat16)
        linear = nn.Linear(weight.shape[1], weight.shape[0], bias="bias" in q)
        linear.weight = weight
        if "bias" in q:
            linear.bias = q.bias
        transformer.update_modules(tree_unflatten([(name, linear)]))
    mx.eval(transformer.parameters())


def _diff(a: mx.array, b: mx.array) -> dict:
    d = (a.astype(mx.float32) - b.astype(mx.float32)).reshape(-1)
    ref = b.astype(mx.float32).reshape(-1)
    return {
        "equal": bool(mx.array_equal(a, b).item()),
        "max_abs": float(mx.max(mx.abs(d)).item()),
        "rel_rms": float((mx.sqrt(mx.mean(d * d)) / mx.sqrt(mx.mean(ref * ref))).item()),
    }


def kernel_check() -> list[dict]:
    rows = []
    for m, (k, n) in itertools.product((1, 16, 512, 4608), ((3072, 3072), (3072, 12288), (12288, 3072))):
        w = (mx.random.normal((n, k), key=mx.random.key(1)) * 0.02).astype(mx.bfloat16)
        x = mx.random.normal((1, m, k), key=mx.random.key(2)).astype(mx.bfloat16)
        wq, scales, biases = mx.quantize(w, group_size=GROUP, bits=QUANT)
        mx.eval(w, x, wq, scales, biases)
        for op in ("quantized_matmul", "matmul_bf16"):
            outs = []
            for _ in range(5):
                if op == "quantized_matmul":
                    out = mx.quantized_matmul(x, wq, scales, biases, True, GROUP, QUANT)
                else:
                    out = x @ w.T
                mx.eval(out)
                outs.append(out)
            diffs = [_diff(o, outs[0]) for o in outs[1:]]
            rows.append({"op": op, "bits": QUANT, "m": m, "k": k, "n": n,
                         "all_equal": all(d["equal"] for d in diffs),
                         "max_abs": max(d["max_abs"] for d in diffs)})  # fmt: skip
            print(json.dumps(rows[-1]), flush=True)
    return rows


kernels = kernel_check() if BLOCKS is None else []
t0 = time.perf_counter()
model = fullsize.build_random("random-flux1-dev", seed=0, quantize=QUANT, blocks=BLOCKS)
keep_bfloat16(model.transformer, KEEP_BF16)
build_s = time.perf_counter() - t0
print(f"built in {build_s:.0f} s (quantize {QUANT})", flush=True)
rescale = RescaleFunction((1.0, 0.0), provenance={"source": "identity"})
PROXY_ALL = {"rel_l1_thresh": 1.0, "coefficients": rescale, "skip_first_n_steps": STEPS}


def arm(proxy: bool):
    def run():
        mx.synchronize()
        kw = {"prompt": fs.PROMPT, "seed": fs.SEED, "steps": STEPS, "width": SIZE, "height": SIZE, "guidance": 3.5}
        if not proxy:
            out = generate(model, **kw)
        else:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                with apply_teacache(model, **PROXY_ALL):
                    out = generate(model, **kw)
        mx.synchronize()
        return {"loop_s": out.loop_s, "latents": out.latents}

    return run


ARMS = {"vanilla": arm(False), "proxy-all": arm(True)}
names = list(ARMS)
runs = [(f"{name}-warm", ARMS[name]()) for name in names]
results = interleave(lambda turn: ARMS[names[turn.arm]](), len(names), REPEATS)
for name, arm_runs in zip(names, results, strict=True):
    runs += [(f"{name}-{i}", r) for i, r in enumerate(arm_runs)]
pairs = []
for (na, a), (nb, b) in itertools.combinations(runs, 2):
    pairs.append({"a": na, "b": nb, **_diff(a["latents"], b["latents"])})
out = {
    "_meta": {"steps": STEPS, "size": SIZE, "repeats": REPEATS, "quantize": QUANT, "group_size": GROUP,
              "blocks": BLOCKS, "kept_bfloat16": KEEP_BF16, "mlx": mx.__version__, "device": str(mx.default_device()), "build_s": build_s,
              "mflux": metadata.version("mflux"), "measured_at": dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")},
    "kernels": kernels,
    "loop_s": {n: round(r["loop_s"], 3) for n, r in runs},
    "pairs": pairs,
}  # fmt: skip
for p in pairs:
    print(json.dumps(p), flush=True)
with open(sys.argv[4], "w") as handle:
    json.dump(out, handle, indent=1)
