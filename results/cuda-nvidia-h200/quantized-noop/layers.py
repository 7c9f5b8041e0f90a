"""Every quantized linear shape of FLUX.1-dev (one block of each kind, full width): the same input five times,
a dirty buffer of the output's size handed back by the allocator between calls; then whole generations."""

import json  # noqa: I001
import os
import sys
import teacache  # noqa: F401
import mlx.core as mx
import mlx.nn as nn

from bench.timing import fullsize_measure as fs
from calib.run.generation import generate
from teacache.models import fullsize

BITS = int(os.environ["QUANT"])
out_rows = []
model = fullsize.build_random("random-flux1-dev", seed=0, quantize=BITS, blocks=1)
shapes = {}
for name, mod in model.transformer.named_modules():
    if isinstance(mod, nn.QuantizedLinear):
        n, kq = mod.weight.shape
        shapes.setdefault((mod.group_size, mod.bits, n, mod.scales.shape[1] * mod.group_size), name)
print("quantized linear shapes", len(shapes), flush=True)
for (gs, bits, n, k), name in sorted(shapes.items()):
    mod = dict(model.transformer.named_modules())[name]
    for m in (1, 512, 4096, 4608):
        x = mx.random.normal((1, m, k), key=mx.random.key(2)).astype(mx.bfloat16)
        mx.eval(x)
        outs = []
        for i in range(5):
            junk = mx.random.normal((1, m, n), key=mx.random.key(100 + i)).astype(mx.bfloat16) * 1e3
            mx.eval(junk)
            del junk
            y = mod(x)
            mx.eval(y)
            outs.append(y)
        eq = all(bool(mx.array_equal(o, outs[0]).item()) for o in outs[1:])
        mad = max(float(mx.max(mx.abs(o.astype(mx.float32) - outs[0].astype(mx.float32))).item()) for o in outs[1:])
        row = {"layer": name, "bits": bits, "group": gs, "m": m, "k": k, "n": n, "all_equal": eq, "max_abs": mad}
        out_rows.append(row)
        print(json.dumps(row), flush=True)
gens = []
for i in range(3):
    g = generate(model, prompt=fs.PROMPT, seed=fs.SEED, steps=4, width=512, height=512, guidance=3.5)
    mx.eval(g.latents)
    gens.append(g.latents)
gen_eq = [bool(mx.array_equal(g, gens[0]).item()) for g in gens]
gen_mad = [float(mx.max(mx.abs(g - gens[0])).item()) for g in gens]
print("generations (1 block of each kind, 512 px, 4 steps) equal to the first:", gen_eq, gen_mad, flush=True)
json.dump({"bits": BITS, "mlx": mx.__version__, "layers": out_rows, "generations_equal": gen_eq,
           "generations_max_abs": gen_mad}, open(sys.argv[1], "w"), indent=1)
