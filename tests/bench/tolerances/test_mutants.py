"""Every mutant the gap check installs runs through a real generation (fast lane): a mutant that breaks on the
controller's own interface would make the gap check die before it measures anything."""

from __future__ import annotations

import warnings

import mlx.core as mx
import pytest

from bench.tolerances.gapcheck import _force_restore
from bench.tolerances.mutants import MUTANTS, apply_mutant, leftovers
from teacache import apply_teacache
from teacache.gate import GateConfig
from teacache.rescale import RescaleFunction

STEPS = 8
SETTINGS = {"num_inference_steps": STEPS, "height": 128, "width": 128}


def _run(model, generate, mutant=None):
    config = GateConfig(0.3, RescaleFunction((1.0, 0.0)))
    original = model.transformer
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if mutant is None:
            handle = apply_teacache(model, config.rel_l1_thresh, config.rescale)
        else:
            handle = apply_mutant(model, mutant, config)
        try:
            latents = generate(seed=2, **SETTINGS)
        finally:
            handle.restore()
            left = leftovers(model, original)
            _force_restore(model, original)
    assert bool(left) == (mutant is not None and mutant.leaky_restore), left
    return latents, handle.stats


@pytest.mark.parametrize("mutant", MUTANTS, ids=lambda m: m.name)
def test_each_mutant_generates_and_differs_from_the_correct_wrapper_where_it_should(tiny_flux1, flux1_generate, mutant):
    correct, correct_stats = _run(tiny_flux1, flux1_generate)
    latents, stats = _run(tiny_flux1, flux1_generate, mutant)
    assert correct_stats.skipped > 0  # the setting skips, so the mutants have something to break
    assert mx.all(mx.isfinite(latents)).item()
    assert stats.computed + stats.skipped == STEPS
    if mutant.name == "never-engages":
        assert stats.skipped == 0
    elif mutant.name in ("stale-residual", "wrong-tokens", "tail-twice"):
        assert not mx.array_equal(latents, correct).item()
    elif mutant.name == "leaky-restore":
        assert mx.array_equal(latents, correct).item()
