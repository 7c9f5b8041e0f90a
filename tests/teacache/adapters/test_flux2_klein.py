"""FLUX.2 Klein on mflux's real Flux2Klein.generate_image (tiny-flux2): oracles and CFG pairing."""

from __future__ import annotations

import warnings

import mlx.core as mx

from bench.quality.metrics import latent_metrics
from teacache import apply_teacache
from tests.conftest import make_generate
from tests.teacache.adapters import IDENTITY


def test_proxy_in_compiled_segments_is_bit_exact_and_restores_exactly(klein):
    """The proxy's compiled head / body / tail with every step computed: bit-exact with mflux's compiled
    predict (measured on this CPU, seeds 0-2 at guidance 1 and 0-1 at guidance 3; and on the H200 for the
    full-size Klein base 4B, results/cuda-nvidia-h200/fullsize)."""
    model, generate = klein
    before = generate(seed=2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with apply_teacache(model, rel_l1_thresh=0.3, coefficients=IDENTITY, skip_first_n_steps=10) as handle:
            wrapped = generate(seed=2)
    assert handle.stats.skipped == 0
    assert mx.array_equal(wrapped, before).item(), latent_metrics(wrapped, before)
    assert mx.array_equal(before, generate(seed=2)).item()


def test_skipping_changes_the_output_and_restore_is_exact(klein):
    model, generate = klein
    before = generate(seed=3)
    with apply_teacache(model, rel_l1_thresh=0.3, coefficients=IDENTITY) as handle:
        cached = generate(seed=3)
    assert handle.stats.skipped > 0 and not mx.array_equal(before, cached).item()
    assert 0 not in handle.stats.skipped_steps and 9 not in handle.stats.skipped_steps
    assert mx.array_equal(before, generate(seed=3)).item()


def test_cfg_one_decision_per_step_and_one_residual_per_branch(klein):
    model, _ = klein
    generate = make_generate(model, num_inference_steps=10, height=128, width=128, guidance=3.0)
    with apply_teacache(model, rel_l1_thresh=0.3, coefficients=IDENTITY) as handle:
        generate(seed=4)
        assert handle.cached_branches == [0, 1]
    assert len(handle.stats.log) == 10 and handle.stats.computed + handle.stats.skipped == 10
