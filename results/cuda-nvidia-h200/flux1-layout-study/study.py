"""FLUX.1 open-scenes layouts head to head: train (time-limited) then probe adherence and dynamics.

EXP_VARIANT=px32|big64|base64 python study.py train ARGS...   (train_open's argv)
python study.py probe VARIANT OUTDIR HEADS                  (prints one JSON line)
python study.py sensitivity flux1|flux2                     (CPU: the committed model's x0 per caption word)

px32: FLUX.1's latent layout at 32 px, one pixel per latent position (3 of 16 channels), so a token holds
2x2 pixels as tiny-open-flux2's does; big64: the 64-px layout with every object drawn larger; base64: the
committed layout and data.
"""

import dataclasses
import json
import os
import sys

import numpy as np

from teacache.models import flux1_latents, open_data, open_models

VARIANT = os.environ.get("EXP_VARIANT", "base64")


def _tokens32(images):
    """(B, 32, 32, 3) -> FLUX.1 tokens: one pixel per latent position (3 of 16 channels), 2x2 px per token."""
    b = images.shape[0]
    lat = np.zeros((b, 16, 32, 32), np.float32)
    lat[:, :3] = images.transpose(0, 3, 1, 2)
    return flux1_latents.pack(lat) * open_data.LATENT_SCALE


def apply(variant):
    lay = open_models.FAMILIES["flux1"]
    if variant == "px32":
        open_models.FAMILIES["flux1"] = dataclasses.replace(lay, image_size=32, to_tokens=_tokens32)
    elif variant == "big64":
        open_data.SIZE_RANGE = (0.2, 0.27)
        open_data.DISTRACTOR_SIZE_RANGE = (0.08, 0.14)


apply(VARIANT)  # top level: spawn workers re-run it


def to_images(x, variant):
    n = x.shape[0]
    t = flux1_latents.TOKEN_SIDE
    lat = (x / open_data.LATENT_SCALE).reshape(n, t, t, 16, 2, 2).transpose(0, 3, 1, 4, 2, 5).reshape(n, 16, 32, 32)
    if variant == "px32":
        return np.array(lat[:, :3].transpose(0, 2, 3, 1))
    return np.array(flux1_latents.from_latents(lat)).transpose(0, 2, 3, 1)


def probe(variant, outdir, heads):
    import mlx.core as mx
    from mflux.models.common.config.config import Config
    from mflux.models.common.config.model_config import ModelConfig
    from mlx.utils import tree_unflatten

    from bench.quality.open_adherence import check, summarize

    apply(variant)
    ModelConfig.precision = mx.float32
    arch = open_models.FAMILIES["flux1"].architecture
    arch = {**arch, "transformer": {**arch["transformer"], "heads": heads, "head_dim": 128 // heads}}
    model = open_models.build("flux1", architecture=arch)
    final = os.path.join(outdir, "tiny-open-flux1.safetensors")
    if os.path.exists(final):
        model.load_weights(final, strict=True)
        src = "final"
    else:
        arrays = mx.load(os.path.join(outdir, "checkpoint", "state.safetensors"))
        model.update(tree_unflatten([(k[6:], v) for k, v in arrays.items() if k.startswith("model.")]))
        mx.save_safetensors(final, {k[6:]: v for k, v in arrays.items() if k.startswith("model.")})
        with open(os.path.join(outdir, "checkpoint", "progress.json")) as progress:
            src = f"checkpoint at step {json.load(progress)['done']}"
    cfg = Config(
        width=256, height=256, guidance=3.5, scheduler="linear", model_config=ModelConfig.dev(), num_inference_steps=28
    )
    sig = np.array(cfg.scheduler.sigmas)
    specs = open_data.evaluation_specs(48)
    n = len(specs)
    rot = open_models.flux1_rotary(model.transformer)
    cap = mx.array(np.stack([open_data.tokenize(s.prompt) for s in specs]))
    out = {"variant": variant, "heads": heads, "weights": src}
    for w in (1.0, 3.0):
        model.set_batch_size(2 * n if w != 1.0 else n)
        ys_all, imgs_all = [], []
        for seed in (0, 1):
            x = mx.random.normal((n, 256, 64), key=mx.random.key(seed))
            prev, ys = None, []
            for t in range(28):
                s = float(sig[t])
                if w == 1.0:
                    v = model.velocity(x, cap, mx.full((n,), s), mx.full((n,), 3.5), rot)
                else:
                    vv = model.velocity(
                        mx.concatenate([x, x]),
                        mx.concatenate([cap, mx.zeros_like(cap)]),
                        mx.full((2 * n,), s),
                        mx.full((2 * n,), 1.0),
                        rot,
                    )
                    v = vv[n:] + w * (vv[:n] - vv[n:])
                if prev is not None:
                    ys.append(np.array(mx.mean(mx.abs(v - prev), axis=(1, 2)) / mx.mean(mx.abs(prev), axis=(1, 2))))
                prev = v
                x = x + float(sig[t + 1] - sig[t]) * v
                mx.eval(x, prev)
            ys_all.append(np.array(ys))
            imgs_all.append(to_images(x, variant))
        ys = np.concatenate(ys_all, axis=1)
        frac = np.arange(1, 28) / 28
        parts = [float(np.median(ys[m])) for m in (frac < 1 / 7, (frac >= 3 / 7) & (frac < 4 / 7), frac >= 6 / 7)]
        res = summarize([check(im, sp) for imgs in imgs_all for im, sp in zip(imgs, specs, strict=True)])
        out[f"w{w:g}"] = {"y_seventh": parts, **res, "seed_diff": float(np.mean(np.abs(imgs_all[0] - imgs_all[1])))}
        np.save(os.path.join(outdir, f"images_w{w:g}.npy"), np.stack(imgs_all).astype(np.float16))
    print(json.dumps(out), flush=True)


def sensitivity(family):
    """How much the committed model's estimate of the clean image moves when one caption word changes."""
    import mlx.core as mx
    from mflux.models.common.config.model_config import ModelConfig

    ModelConfig.precision = mx.float32
    model, _ = open_models._checked(family, None, None)
    caps = [
        "a red circle at the center",
        "a red square at the center",
        "a red triangle at the center",
        "a blue circle at the center",
        "a red circle at the left",
    ]
    n = len(caps)
    velocity = open_models.batched_velocity(model, family, n)
    tok = mx.array(np.stack([open_data.tokenize(c) for c in caps]))
    layout = open_models.FAMILIES[family]
    x0 = layout.to_tokens(
        open_data.render_batch([open_data.parse_prompt(caps[0])], np.random.default_rng(0), layout.image_size)
    )
    x0 = mx.array(np.repeat(x0, n, 0))
    eps = mx.repeat(mx.random.normal((1,) + x0.shape[1:], key=mx.random.key(1)), n, 0)
    for s in (0.9, 0.7, 0.5, 0.3):
        xt = (1 - s) * x0 + s * eps
        xhat = xt - s * velocity(model, xt, tok, mx.full((n,), s), mx.full((n,), 3.5))
        moved = [float(mx.mean(mx.abs(xhat[i] - xhat[0]))) for i in range(1, n)]
        print(
            f"{family} sigma {s}: "
            + ", ".join(f"{c.split(' ', 1)[1]} {m:.4f}" for c, m in zip(caps[1:], moved, strict=True))
        )


if __name__ == "__main__":
    if sys.argv[1] == "sensitivity":
        sensitivity(sys.argv[2])
    elif sys.argv[1] == "probe":
        probe(sys.argv[2], sys.argv[3], int(sys.argv[4]))
    else:
        from teacache.models import train_open

        raise SystemExit(train_open.main(sys.argv[2:]))
