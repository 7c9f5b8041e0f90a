"""Baseline arms: fixed schedules, fewer steps, mflux's step cache, and an isolated-process timing.

The schedule and step-cache rules are checked as pure functions; on the embedded tiny-shapes model,
each arm is checked by counting what the pipeline really ran (loop steps, predict calls, transformer
bodies), not by reading back the arm's own log.
"""

from __future__ import annotations

import contextlib
import json
import os
import warnings
from types import SimpleNamespace

import mlx.core as mx
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from mflux.callbacks.callback_registry import CallbackRegistry
from mflux.models.common.step_cache.step_cache import StepCache
from mlx import nn

import teacache
from bench.sweep import baselines, records
from bench.sweep.isolate import job, run_isolated
from calib.run.generation import generate
from calib.run.prompts import TINY_SHAPES_FAST
from teacache import apply_teacache
from teacache.adapters.flux2 import TeaCacheFlux2Transformer
from teacache.gate import GateConfig
from teacache.schedule import ScheduleGate, StaticSchedule, apply_schedule, most_common

PROMPT = TINY_SHAPES_FAST["shapes-00"]
STEPS = 12  # enough for StepCache (it skips nothing under 10 steps), short on 2 cores
SIZE = (32, 32)


# --- schedules as pure functions --------------------------------------------------------------------
@settings(max_examples=300, deadline=None)
@given(n=st.integers(2, 60), data=st.data())
def test_evenly_computes_exactly_the_count_asked_and_the_forced_steps(n, data):
    first = data.draw(st.integers(0, 3))
    last = data.draw(st.integers(0, 2))
    if max(first, 1) + last > n:
        return
    lo = max(first, 1) + last
    computed = data.draw(st.integers(lo, n))
    schedule = StaticSchedule.evenly(n, computed, first, last)
    assert schedule.num_steps == n and schedule.computed == computed
    assert all(schedule.compute[s] for s in range(max(first, 1)))
    assert all(schedule.compute[s] for s in range(n - last, n))
    skipped = schedule.skipped_steps
    if skipped:  # evenly: the computed interior steps are at most one step from equal gaps
        interior = [s for s in range(max(first, 1), n - last) if schedule.compute[s]]
        gaps = [b - a for a, b in zip([max(first, 1) - 1, *interior], [*interior, n - last], strict=True)]
        assert max(gaps) - min(gaps) <= 1


@settings(max_examples=200, deadline=None)
@given(n=st.integers(3, 60), k=st.integers(1, 6), first=st.integers(1, 3))
def test_every_k_computes_one_step_in_k_after_the_forced_first(n, k, first):
    if first + 1 > n:
        return
    schedule = StaticSchedule.every(n, k, first, 1)
    middle = schedule.compute[first : n - 1]
    for start in range(0, len(middle) - k + 1):  # each window of k consecutive steps computes exactly one
        assert sum(middle[start : start + k]) == 1
    assert schedule.compute[-1] and all(schedule.compute[:first])


def test_schedules_refuse_what_they_cannot_follow():
    with pytest.raises(ValueError, match="step 0 must be computed"):
        StaticSchedule((False, True))
    with pytest.raises(ValueError, match="computed: expected an integer in 3..10"):
        StaticSchedule.evenly(10, 2, skip_first_n_steps=2)
    with pytest.raises(ValueError, match=r"outside 1..4"):
        StaticSchedule.from_skipped(5, [0, 2])
    gate = ScheduleGate(StaticSchedule.evenly(6, 3))
    with pytest.raises(ValueError, match="made for 6 steps, this generation has 8"):
        gate.decide(0, 8, None)


@settings(max_examples=200, deadline=None)
@given(mask=st.lists(st.booleans(), min_size=1, max_size=40))
def test_the_schedule_gate_decides_exactly_the_mask(mask):
    mask = [True, *mask[1:]]
    gate = ScheduleGate(StaticSchedule(tuple(mask)))
    decisions = [gate.decide(step, len(mask), 0.1).compute for step in range(len(mask))]
    assert decisions == mask and [d.compute for d in gate.log] == mask
    gate.reset()
    assert gate.log == []


def test_most_common_takes_the_mode_and_breaks_ties_by_fewer_skips():
    assert most_common(8, [[2, 4], [2, 4], [3]]).skipped_steps == [2, 4]
    assert most_common(8, [[2, 4], [3], [5, 6, 7]]).skipped_steps == [3]
    with pytest.raises(ValueError, match="at least one"):
        most_common(8, [])


def test_baseline_names_and_grids():
    assert baselines.parse_baselines("fewer-steps, static") == ("fewer-steps", "static")
    assert baselines.parse_baselines("") == ()
    with pytest.raises(ValueError, match="--baselines: unknown arm 'fewer'"):
        baselines.parse_baselines("fewer,static")
    with pytest.raises(ValueError, match="given twice"):
        baselines.parse_baselines("static,static")
    assert baselines.step_grid(28, reached=[13, 10, 28, 1]) == [7, 10, 13, 14, 21]
    with pytest.raises(ValueError, match="fewer-steps: expected a step count in 2..27"):
        baselines.fewer_steps(28, 28)


def test_arms_survive_the_trip_to_another_process():
    gate = GateConfig(0.03, teacache.RescaleFunction((1.0, 0.0), x_range=(0.0, 0.5)), skip_first_n_steps=2)
    for arm in (baselines.teacache(gate), baselines.static(StaticSchedule.every(12, 2)),
                baselines.fewer_steps(7, 12), baselines.step_cache(0.25), baselines.vanilla()):  # fmt: skip
        assert baselines.Arm.from_dict(arm.to_dict()) == arm


# --- mflux's StepCache through a transformer wrapper, on a loop without a model -----------------------
class _Echo(nn.Module):
    """Returns (loop step, CFG call) so a reused output can be recognised."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[int, int]] = []
        self.step = 0

    def __call__(self, branch: int):
        self.calls.append((self.step, branch))
        return mx.array([self.step, branch])


class _LoopPipeline:
    """A denoising loop shaped like Qwen-Image's: two transformer calls per step, callbacks around."""

    def __init__(self) -> None:
        self.transformer = _Echo()
        self.callbacks = CallbackRegistry()

    def generate(self, steps: int) -> list[tuple[int, int]]:
        config = SimpleNamespace(init_time_step=0, num_inference_steps=steps,
                                 scheduler=SimpleNamespace(sigmas=mx.linspace(1.0, 0.0, steps + 1)))  # fmt: skip
        for cb in self.callbacks.before_loop:
            cb.call_before_loop(0, "p", None, config)
        seen = []
        for t in range(steps):
            echo = self.transformer if isinstance(self.transformer, _Echo) else self.transformer.transformer
            echo.step = t
            outputs = [self.transformer(branch=0), self.transformer(branch=1)]
            seen.append(tuple(tuple(int(v) for v in o.tolist()) for o in outputs))
            for cb in self.callbacks.in_loop:
                cb.call_in_loop(t, 0, "p", None, config)
        for cb in self.callbacks.after_loop:
            cb.call_after_loop(0, "p", None, config)
        return seen


def test_step_cache_reuses_each_calls_previous_output_on_the_steps_mflux_selects():
    pipe = _LoopPipeline()
    steps, ratio = 20, 0.3
    original = pipe.transformer
    expected = sorted(StepCache.select_skip_steps(list(range(steps)), mx.linspace(1.0, 0.0, steps + 1), ratio))
    assert len(expected) == 6
    with baselines.apply_step_cache(pipe, ratio) as run:
        seen = pipe.generate(steps)
    assert pipe.transformer is original and all(not lst for lst in vars(pipe.callbacks).values())
    assert run.history == [expected]
    assert sorted({s for s, _ in original.calls}) == [s for s in range(steps) if s not in expected]
    last = {}
    for t, outputs in enumerate(seen):
        for branch, (step, got_branch) in enumerate(outputs):
            assert got_branch == branch  # each CFG call keeps its own output
            assert step == (last[branch] if t in expected else t)
            last[branch] = step


# --- the arms on the embedded model ----------------------------------------------------------------
@pytest.fixture(scope="module")
def shapes():
    model = teacache.load_model("tiny-shapes")
    with _quiet(), apply_teacache(model, rel_l1_thresh=0.03):  # warm-up: compile once, eager once
        generate(model, PROMPT, 0, STEPS, *SIZE, 1.0)
    generate(model, PROMPT, 0, STEPS, *SIZE, 1.0)
    return model


@contextlib.contextmanager
def _quiet():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", teacache.RecipeMismatchWarning)  # the packaged fit's recipe: 28 steps
        yield


class _LoopCounter:
    def __init__(self) -> None:
        self.in_loop = 0
        self.num_steps = None

    def call_before_loop(self, seed, prompt, latents, config, **_) -> None:
        self.num_steps = config.num_inference_steps

    def call_in_loop(self, t, seed, prompt, latents, config, time_steps=None, **_) -> None:
        self.in_loop += 1


def _counting_predict(model, calls: list):
    factory = type(model)._predict

    def counting(transformer):
        predict = factory(transformer)

        def run(*args, **kwargs):
            calls.append(1)
            return predict(*args, **kwargs)

        return run

    object.__setattr__(model, "_predict", counting)


@pytest.mark.parametrize("fewer", [5, 9])
def test_the_fewer_steps_arm_really_runs_n_prime_steps(shapes, fewer):
    model = shapes
    counter, calls = _LoopCounter(), []
    model.callbacks.register(counter)
    _counting_predict(model, calls)
    try:
        result = baselines.run_arm(model, baselines.fewer_steps(fewer, STEPS), PROMPT, 0, STEPS, *SIZE, 1.0)
    finally:
        object.__delattr__(model, "_predict")
        model.callbacks.in_loop.remove(counter)
        model.callbacks.before_loop.remove(counter)
    assert counter.num_steps == fewer and counter.in_loop == fewer and len(calls) == fewer
    assert result.steps_run == fewer and result.computed == fewer


def test_the_static_arm_computes_exactly_the_steps_of_its_schedule(shapes, monkeypatch):
    model = shapes
    ran: list[int] = []  # the residual of a computed body (the compiled body itself runs out of Python's sight)
    residual = TeaCacheFlux2Transformer._residual

    def counting_residual(self, *args, **kwargs):
        ran.append(self._controller.step)
        return residual(self, *args, **kwargs)

    monkeypatch.setattr(TeaCacheFlux2Transformer, "_residual", counting_residual)
    schedule = StaticSchedule.from_skipped(STEPS, [2, 3, 5, 8, 9], label="asked")
    result = baselines.run_arm(model, baselines.static(schedule), PROMPT, 0, STEPS, *SIZE, 1.0)
    assert ran == [s for s in range(STEPS) if s not in (2, 3, 5, 8, 9)]
    assert result.skipped_steps == [2, 3, 5, 8, 9] and result.computed == STEPS - 5
    assert [d.step for d in result.decisions if not d.compute] == [2, 3, 5, 8, 9]
    assert model.transformer is not None and not isinstance(model.transformer, TeaCacheFlux2Transformer)


def test_a_static_schedule_copying_teacaches_gives_teacaches_image(shapes):
    model = shapes
    with _quiet(), apply_teacache(model, rel_l1_thresh=0.05) as handle:
        cached = generate(model, PROMPT, 1, STEPS, *SIZE, 1.0)
    assert handle.stats.skipped > 0
    schedule = StaticSchedule.from_skipped(STEPS, handle.stats.skipped_steps)
    with apply_schedule(model, schedule) as fixed:
        static = generate(model, PROMPT, 1, STEPS, *SIZE, 1.0)
    assert fixed.stats.skipped_steps == handle.stats.skipped_steps
    assert mx.array_equal(static.latents, cached.latents).item()  # same caching, only the decision differs
    # a fixed schedule reads no signal back mid-step; its log gets each one after the step, the same values
    assert [d.x for d in fixed.stats.log] == [d.x for d in handle.stats.log]


def test_the_step_cache_arm_skips_what_mflux_selects_and_restores_exactly(shapes):
    model = shapes
    before = generate(model, PROMPT, 2, STEPS, *SIZE, 1.0)
    calls: list = []
    _counting_predict(model, calls)
    try:
        result = baselines.run_arm(model, baselines.step_cache(0.25), PROMPT, 2, STEPS, *SIZE, 1.0)
    finally:
        object.__delattr__(model, "_predict")
    from mflux.models.common.config.config import Config

    config = Config(model_config=model.model_config, num_inference_steps=STEPS, height=32, width=32, guidance=1.0)
    expected = sorted(StepCache.for_run(config, ratio=0.25).skip_steps)
    assert len(expected) == 3 and result.skipped_steps == expected
    assert len(calls) == STEPS - 3 and result.computed == STEPS - 3
    assert "_predict" not in vars(model)
    assert not any(isinstance(c, baselines.StepCacheRun) for c in model.callbacks.before_loop)
    assert mx.array_equal(before.latents, generate(model, PROMPT, 2, STEPS, *SIZE, 1.0).latents).item()


def test_an_isolated_run_times_one_generation_in_another_process():
    spec = job("tiny-shapes", baselines.fewer_steps(4, STEPS), PROMPT, 0, STEPS, *SIZE, 1.0, repeats=2)
    result = run_isolated(spec, timeout_s=300)
    assert result["pid"] != os.getpid()
    assert result["steps_run"] == 4 and result["computed"] == 4
    assert len(result["loop_s"]) == 2 and all(0 < s < result["process_s"] for s in result["loop_s"])
    with pytest.raises(RuntimeError, match=r"isolated run failed \(exit 1\)"):
        run_isolated(spec, timeout_s=60, python="false")  # a child that dies says so, with its exit status


def test_the_isolated_child_refuses_a_job_that_is_not_json(capsys):
    from bench.sweep.isolate import main

    assert main(["{not json"]) == 2
    assert "JOB_JSON is not JSON" in capsys.readouterr().err


def test_every_arm_of_a_pair_is_measured_against_the_same_vanilla_run(shapes):
    settings = {"variant": "tiny-shapes", "model": "tiny-shapes", "steps": STEPS, "width": 32, "height": 32,
                "guidance": 1.0}  # fmt: skip
    arms = [baselines.fewer_steps(6, STEPS), baselines.static(StaticSchedule.evenly(STEPS, 6))]
    rows = baselines.measure_pair(shapes, ("shapes-00", PROMPT, 0), settings, arms, repeats=1)
    assert [(r["arm"], r["arm_setting"]) for r in rows] == [("vanilla", ""), ("fewer-steps", "6"), ("static", "even:6")]
    assert not {d.name for d in records.RUNS.derived} & set(rows[0])  # derived on reading, from what was measured
    vanilla, fewer, static = (row for _i, row in records.derive_columns(pd.DataFrame(rows)).iterrows())
    assert vanilla["ssim"] == 1.0 and vanilla["speedup"] == 1.0 and vanilla["max_abs"] == 0.0
    assert fewer["steps_run"] == 6 and fewer["computed"] == 6 and fewer["ideal_speedup"] == STEPS / 6
    assert static["steps_run"] == STEPS and static["computed"] == 6 and len(json.loads(static["skipped_steps"])) == 6
    for row in (fewer, static):  # measured against vanilla: a different image, a ratio of loop times
        assert row["ssim"] < 1.0 and row["speedup"] == vanilla["wall_s_median"] / row["wall_s_median"]
