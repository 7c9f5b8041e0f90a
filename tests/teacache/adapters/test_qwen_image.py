"""Qwen-Image on mflux's real QwenImage.generate_image (tiny-qwen-image): the oracles and the CFG pairing.

QwenImage calls its transformer twice per step (positive, then negative prompt) and is never compiled, so
the proxy's own path is held to bit-exactness against vanilla, like FLUX.1's.
"""

from __future__ import annotations

from types import SimpleNamespace

import mlx.core as mx
import pytest
from mflux.models.common.config.model_config import ModelConfig

from teacache import NeverSkipsWarning, apply_teacache
from teacache.adapters import qwen
from teacache.adapters.qwen import TeaCacheQwenTransformer
from tests.teacache.adapters import IDENTITY, STEPS


def _record_branches(handle) -> list[tuple[int, int]]:
    """Wrap the controller's decision call to log (step, branch) of every transformer call."""
    ctl = handle._controller  # the decision call, wrapped to watch it
    calls: list[tuple[int, int]] = []
    decide = ctl.should_compute

    def recording(modulated, branch=0, while_reading=None):
        calls.append((ctl.step, branch))
        return decide(modulated, branch=branch, while_reading=while_reading)

    ctl.should_compute = recording
    return calls


def test_proxy_that_computes_every_step_is_bit_exact(qwen_image):
    """Never compiled: the re-walked forward, the signal and both kept residuals change no bit."""
    model, generate = qwen_image
    vanilla = generate(seed=2)
    gate = {"rel_l1_thresh": 0.3, "coefficients": IDENTITY, "skip_first_n_steps": STEPS}
    with pytest.warns(NeverSkipsWarning), apply_teacache(model, **gate) as handle:
        assert isinstance(model.transformer, TeaCacheQwenTransformer)
        wrapped = generate(seed=2)
        assert handle.cached_branches == [0, 1]
    assert handle.stats.computed == STEPS and handle.stats.skipped == 0
    assert len(handle.stats.log) == STEPS and handle.stats.log[1].x is not None
    assert mx.array_equal(vanilla, wrapped).item()
    assert mx.array_equal(vanilla, generate(seed=2)).item()


def test_positive_threshold_skips_changes_the_output_and_restore_is_exact(qwen_image):
    model, generate = qwen_image
    before = generate(seed=3)
    with apply_teacache(model, rel_l1_thresh=0.3, coefficients=IDENTITY) as handle:
        cached = generate(seed=3)
    stats = handle.stats
    # measured on this CPU: 7 of 10 skipped (steps 1-4, 6-8); x per step ~0.06-0.09 with random weights
    assert 3 <= stats.skipped <= 8
    assert 0 not in stats.skipped_steps and STEPS - 1 not in stats.skipped_steps
    assert not mx.array_equal(before, cached).item()
    assert not isinstance(model.transformer, TeaCacheQwenTransformer)
    assert mx.array_equal(before, generate(seed=3)).item()


def test_cfg_pairs_the_two_calls_of_a_step_into_one_decision(qwen_image, monkeypatch):
    model, generate = qwen_image
    bodies = []
    run_body = TeaCacheQwenTransformer._body
    monkeypatch.setattr(TeaCacheQwenTransformer, "_body", lambda self, *a: bodies.append(1) or run_body(self, *a))
    with apply_teacache(model, rel_l1_thresh=0.3, coefficients=IDENTITY) as handle:
        calls = _record_branches(handle)
        generate(seed=4)
        assert handle.cached_branches == [0, 1]
    stats = handle.stats
    assert calls == [(step, branch) for step in range(STEPS) for branch in (0, 1)]
    assert len(stats.log) == STEPS and stats.computed + stats.skipped == STEPS and stats.skipped > 0
    # a computed step runs both bodies; a skipped one builds branch 0's graph while its signal is read, then drops it
    assert len(bodies) == 2 * stats.computed + stats.skipped


def test_pairing_restarts_after_a_generation_that_failed_between_the_two_calls(qwen_image):
    model, generate = qwen_image
    with apply_teacache(model, rel_l1_thresh=0.3, coefficients=IDENTITY):
        reference = generate(seed=5)
    with apply_teacache(model, rel_l1_thresh=0.3, coefficients=IDENTITY) as handle:
        ctl = handle._controller  # the decision call, wrapped to watch it
        decide = ctl.should_compute
        failed = []

        def fail_once(modulated, branch=0, while_reading=None):
            if not failed:  # the first call of step 0 is counted, then the generation dies
                failed.append(branch)
                raise RuntimeError("boom in the first call")
            return decide(modulated, branch=branch, while_reading=while_reading)

        ctl.should_compute = fail_once
        with pytest.raises(RuntimeError, match="boom"):
            generate(seed=5)
        del ctl.should_compute
        calls = _record_branches(handle)
        again = generate(seed=5)
    assert failed == [0]
    assert calls[:2] == [(0, 0), (0, 1)] and len(calls) == 2 * STEPS
    assert mx.array_equal(reference, again).item()


def test_calibration_mode_records_both_branches_and_changes_nothing(qwen_image):
    model, generate = qwen_image
    vanilla = generate(seed=7)
    with apply_teacache(model, calibrate=True) as handle:
        recorded = generate(seed=7)
    assert mx.array_equal(vanilla, recorded).item()
    rows = handle.records
    assert [(r["step"], r["branch"]) for r in rows] == [(s, b) for s in range(STEPS) for b in (0, 1)]
    assert all(r["x_rel_l1"] > 0 and r["y_rel_l1"] > 0 for r in rows[2:])


def test_variant_follows_the_checkpoint_name():
    def pipeline(name):
        return SimpleNamespace(model_config=SimpleNamespace(model_name=name))

    assert qwen.variant(SimpleNamespace(model_config=ModelConfig.qwen_image())) == "qwen-image-2512"
    assert qwen.variant(pipeline("Qwen/Qwen-Image")) == "qwen-image"
    with pytest.raises(ValueError, match="supported Qwen-Image variants: qwen-image, qwen-image-2512"):
        qwen.variant(pipeline("Qwen/Qwen-Image-Edit-2509"))
