"""tiny-open-flux1 under any-shape captions: median y by seventh of the schedule and held-out adherence, on the CPU.

python probe.py committed W[,W...]      the committed weights, word for word under any-shape captions, with
                                        classifier-free guidance at each scale W against the empty caption
python probe.py DIR G                   a run of train_open --captions any-shape (its final weights, else its
                                        checkpoint's), one pass per step at guidance input G

12 held-out captions (open_data.evaluation_specs) x seeds 0 and 1, 28 Euler steps on FLUX.1-dev's sigmas at the
nominal 256x256 (what mflux's Flux1 pipeline runs); y = mean|v_t - v_t-1| / mean|v_t-1| per image. One JSON line.
"""

import teacache  # noqa: F401  (first: the OpenBLAS preload)

# isort: split
import json
import sys
from pathlib import Path

import mlx.core as mx
import numpy as np
from mflux.models.common.config.config import Config
from mflux.models.common.config.model_config import ModelConfig
from mlx.utils import tree_unflatten

from bench.quality.open_adherence import check, summarize
from teacache.models import flux1_latents, open_data, open_models, train_open

N, STEPS = 12, 28
ModelConfig.precision = mx.float32
layout = open_models.layout_with("flux1", "any-shape")
model = open_models.build("flux1", architecture=layout.architecture)
if sys.argv[1] == "committed":
    train_open.init_weights(model, open_models.FAMILIES["flux1"].folder / layout.weights_name, layout.captions.vocab)
    source, scales, guidance_input = "committed, word for word", [float(w) for w in sys.argv[2].split(",")], 1.0
else:
    run = Path(sys.argv[1])
    if (run / layout.manifest_name).exists():
        model.load_weights(str(run / layout.weights_name), strict=True)
        source = f"final {json.loads((run / layout.manifest_name).read_text())['weights']['sha256'][:12]}"
    else:
        arrays = mx.load(str(run / "checkpoint" / "state.safetensors"))
        model.update(tree_unflatten([(k[6:], v) for k, v in arrays.items() if k.startswith("model.")]))
        source = f"checkpoint at step {json.loads((run / 'checkpoint' / 'progress.json').read_text())['done']}"
    scales, guidance_input = [1.0], float(sys.argv[2])
sigmas = np.array(Config(width=256, height=256, guidance=3.5, scheduler="linear", model_config=ModelConfig.dev(),
                         num_inference_steps=STEPS).scheduler.sigmas)  # fmt: skip
specs = open_data.evaluation_specs(N, captions=layout.captions)
caption = mx.array(np.stack([open_data.tokenize(s.prompt, layout.name, layout.captions) for s in specs]))
rotary = open_models.flux1_rotary(model.transformer)


def images(x):
    t = flux1_latents.TOKEN_SIDE
    latents = (x / open_data.LATENT_SCALE).reshape(N, t, t, 16, 2, 2).transpose(0, 3, 1, 4, 2, 5)
    return np.array(flux1_latents.from_latents(latents.reshape(N, 16, 32, 32))).transpose(0, 2, 3, 1)


for w in scales:
    model.set_batch_size(N if w == 1.0 else 2 * N)
    ys, results = [], []
    for seed in (0, 1):
        x = mx.random.normal((N, 256, 64), key=mx.random.key(seed))
        previous, per_step = None, []
        for t in range(STEPS):
            s = mx.full((N,), float(sigmas[t]))
            if w == 1.0:
                v = model.velocity(x, caption, s, mx.full((N,), guidance_input), rotary)
            else:
                both = model.velocity(mx.concatenate([x, x]), mx.concatenate([caption, mx.zeros_like(caption)]),
                                      mx.concatenate([s, s]), mx.ones((2 * N,)), rotary)  # fmt: skip
                v = both[N:] + w * (both[:N] - both[N:])
            if previous is not None:
                per_step.append(
                    np.array(mx.mean(mx.abs(v - previous), axis=(1, 2)) / mx.mean(mx.abs(previous), axis=(1, 2)))
                )
            previous = v
            x = x + float(sigmas[t + 1] - sigmas[t]) * v
            mx.eval(x, previous)
        ys.append(np.array(per_step))
        results += [check(open_data.to_uint8(im), sp) for im, sp in zip(images(x), specs, strict=True)]
    y = np.concatenate(ys, axis=1)
    part = np.arange(1, STEPS) / STEPS
    medians = [float(np.median(y[m])) for m in (part < 1 / 7, (part >= 3 / 7) & (part < 4 / 7), part >= 6 / 7)]
    scores = {k: round(v, 3) for k, v in summarize(results).items() if v == v}
    print(json.dumps({"weights": source, "cfg": w, "guidance_input": guidance_input, "y_first_middle_last":
                      [round(m, 3) for m in medians], **scores}), flush=True)  # fmt: skip
