"""The no-op oracles, run by the drift command where hooked code changed: does the integration still hold?

On the family's embedded model in float32, in one process: (1) threshold 0 is bit-exact with vanilla;
(2) the proxy installed but never skipping (every step inside ``skip_first_n_steps``) is bit-exact with
vanilla where mflux runs the transformer uncompiled (FLUX.1, Qwen-Image) and within cosine 0.999 where the
proxy's compiled segments stand in for mflux's compiled predict (FLUX.2, Z-Image: max-abs 3.8e-6 to 4.5e-6
measured on this CPU, tests/test_z_image.py); (3) after restore, vanilla again bit for bit.
"""

from __future__ import annotations

import warnings

from calib.drift import numbers

COMPILED_COSINE = 0.999
IDENTITY = (1.0, 0.0)


def _cosine(a, b) -> float:
    import mlx.core as mx

    a, b = a.astype(mx.float32).reshape(-1), b.astype(mx.float32).reshape(-1)
    return float((mx.sum(a * b) / (mx.linalg.norm(a) * mx.linalg.norm(b) + 1e-30)).item())


def run_oracles(variant: str, steps: int = numbers.TINY["steps"], size: int = numbers.TINY["width"]) -> dict:
    """{"holds": bool, "checks": [{"name", "holds", "detail"}]}; an exception is the caller's to report."""
    import mlx.core as mx

    from calib.run.generation import generate
    from teacache import apply_teacache, variants

    guidance = variants.get(variant).generation.guidance
    args = (numbers.PROMPT, numbers.SEED, steps, size, size, guidance)
    checks = []
    with numbers.model_precision("float32"):
        model, _ = numbers.build(variant)
        vanilla = generate(model, *args).latents
        with apply_teacache(model, rel_l1_thresh=0.0):
            zero = generate(model, *args).latents
        equal = mx.array_equal(vanilla, zero).item()
        checks.append({"name": "threshold-0", "holds": bool(equal), "detail": "bit-exact" if equal else "differs"})
        gate = {"rel_l1_thresh": 0.3, "coefficients": IDENTITY, "skip_first_n_steps": steps}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with apply_teacache(model, **gate) as handle:
                compiled = "_predict" in vars(model)
                proxy = generate(model, *args).latents
        skipped = handle.stats.skipped
        if compiled:
            cosine = _cosine(proxy, vanilla)
            holds, detail = cosine > COMPILED_COSINE and skipped == 0, f"compiled segments, cosine {cosine:.7f}"
        else:
            holds = bool(mx.array_equal(vanilla, proxy).item()) and skipped == 0
            detail = "bit-exact" if holds else "differs"
        checks.append({"name": "proxy-never-skipping", "holds": holds, "detail": f"{detail}, {skipped} skipped"})
        after = generate(model, *args).latents
        restored = bool(mx.array_equal(vanilla, after).item())
        checks.append({"name": "restore", "holds": restored, "detail": "bit-exact" if restored else "differs"})
    return {"variant": variant, "holds": all(c["holds"] for c in checks), "checks": checks}
