"""Pairs of no-op runs on small arrays: the arms a pair compares, max-abs and relative RMS as measure.py computes
them, and the check of proxy / vanilla pairs against bounds that the GPU test makes."""

from __future__ import annotations

import numpy as np
import pytest

from bench.tolerances import noop_pairs
from bench.tolerances.noop_pairs import Pair


def _latents() -> dict[str, np.ndarray]:
    base = np.arange(1.0, 9.0, dtype=np.float32).reshape(2, 4)
    moved = base.copy()
    moved[0, 0] += 0.5
    return {"vanilla-0": base, "proxy-all-0": base.copy(), "vanilla-1": moved, "proxy-all-1": moved.copy()}


def test_every_run_is_compared_with_every_later_one_and_each_pair_knows_its_arms():
    pairs = noop_pairs.differences(_latents())
    assert [(p.a, p.b) for p in pairs] == [
        ("vanilla-0", "proxy-all-0"), ("vanilla-0", "vanilla-1"), ("vanilla-0", "proxy-all-1"),
        ("proxy-all-0", "vanilla-1"), ("proxy-all-0", "proxy-all-1"), ("vanilla-1", "proxy-all-1"),
    ]  # fmt: skip
    assert [p.kind for p in pairs] == ["proxy/vanilla", "vanilla/vanilla", "proxy/vanilla", "proxy/vanilla",
                                       "proxy/proxy", "proxy/vanilla"]  # fmt: skip
    same, moved = pairs[0], pairs[1]
    assert same.equal and same.max_abs == 0 and same.rel_rms == 0
    reference = np.sqrt(np.mean(_latents()["vanilla-1"].astype(float) ** 2))
    assert not moved.equal and moved.max_abs == 0.5
    assert moved.rel_rms == pytest.approx(np.sqrt(0.25 / 8) / reference, rel=1e-12)  # the second run is the reference


def test_a_run_name_not_of_measure_pys_form_is_refused():
    assert noop_pairs.arm("vanilla-warm") == "vanilla" and noop_pairs.arm("proxy-all-12") == "proxy"
    for name in ("vanilla", "proxy-0", "teacache-1", "vanilla-x"):
        with pytest.raises(ValueError, match="expected a run named"):
            noop_pairs.arm(name)


def test_pairs_within_the_bounds_pass_and_the_message_gives_vanilla_against_itself():
    verdict = noop_pairs.check(noop_pairs.differences(_latents()), max_abs=0.5, rel_rms=1.0)
    assert verdict.ok and verdict.message.startswith("all 4 within the bounds (max-abs 0.5, relative RMS 1)")
    assert "vanilla/vanilla n 1: min 0.5, median 0.5, max 0.5 (1 of 1 not equal) (max-abs)" in verdict.message
    assert "proxy/vanilla n 4: min 0, median 0.25, max 0.5 (2 of 4 not equal) (max-abs)" in verdict.message


def test_each_pair_beyond_a_bound_is_named_with_its_figure():
    verdict = noop_pairs.check(noop_pairs.differences(_latents()), max_abs=0.4, rel_rms=1.0)
    assert not verdict.ok and len(verdict.failures) == 2
    assert verdict.failures == (
        "vanilla-0 / proxy-all-1: max-abs 0.5 > 0.4",
        "proxy-all-0 / vanilla-1: max-abs 0.5 > 0.4",
    )
    assert verdict.message.startswith("2 of 4 proxy/vanilla pairs beyond the bounds")
    tight = noop_pairs.check([Pair("proxy-all-0", "vanilla-0", False, 0.1, 2e-6)], max_abs=0.1, rel_rms=1e-6)
    assert tight.failures == ("proxy-all-0 / vanilla-0: relative RMS 2e-06 > 1e-06",)
    assert "vanilla/vanilla: none" in tight.message


def test_a_check_without_a_proxy_vanilla_pair_is_refused():
    with pytest.raises(ValueError, match="at least one proxy/vanilla pair"):
        noop_pairs.check([Pair("vanilla-0", "vanilla-1", True, 0.0, 0.0)], max_abs=1.0, rel_rms=1.0)
