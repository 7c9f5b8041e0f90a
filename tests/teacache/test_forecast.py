"""Forecast instead of reuse: a skipped step extrapolates the cached residual from the last two computed steps."""

from __future__ import annotations

import mlx.core as mx
import pytest

from teacache import apply_teacache
from teacache.errors import InputTypeError
from teacache.schedule import StaticSchedule, apply_schedule

STEPS = 10
SKIPPING = StaticSchedule.from_skipped(STEPS, [3, 5, 6, 8])  # computed 0, 1, 2, 4, 7, 9


def _watch(handle):
    """(step, returned) of every residual a skipped step reads, and (step, stored) of every one computed."""
    ctl = handle._controller
    stored, read = [], []
    store, residual = ctl.store_residual, ctl.residual

    def store_spy(branch, value):
        stored.append((ctl.step, value))
        store(branch, value)

    def read_spy(branch):
        value = residual(branch)
        read.append((ctl.step, value))
        return value

    ctl.store_residual, ctl.residual = store_spy, read_spy
    return stored, read


def test_a_skipped_step_reads_the_first_order_extrapolation(tiny_flux1, flux1_generate):
    with apply_schedule(tiny_flux1, SKIPPING, forecast=True) as handle:
        stored, read = _watch(handle)
        flux1_generate(seed=1)
    assert [s for s, _ in stored] == [0, 1, 2, 4, 7, 9] and [s for s, _ in read] == [3, 5, 6, 8]
    by_step = dict(stored)
    for step, value in read:
        (t0, r0), (t1, r1) = [(t, by_step[t]) for t in sorted(by_step) if t < step][-2:]
        expected = r1 + (r1 - r0) * ((step - t1) / (t1 - t0))
        assert mx.array_equal(value, expected).item(), step


def test_forecast_changes_the_image_where_it_skips_and_nothing_where_it_does_not(tiny_flux1, flux1_generate):
    vanilla = flux1_generate(seed=2)
    with apply_schedule(tiny_flux1, SKIPPING) as reuse:
        reused = flux1_generate(seed=2)
    with apply_schedule(tiny_flux1, SKIPPING, forecast=True) as forecast:
        forecast_out = flux1_generate(seed=2)
    assert reuse.stats.skipped == forecast.stats.skipped == 4
    assert not mx.array_equal(reused, forecast_out).item() and mx.all(mx.isfinite(forecast_out)).item()
    every = StaticSchedule.from_skipped(STEPS, [])
    with apply_schedule(tiny_flux1, every, forecast=True) as computed:
        plain = flux1_generate(seed=2)
        held = computed.cache_bytes
    with apply_schedule(tiny_flux1, every) as one:
        flux1_generate(seed=2)
        held_reuse = one.cache_bytes
    assert mx.array_equal(plain, vanilla).item()  # nothing skipped: bit-exact, forecast or not
    assert held > held_reuse > 0  # two residuals per branch against one


@pytest.mark.parametrize("value", [1, "yes", None])
def test_forecast_is_true_or_false(tiny_flux1, value):
    original = tiny_flux1.transformer
    with pytest.raises(InputTypeError, match="forecast: expected True or False"):
        apply_teacache(tiny_flux1, rel_l1_thresh=0.3, forecast=value)
    with pytest.raises(InputTypeError, match="forecast: expected True or False"):
        apply_schedule(tiny_flux1, SKIPPING, forecast=value)
    assert tiny_flux1.transformer is original
