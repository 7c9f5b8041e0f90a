"""Real FLUX weights: parity and quality on the models users run. ``make test-real``.

Needs the weights in the local Hugging Face cache (mflux's own loader finds them there); every test
skips with the reason otherwise. The quality test uses the tolerances measured for the variant on this
hardware (``teacache-bench campaign`` + ``tolerances`` with the real model) and skips when none exist:
no tolerance is ever guessed.
"""

from __future__ import annotations

import mlx.core as mx
import pytest

import teacache
from bench.quality.metrics import image_metrics
from bench.tolerances.derive import check_run, prefix
from calib.run.generation import generate
from teacache.revisions import local_revision

pytestmark = pytest.mark.real_weights

MODELS = {
    "flux1-dev": ("dev", "black-forest-labs/FLUX.1-dev"),
    "flux1-schnell": ("schnell", "black-forest-labs/FLUX.1-schnell"),
}
PROMPT = "a red apple on a wooden table"


@pytest.fixture(scope="module", params=sorted(MODELS))
def real_model(request):
    name, repo = MODELS[request.param]
    if local_revision(repo) is None:
        pytest.skip(f"{repo} is not in the local Hugging Face cache")
    return request.param, teacache.load_model(name)


def _settings(variant):
    steps = 4 if variant == "flux1-schnell" else 20
    return (PROMPT, 42, steps, 512, 512, 0.0 if variant == "flux1-schnell" else 3.5)


def test_threshold_zero_and_the_active_proxy_are_bit_exact(real_model):
    variant, model = real_model
    args = _settings(variant)
    before = generate(model, *args)
    with teacache.apply_teacache(model, rel_l1_thresh=0.0):
        fast = generate(model, *args)
    with teacache.apply_teacache(model, skip_first_n_steps=args[2]) as handle:
        proxy = generate(model, *args)
    after = generate(model, *args)
    assert handle.stats.skipped == 0
    for other in (fast, proxy, after):
        assert mx.array_equal(before.latents, other.latents).item()


def test_quality_and_skips_inside_the_measured_bounds(real_model, tolerances):
    variant, model = real_model
    if not hasattr(tolerances, f"{prefix(variant)}_SKIP_BAND"):
        pytest.skip(f"no tolerances measured for {variant} on this hardware ({tolerances.__name__})")
    settings = getattr(tolerances, f"{prefix(variant)}_SETTINGS")
    width, height = (int(v) for v in settings["resolution"].split("x"))
    args = (PROMPT, 42, settings["steps"], width, height, settings["guidance"])
    vanilla = generate(model, *args)
    with teacache.apply_teacache(model, rel_l1_thresh=settings["threshold"]) as handle:
        cached = generate(model, *args)
    verdict = check_run(
        tolerances, variant, {"skipped": handle.stats.skipped, **image_metrics(cached.image, vanilla.image)}
    )
    assert all(verdict.values()), verdict
