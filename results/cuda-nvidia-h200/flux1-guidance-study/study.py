"""Does guidance make tiny-open-flux1 follow its caption's shape, and curve its flow early?

    python study.py run WEIGHTS OUT.npz cfg|embed VALUES [STEPS]   # on the GPU: per-step y and images
    python study.py score OUT.npz ...                              # on the CPU: adherence per value
    python study.py probe WEIGHTS HEADS                            # either: one pass, seed 0, guidance 3.5

``cfg``: classifier-free guidance at each scale (two branches, empty caption); ``embed``: one pass with
FLUX.1's guidance input at each value (a guidance-distilled student). Euler along mflux's FLUX.1-dev
sigmas at 256x256, the 48 evaluation captions of ``open_data.evaluation_specs``, seeds 0 and 1.
"""

import sys
import time

import mlx.core as mx
import numpy as np
from mflux.models.common.config.config import Config
from mflux.models.common.config.model_config import ModelConfig

from teacache.models import flux1_latents, open_data, open_models


def score(paths):
    from bench.quality.open_adherence import check, summarize
    from teacache.models.open_data import parse_prompt

    for path in paths:
        d = np.load(path)
        specs = [parse_prompt(str(p)) for p in d["prompts"]]
        for key in sorted(k for k in d.files if k.startswith("images_")):
            imgs = d[key].astype(np.float32)  # (2 seeds, n, 64, 64, 3)
            res = summarize([check(im, sp) for seed in imgs for im, sp in zip(seed, specs, strict=True)])
            spread = float(np.mean(np.abs(imgs[0] - imgs[1])))
            print(path, key, " ".join(f"{k} {v:.3f}" for k, v in res.items()), f"seed-diff {spread:.3f}")


def probe(weights: str, heads: int) -> None:
    """A model of ``heads`` heads at width 128 (weights only, no manifest): adherence and dynamics at once."""
    from bench.quality.open_adherence import check, summarize

    ModelConfig.precision = mx.float32
    arch = open_models.FAMILIES["flux1"].architecture
    arch = {**arch, "transformer": {**arch["transformer"], "heads": heads, "head_dim": 128 // heads}}
    model = open_models.build("flux1", architecture=arch)
    model.load_weights(weights, strict=True)
    cfg = Config(width=256, height=256, guidance=3.5, scheduler="linear", model_config=ModelConfig.dev(),
                 num_inference_steps=28)  # fmt: skip
    sig = np.array(cfg.scheduler.sigmas)
    specs = open_data.evaluation_specs(48)
    n = len(specs)
    model.set_batch_size(n)
    rot = open_models.flux1_rotary(model.transformer)
    tok = mx.array(np.stack([open_data.tokenize(s.prompt) for s in specs]))
    x = mx.random.normal((n, 256, 64), key=mx.random.key(0))
    prev, ys = None, []
    for t in range(28):
        v = model.velocity(x, tok, mx.full((n,), float(sig[t])), mx.full((n,), 3.5), rot)
        if prev is not None:
            ys.append(np.array(mx.mean(mx.abs(v - prev), axis=(1, 2)) / mx.mean(mx.abs(prev), axis=(1, 2))))
        prev = v
        x = x + float(sig[t + 1] - sig[t]) * v
        mx.eval(x, prev)
    ys, frac = np.array(ys), np.arange(1, 28) / 28
    side = flux1_latents.TOKEN_SIDE
    lat = (x / open_data.LATENT_SCALE).reshape(n, side, side, 16, 2, 2).transpose(0, 3, 1, 4, 2, 5)
    imgs = np.array(flux1_latents.from_latents(lat.reshape(n, 16, 2 * side, 2 * side))).transpose(0, 2, 3, 1)
    res = summarize([check(im, sp) for im, sp in zip(imgs, specs, strict=True)])
    parts = [np.median(ys[m]) for m in (frac < 1 / 7, (frac >= 3 / 7) & (frac < 4 / 7), frac >= 6 / 7)]
    print(" ".join(f"{k} {v:.3f}" for k, v in res.items()), "| y by seventh", " / ".join(f"{p:.3f}" for p in parts))


if sys.argv[1] == "probe":
    probe(sys.argv[2], int(sys.argv[3]))
    raise SystemExit(0)
if sys.argv[1] == "score":
    score(sys.argv[2:])
    raise SystemExit(0)
weights, out, mode, values = sys.argv[2], sys.argv[3], sys.argv[4], [float(v) for v in sys.argv[5].split(",")]
steps = int(sys.argv[6]) if len(sys.argv) > 6 else 28
ModelConfig.precision = mx.float32
model, _ = open_models._checked("flux1", weights, None)
cfg = Config(
    width=256, height=256, guidance=3.5, scheduler="linear", model_config=ModelConfig.dev(), num_inference_steps=steps
)
sig = np.array(cfg.scheduler.sigmas)
specs = open_data.evaluation_specs(48)
n = len(specs)
model.set_batch_size(2 * n)
rot = open_models.flux1_rotary(model.transformer)
cap = mx.array(np.stack([open_data.tokenize(s.prompt) for s in specs]))
tok = mx.concatenate([cap, mx.zeros_like(cap)])
T = flux1_latents.TOKEN_SIDE
result = {"prompts": np.array([s.prompt for s in specs]), "sigmas": sig}
for value in values:
    t0 = time.time()
    w, g = (value, 1.0) if mode == "cfg" else (1.0, value)
    images = []
    ys_all = []
    for seed in (0, 1):
        x = mx.random.normal((n, 256, 64), key=mx.random.key(seed))
        prev, ys = None, []
        for t in range(steps):
            s = mx.full((2 * n,), float(sig[t]))
            v = model.velocity(mx.concatenate([x, x]), tok, s, mx.full((2 * n,), g), rot)
            vc, vu = v[:n], v[n:]
            v = vu + w * (vc - vu)
            if prev is not None:
                ys.append(np.array(mx.mean(mx.abs(v - prev), axis=(1, 2)) / mx.mean(mx.abs(prev), axis=(1, 2))))
            prev = v
            x = x + float(sig[t + 1] - sig[t]) * v
            mx.eval(x, prev)
        lat = (
            (x / open_data.LATENT_SCALE)
            .reshape(n, T, T, 16, 2, 2)
            .transpose(0, 3, 1, 4, 2, 5)
            .reshape(n, 16, 2 * T, 2 * T)
        )
        images.append(np.array(flux1_latents.from_latents(lat)).transpose(0, 2, 3, 1).astype(np.float16))
        ys_all.append(np.array(ys))
    ys = np.concatenate(ys_all, axis=1)
    frac = np.arange(1, steps) / steps
    parts = [np.median(ys[m]) for m in (frac < 1 / 7, (frac >= 3 / 7) & (frac < 4 / 7), frac >= 6 / 7)]
    print(
        f"{mode} {value}: first {parts[0]:.3f} mid {parts[1]:.3f} last {parts[2]:.3f} ({time.time() - t0:.1f} s)",
        flush=True,
    )
    result[f"images_{value}"] = np.stack(images)
    result[f"ys_{value}"] = ys
np.savez_compressed(out, **result)
