"""MagCache's rule: its schedule by hand and by property, the live rule equal to it, off is vanilla, bad settings
refused in one line, the curve calibrated from traces."""

from __future__ import annotations

import math

import mlx.core as mx
import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from teacache.errors import InputError, InputTypeError
from teacache.magcache import MagCacheConfig, apply_magcache, ratio_curve, ratios_for, schedule

STEPS = 10


def test_a_schedule_by_hand():
    # steps 0 and 1 retained (0.2 x 10); then the products 0.9, 0.81 give errors 0.1, 0.1 + 0.19 = 0.29
    cfg = MagCacheConfig(threshold=0.3, ratios=(1.0,) + (0.9,) * 9, max_consecutive_skips=3)
    assert schedule(cfg, 10).compute == (True, True, False, False, True, False, False, True, False, True)
    # at K = 1 every skip is followed by a computed step
    k1 = MagCacheConfig(threshold=0.3, ratios=(1.0,) + (0.9,) * 9, max_consecutive_skips=1)
    assert schedule(k1, 10).compute == (True, True, False, True, False, True, False, True, False, True)


@settings(max_examples=200, deadline=None)
@given(
    ratios=st.lists(st.floats(0.5, 1.5), min_size=2, max_size=40),
    threshold=st.floats(0.0, 2.0),
    k=st.integers(1, 6),
    retention=st.floats(0.0, 0.95),
    steps=st.integers(1, 50),
)
def test_every_schedule_keeps_the_forced_steps_and_the_cap(ratios, threshold, k, retention, steps):
    cfg = MagCacheConfig(threshold=threshold, ratios=tuple(ratios), max_consecutive_skips=k, retention_ratio=retention)
    compute = schedule(cfg, steps).compute
    assert len(compute) == steps and compute[0] and compute[-1]
    assert all(compute[: int(retention * steps)])
    run = longest = 0
    for c in compute:
        run = 0 if c else run + 1
        longest = max(longest, run)
    assert longest <= k
    if threshold == 0:
        assert all(compute)


def test_the_curve_follows_the_schedule_by_its_fraction():
    curve = (1.0, 0.5, 0.8, 0.9, 1.1)
    assert ratios_for(curve, 5).tolist() == list(curve)
    assert ratios_for(curve, 9).tolist() == [1.0, 0.5, 0.5, 0.8, 0.8, 0.9, 0.9, 1.1, 1.1]
    assert ratios_for(curve, 3).tolist() == [1.0, 0.8, 1.1]


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"threshold": -0.1}, InputError, "threshold: expected a finite number >= 0"),
        ({"threshold": math.nan}, InputError, "threshold: expected a finite number >= 0"),
        ({"threshold": "0.2"}, InputTypeError, "threshold: expected a number"),
        ({"ratios": (1.0, 0.0, 0.9)}, InputError, "ratios: step 1: expected a finite ratio > 0"),
        ({"ratios": (1.0, math.inf)}, InputError, "ratios: step 1: expected a finite ratio > 0"),
        ({"ratios": (1.0,)}, InputError, "ratios: expected one ratio per step of at least 2 steps"),
        ({"ratios": "0.9"}, InputTypeError, "ratios: expected a sequence of numbers"),
        ({"max_consecutive_skips": 0}, InputError, "max_consecutive_skips: expected an integer >= 1"),
        ({"retention_ratio": 1.0}, InputError, "retention_ratio: expected a share of the steps in [0, 1)"),
    ],
)
def test_bad_settings_are_refused_in_one_line(kwargs, error, message):
    settings_ = {"threshold": 0.2, "ratios": (1.0, 0.9, 0.9), **kwargs}
    with pytest.raises(error) as caught:
        MagCacheConfig(**settings_)
    assert str(caught.value).startswith(message) and "\n" not in str(caught.value)


def test_the_live_rule_is_its_schedule_and_off_is_vanilla(tiny_flux1, flux1_generate):
    model, generate = tiny_flux1, flux1_generate
    original = model.transformer
    vanilla = generate(seed=3)
    curve = (1.0,) + (0.93,) * (STEPS - 1)
    on = MagCacheConfig(threshold=0.2, ratios=curve)
    with apply_magcache(model, on, STEPS) as handle:
        cached = generate(seed=3)
    assert [d.compute for d in handle.stats.log] == list(schedule(on, STEPS).compute)
    assert handle.stats.skipped == schedule(on, STEPS).compute.count(False) > 0
    assert model.transformer is original  # restored exactly
    assert not mx.array_equal(cached, vanilla).item()
    with apply_magcache(model, MagCacheConfig(threshold=0.0, ratios=curve), STEPS) as off:
        plain = generate(seed=3)
    assert off.stats.skipped == 0 and mx.array_equal(plain, vanilla).item()


def test_the_curve_is_the_median_ratio_of_recorded_residual_norms():
    rows = []
    for prompt, scale in (("p0", 1.0), ("p1", 2.0), ("p2", 4.0)):
        for step, norm in enumerate((1.0, 0.9, 0.72 if prompt != "p2" else 0.9)):
            rows.append({"prompt_id": prompt, "seed": 0, "step": step, "branch": "cond", "residual_norm": scale * norm})
    frame = pd.DataFrame(rows)
    assert np.allclose(ratio_curve(frame), (1.0, 0.9, 0.8))
    with pytest.raises(InputError, match="missing column"):
        ratio_curve(frame.drop(columns="residual_norm"))
    broken = frame.copy()
    broken.loc[0, "residual_norm"] = math.nan
    with pytest.raises(InputError, match="finite and > 0"):
        ratio_curve(broken)
