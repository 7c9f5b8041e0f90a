"""The quantized no-op of full-size FLUX.1-dev on a GPU, against the bounds measured on this hardware.

Quantized FLUX.1 on CUDA is not bit-exact even vanilla against vanilla (results/cuda-nvidia-h200/quantized-noop/
RUN.md), so there the oracle is a measured bound: the tolerance module of this hardware holds, per bit width, the
settings ``measure.py`` ran at and upper bounds on the max-abs and relative RMS of proxy / vanilla final latents
(``FULLSIZE_FLUX1_DEV_Q<bits>_NOOP_*``, from ``teacache-bench tolerances --quantized-noop``). The model is built as
measure.py built it, vanilla and the proxy with every step computed run twice each, interleaved, and every proxy /
vanilla pair must lie within both bounds; the message gives vanilla / vanilla beside it. ``make test-gpu``.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from bench.tolerances import noop_pairs
from tests.tolerances import load_tolerances, quantized_noop_bounds

pytestmark = pytest.mark.gpu
REPEATS = 2  # runs of each arm: 4 proxy / vanilla pairs and 1 vanilla / vanilla pair


def _build(settings: dict):
    """Full-size random FLUX.1-dev as measure.py built it: quantized as mflux does, the named linears kept."""
    from mlx import nn

    from teacache.models import fullsize

    model = fullsize.build_random(settings["model"], seed=settings["model_seed"], quantize=settings["quantize"])
    fullsize.keep_bfloat16(model.transformer, list(settings["kept_bfloat16"]))
    groups = {m.group_size for _, m in model.transformer.named_modules() if isinstance(m, nn.QuantizedLinear)}
    assert groups == {settings["group_size"]}, (
        f"mflux quantized with group sizes {sorted(groups)}, the bounds were measured at {settings['group_size']}: "
        "measure and derive them again (docs/tolerances.md: The quantized no-op at full size)"
    )
    return model


def _final_latents(model, settings: dict) -> dict[str, np.ndarray]:
    """vanilla-0, proxy-all-0, vanilla-1, ...: each run's final latents, the proxy computing every step."""
    import mlx.core as mx

    from bench.timing import fullsize_measure
    from calib.run.generation import generate
    from teacache import apply_teacache
    from teacache.rescale import RescaleFunction

    steps, size = settings["steps"], settings["size"]
    kwargs = {"prompt": fullsize_measure.PROMPT, "seed": fullsize_measure.SEED, "steps": steps, "width": size,
              "height": size, "guidance": settings["guidance"]}  # fmt: skip
    identity = RescaleFunction((1.0, 0.0), provenance={"source": "identity"})
    proxy_all = {"rel_l1_thresh": 1.0, "coefficients": identity, "skip_first_n_steps": steps}
    latents = {}
    for repeat in range(REPEATS):
        mx.synchronize()
        latents[f"vanilla-{repeat}"] = generate(model, **kwargs).latents
        mx.synchronize()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the proxy warns that it never skips: that is the point here
            with apply_teacache(model, **proxy_all) as handle:
                latents[f"proxy-all-{repeat}"] = generate(model, **kwargs).latents
                assert handle.stats.skipped == 0
        mx.synchronize()
    return {name: np.asarray(value.astype(mx.float32)) for name, value in latents.items()}


@pytest.mark.parametrize("bits", [8, 4])
def test_the_proxy_computing_every_step_stays_within_the_measured_quantized_noop(bits, full_size_gpu):
    import mlx.core as mx

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a hardware without a module: the lookup below says what to do
        tolerances = load_tolerances()
    try:
        bounds = quantized_noop_bounds(tolerances, bits)
    except LookupError as exc:
        pytest.fail(str(exc))
    model = _build(bounds["settings"])
    try:
        pairs = noop_pairs.differences(_final_latents(model, bounds["settings"]))
    finally:
        del model
        mx.clear_cache()
    verdict = noop_pairs.check(pairs, bounds["max_abs"], bounds["rel_rms"])
    print(f"{bits} bits: {verdict.message}")
    assert verdict.ok, f"{bits}-bit quantized no-op, {tolerances.__name__}: {verdict.message}"
