"""First-Block Cache through each family's proxy: off is vanilla bit for bit, restore is exact, and the live
decisions are the replay's on the block-0 residuals the generation computed."""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest

from teacache.fbcache import FBCacheConfig, apply_fbcache, ideal_speedup, replay
from teacache.signal import rel_l1
from tests.teacache.adapters import FAMILY_FIXTURES, STEPS, untouched

EVERY_FAMILY = pytest.mark.parametrize("family", list(FAMILY_FIXTURES), indirect=True)


@EVERY_FAMILY
def test_threshold_zero_swaps_nothing_and_is_bit_exact(family):
    model, generate = family
    original = model.transformer
    before = generate(seed=1)
    with apply_fbcache(model, threshold=0.0) as handle:
        assert model.transformer is original and "_predict" not in vars(model)
        wrapped = generate(seed=1)
        assert handle.cache_bytes == 0
    after = generate(seed=1)
    assert mx.array_equal(before, wrapped).item() and mx.array_equal(before, after).item()
    assert handle.stats.computed == STEPS and handle.stats.skipped == 0 and handle.ideal_speedup == 1.0
    assert untouched(model, original)


def _spy_signals(handle) -> dict[int, mx.array]:
    """The block-0 residual each decision of the generation read, by step."""
    ctl = handle._controller
    signals: dict[int, mx.array] = {}
    decide = ctl._decide

    def spy(signal, step, while_reading=None):
        signals[step] = signal
        return decide(signal, step, while_reading)

    ctl._decide = spy
    return signals


@EVERY_FAMILY
def test_the_live_rule_is_its_replay_and_restore_is_exact(family):
    model, generate = family
    original = model.transformer
    vanilla = generate(seed=4)
    with apply_fbcache(model, threshold=10.0, max_consecutive_skips=0) as probe:  # never skips: the changes
        generate(seed=4)
    threshold = float(np.median([d.x for d in probe.stats.log if d.x is not None]))
    with apply_fbcache(model, threshold=threshold, max_consecutive_skips=3) as handle:
        assert not untouched(model, original)
        signals = _spy_signals(handle)
        cached = generate(seed=4)
    assert untouched(model, original)  # restored exactly
    assert mx.array_equal(generate(seed=4), vanilla).item()  # and nothing of it left behind
    log = handle.stats.log
    assert sorted(signals) == list(range(STEPS)) and 0 < handle.stats.skipped < STEPS
    changes = np.full((STEPS, STEPS), np.nan)
    for t in range(STEPS):
        for s in range(t):
            changes[t, s] = rel_l1(signals[t], signals[s]).item()
    replayed = replay(FBCacheConfig(threshold, max_consecutive_skips=3), changes)
    assert [d.compute for d in replayed] == [d.compute for d in log]
    assert [d.x for d in replayed] == [d.x for d in log]  # the same changes, bit for bit
    assert handle.ideal_speedup == ideal_speedup(STEPS, handle.stats.skipped, handle.num_blocks) > 1.0
    assert not mx.array_equal(cached, vanilla).item() and mx.all(mx.isfinite(cached)).item()


def test_forecast_extrapolates_the_remaining_blocks_residual(flux1):
    model, generate = flux1
    original = model.transformer
    with apply_fbcache(model, threshold=10.0, max_consecutive_skips=2) as reuse:
        reused = generate(seed=2)
    with apply_fbcache(model, threshold=10.0, max_consecutive_skips=2, forecast=True) as forecast:
        forecast_out = generate(seed=2)
    assert [d.compute for d in reuse.stats.log] == [d.compute for d in forecast.stats.log]  # the cap decides
    assert forecast.stats.skipped > 0 and untouched(model, original)
    assert not mx.array_equal(reused, forecast_out).item() and mx.all(mx.isfinite(forecast_out)).item()


def test_a_second_rule_on_the_same_pipeline_is_refused(flux1):
    from teacache.errors import StateError

    model, _ = flux1
    original = model.transformer
    with apply_fbcache(model, threshold=0.5), pytest.raises(StateError, match="already applied"):
        apply_fbcache(model, threshold=0.5)
    assert untouched(model, original)
