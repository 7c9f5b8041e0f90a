"""What every adapter must do the same way, on each family's embedded pipeline (conftest's ``family``)."""

from __future__ import annotations

import gc
import warnings

import mlx.core as mx
import pytest
from mflux.utils.apple_silicon import AppleSiliconUtil

from teacache import apply_teacache, variants
from teacache.adapters.flux2 import TeaCacheFlux2Transformer
from teacache.adapters.zimage import TeaCacheZImageTransformer
from teacache.coefficients import load_packaged, load_recipe
from teacache.core import is_applied
from tests.teacache.adapters import FAMILY_FIXTURES, IDENTITY, STEPS, untouched

EVERY_FAMILY = pytest.mark.parametrize("family", list(FAMILY_FIXTURES), indirect=True)
# the families whose mflux predict is compiled: the proxy runs its head, body and tail as compiled segments
COMPILED_PROXIES = {"tiny-flux2": TeaCacheFlux2Transformer, "tiny-z-image": TeaCacheZImageTransformer}
# the largest rounding of one buffer by MLX's allocators (CUDA and Metal round to 16 KiB pages; CPU is exact)
ALLOCATOR_PAGE = 16384


@EVERY_FAMILY
def test_threshold_zero_swaps_nothing_and_is_bit_exact(family):
    """The fast path: no proxy, no predict of ours (compiled predicts stay mflux's), no cache tensors."""
    model, generate = family
    original = model.transformer
    before = generate(seed=1)
    with apply_teacache(model, rel_l1_thresh=0.0) as handle:
        assert model.transformer is original and "_predict" not in vars(model)
        wrapped = generate(seed=1)
        assert handle.cache_bytes == 0 and handle.cached_branches == []
    after = generate(seed=1)
    assert mx.array_equal(before, wrapped).item() and mx.array_equal(before, after).item()
    assert handle.stats.computed == STEPS and handle.stats.skipped == 0


@pytest.mark.skipif(AppleSiliconUtil.is_m1_or_m2(), reason="mflux runs these uncompiled on M1/M2; so does TeaCache")
@pytest.mark.parametrize("family", list(COMPILED_PROXIES), indirect=True)
@pytest.mark.parametrize("calibrate", [False, True], ids=["gate", "recorder"])
def test_the_body_runs_compiled_traced_once_per_generation(family, request, monkeypatch, calibrate):
    """Where mflux compiles its predict, Python walks the proxy's body only while mx.compile traces it (once
    per generation and input shape), not at each computed step: the heavy part stays compiled."""
    model, generate = family
    proxy = COMPILED_PROXIES[request.node.callspec.params["family"]]
    walks = []
    body = proxy._body
    monkeypatch.setattr(proxy, "_body", lambda self, *a: walks.append(1) or body(self, *a))
    gate = {"calibrate": True} if calibrate else {"rel_l1_thresh": 0.3, "coefficients": IDENTITY}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with apply_teacache(model, **gate) as handle:
            generate(seed=5, guidance=3.0)
            first = dict(model.transformer._segments)
            generate(seed=6, guidance=3.0)
            assert set(first) == {"head", "body", "tail"} and first["body"] is not model.transformer._segments["body"]
    assert handle.stats.computed >= 2 and 1 <= len(walks) <= 4  # two CFG branches of different text lengths


@EVERY_FAMILY
def test_restore_is_exact_after_an_exception_inside_the_loop(family):
    model, generate = family
    vanilla = generate(seed=6)

    class Boom:
        def call_in_loop(self, t, **_):
            if t == 3:
                raise RuntimeError("boom at step 3")

    boom = Boom()
    model.callbacks.register(boom)
    original = model.transformer
    try:
        with pytest.raises(RuntimeError, match="boom"), apply_teacache(model, rel_l1_thresh=0.3, coefficients=IDENTITY):
            generate(seed=6)
    finally:
        model.callbacks.in_loop.remove(boom)
    assert untouched(model, original)
    assert mx.array_equal(vanilla, generate(seed=6)).item()


@EVERY_FAMILY
def test_applying_twice_raises_and_leaves_the_first_in_place(family):
    model, _ = family
    original = model.transformer
    with apply_teacache(model, rel_l1_thresh=0.3, coefficients=IDENTITY) as first:
        with pytest.raises(RuntimeError, match="already applied"):
            apply_teacache(model, rel_l1_thresh=0.3, coefficients=IDENTITY)
        assert first.active and is_applied(model)
    assert untouched(model, original)


@pytest.mark.parametrize("family", ["tiny-qwen-image", "tiny-z-image"], indirect=True)
def test_packaged_tiny_calibration_matches_the_test_recipe(family):
    model, generate = family
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no recipe-mismatch or never-skips warning at the packaged defaults
        with apply_teacache(model) as handle:
            generate(seed=8)
    assert handle.variant == variants.variant_of(model) and handle.stats.skipped > 0


@pytest.mark.parametrize(
    ("variant", "recipe"),
    [
        ("qwen-image", {"num_steps": 50, "guidance": 4.0, "resolution": "768x768", "quantization": 4}),
        ("qwen-image-2512", {"num_steps": 50, "guidance": 4.0, "resolution": "768x768", "quantization": 4}),
        ("z-image", {"num_steps": 50, "guidance": 4.0, "resolution": "512x512", "quantization": 8}),
    ],
)
def test_published_coefficients_can_skip_at_the_default_threshold(variant, recipe):
    rescale = load_packaged(variant)
    assert len(rescale.coefficients) == 5 and rescale.coefficients[-1] == 0.0
    assert rescale.floor()[0] < variants.get(variant).default_threshold
    assert load_recipe(variant) == recipe


class _LogAtInLoop:
    """An mflux callback that keeps, at each step's in-loop call (before mflux evaluates the step), the
    decision log's last signal: None while the value has not been read back from the device."""

    def __init__(self, handle_of) -> None:
        self.handle_of = handle_of
        self.seen: list[float | None] = []

    def call_in_loop(self, *args, **kwargs) -> None:
        self.seen.append(self.handle_of().stats.log[-1].x)


@EVERY_FAMILY
def test_a_forced_decision_reads_its_signal_after_the_step_not_during_it(family):
    """Every step forced (skip_first_n_steps = steps) against every step gated and computed: the same signals
    reach the log, but the forced run reads none back while its step is being built; both give the same bits
    (how close the proxy is to mflux's own predict is held by each family's tests)."""
    model, generate = family
    logs, seen, outputs = {}, {}, {}
    arms = {"forced": {"skip_first_n_steps": STEPS}, "gated": {"skip_first_n_steps": 1, "skip_last_n_steps": 0}}
    for arm, steps_kw in arms.items():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with apply_teacache(model, rel_l1_thresh=1e-12, coefficients=IDENTITY, **steps_kw) as handle:
                spy = _LogAtInLoop(lambda: handle)
                model.callbacks.register(spy)
                try:
                    outputs[arm] = generate(seed=2)
                finally:
                    model.callbacks.in_loop.remove(spy)
        logs[arm], seen[arm] = handle.stats.log, spy.seen
        assert handle.stats.skipped == 0
    assert [d.reason for d in logs["forced"]] == ["first"] * STEPS
    assert seen["forced"] == [None] * STEPS  # not one mid-step read-back
    assert all(x is not None for x in seen["gated"][1:])  # the gate reads it as it decides
    assert [d.x for d in logs["forced"]] == [d.x for d in logs["gated"]]
    assert logs["forced"][0].x is None and all(x is not None for x in [d.x for d in logs["forced"]][1:])
    assert mx.array_equal(outputs["forced"], outputs["gated"]).item()


@EVERY_FAMILY
@pytest.mark.parametrize("gate", ["forced", "skipping"])
def test_the_cache_holds_its_own_arrays_and_nothing_behind_them(family, gate):
    """After a generation, what restore() releases is the cache's own bytes (page rounding aside): a residual
    or anchor left lazy would hold its graph's inputs too (the embedded input, the body's whole output)."""
    model, generate = family
    settings = {
        "forced": {"rel_l1_thresh": 1.0, "coefficients": IDENTITY, "skip_first_n_steps": STEPS},
        "skipping": {"rel_l1_thresh": 0.3, "coefficients": IDENTITY},
    }[gate]
    generate(seed=4)  # mflux's own caches (prompt encodings) filled before anything is counted
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with apply_teacache(model, **settings) as handle:
            generate(seed=4)
            gc.collect()
            held, cache, arrays = mx.get_active_memory(), handle.cache_bytes, len(handle._controller.state.cached)
    gc.collect()
    released = held - mx.get_active_memory()
    assert cache > 0 and cache <= released <= cache + arrays * ALLOCATOR_PAGE, (released, cache)


@EVERY_FAMILY
def test_a_gated_decision_builds_the_body_while_its_signal_is_computed(family):
    """Where the decision reads its signal back, the body's graph is built in the meantime (and dropped on a
    skip): the same decisions and the same bits as building it after the read, skips included."""
    model, generate = family
    runs = {}
    for speculate in (True, False):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with apply_teacache(model, rel_l1_thresh=0.3, coefficients=IDENTITY) as handle:
                ctl, seen = handle._controller, []
                decide = ctl.should_compute

                def spy(modulated, branch=0, while_reading=None, decide=decide, ctl=ctl, seen=seen, on=speculate):
                    ran = []

                    def build():
                        ran.append(branch)
                        while_reading()

                    compute = decide(modulated, branch=branch, while_reading=build if on else None)
                    seen.append((ctl.step, branch, bool(ran), compute))
                    return compute

                ctl.should_compute = spy
                image = generate(seed=5)
        runs[speculate] = image, [(d.reason, d.compute) for d in handle.stats.log], seen
    (image, log, seen), (plain_image, plain_log, _) = runs[True], runs[False]
    assert log == plain_log and any(not compute for _, compute in log)  # it skipped, and decided alike
    assert mx.array_equal(image, plain_image).item()
    gated = {step for step, (reason, _) in enumerate(log) if reason not in ("first", "last")} - {0}
    assert {step for step, branch, ran, _ in seen if ran and branch == 0} == gated
    assert not any(ran for _, branch, ran, _ in seen if branch != 0)  # later branches reuse the decision


@EVERY_FAMILY
def test_forecast_runs_through_every_proxy_and_holds_two_residuals_per_branch(family):
    """A skipping schedule with ``forecast``: finite, not reuse's image, and the cache holds twice the residuals."""
    from teacache.schedule import StaticSchedule, apply_schedule

    model, generate = family
    fixed = StaticSchedule.from_skipped(STEPS, [3, 5, 6])
    outputs, cached = {}, {}
    for forecast in (False, True):
        with apply_schedule(model, fixed, forecast=forecast) as handle:
            outputs[forecast] = generate(seed=6)
            state = handle._controller.state
            cached[forecast] = (len(state.residuals), len(state.earlier))
    assert mx.all(mx.isfinite(outputs[True])).item() and not mx.array_equal(outputs[True], outputs[False]).item()
    branches = cached[False][0]
    assert cached[False] == (branches, 0) and cached[True] == (branches, branches)
