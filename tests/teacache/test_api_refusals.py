"""``apply_teacache``'s own refusals are ``TeaCacheError`` subclasses, and each is still the builtin it was (a
``ValueError``, a ``TypeError``, a ``RuntimeError``) with the same message, so code that catches either keeps
working; nothing is installed when a call is refused."""

from __future__ import annotations

import math
import re

import pytest

from teacache.errors import InputError, InputTypeError, StateError, TeaCacheError


@pytest.fixture(scope="module")
def shapes():
    from teacache import load_model

    return load_model("tiny-shapes")


def _refused(call, builtin: type[Exception], kind: type[TeaCacheError], message: str) -> TeaCacheError:
    with pytest.raises(builtin, match="^" + re.escape(message)) as caught:
        call()
    assert isinstance(caught.value, kind) and isinstance(caught.value, TeaCacheError)
    return caught.value


THRESHOLD_RULE = "rel_l1_thresh: expected a finite number >= 0 (0 disables skipping), got "
BUILTIN = {InputError: ValueError, InputTypeError: TypeError}


@pytest.mark.parametrize(
    ("keywords", "kind", "message"),
    [
        ({"rel_l1_thresh": -1}, InputError, THRESHOLD_RULE + "-1.0"),
        ({"rel_l1_thresh": -0.05}, InputError, THRESHOLD_RULE + "-0.05"),
        ({"rel_l1_thresh": math.nan}, InputError, THRESHOLD_RULE + "nan"),
        ({"rel_l1_thresh": math.inf}, InputError, THRESHOLD_RULE + "inf"),
        ({"rel_l1_thresh": "0.1"}, InputTypeError, "rel_l1_thresh: expected a number, got str"),
        ({"rel_l1_thresh": True}, InputTypeError, "rel_l1_thresh: expected a number, got bool"),
        ({"skip_first_n_steps": -1}, InputError, "skip_first_n_steps: expected an integer >= 0, got -1"),
        ({"skip_last_n_steps": 1.5}, InputTypeError, "skip_last_n_steps: expected an integer, got float"),
        ({"max_consecutive_skips": 0}, InputError, "max_consecutive_skips: expected an integer >= 1, got 0"),
        ({"coefficients": "abc"}, InputTypeError, "coefficients: expected a RescaleFunction or a sequence of numbers"),
        ({"coefficients": ("a", "b")}, InputTypeError, "coefficients: expected numbers, got 'a' (str)"),
        ({"coefficients": (math.nan,)}, InputError, "coefficients: expected a non-empty sequence of finite numbers"),
    ],
    ids=str,
)
def test_bad_gate_keywords_are_teacache_errors_with_the_old_builtin_and_message(shapes, keywords, kind, message):
    from teacache import apply_teacache
    from teacache.core import is_applied

    _refused(lambda: apply_teacache(shapes, **keywords), BUILTIN[kind], kind, message)
    assert not is_applied(shapes)


def test_config_and_gate_keywords_together_are_refused(shapes):
    from teacache import GateConfig, RescaleFunction, apply_teacache

    config = GateConfig(0.1, RescaleFunction((1.0, 0.0)))
    message = "config: pass either config= or the gate keywords, not both (got rel_l1_thresh)"
    _refused(lambda: apply_teacache(shapes, config=config, rel_l1_thresh=0.1), ValueError, InputError, message)


def test_a_pipeline_of_no_known_family_is_a_teacache_error_and_a_type_error():
    from teacache import apply_teacache, variants

    class NotAPipeline:
        pass

    message = f"model: TeaCache does not support NotAPipeline; supported variants: {', '.join(variants.names())}"
    _refused(lambda: apply_teacache(NotAPipeline()), TypeError, InputTypeError, message)


def test_an_unknown_variant_is_a_teacache_error_and_a_value_error(shapes, monkeypatch):
    from teacache import apply_teacache, variants

    monkeypatch.setattr(shapes, "teacache_variant", "no-such-variant", raising=False)
    message = f"variant: unknown variant 'no-such-variant'; supported: {', '.join(variants.names())}"
    _refused(lambda: apply_teacache(shapes), ValueError, InputError, message)


def test_applying_twice_is_a_state_error_and_a_runtime_error(shapes):
    from teacache import apply_teacache

    with apply_teacache(shapes, rel_l1_thresh=0.1):
        message = "model: TeaCache is already applied to this pipeline; restore() the first handle"
        _refused(lambda: apply_teacache(shapes), RuntimeError, StateError, message)


def test_the_type_refusal_is_a_type_error_only():
    """A wrong type stays out of ``except ValueError``, as it was."""
    assert issubclass(InputTypeError, TypeError) and not issubclass(InputTypeError, ValueError)
    assert InputTypeError.exit_status == TeaCacheError.exit_status == 2


def _schedule_refusals():
    from teacache.gate_batch import replay_skip_masks
    from teacache.rescale import RescaleFunction
    from teacache.schedule import ScheduleGate, StaticSchedule

    poly = RescaleFunction((1.0, 0.0))
    return [
        (lambda: StaticSchedule(()), InputError, "compute: expected a non-empty sequence of booleans"),
        (lambda: StaticSchedule.every(8, 0), InputError, "k: expected an integer >= 1, got 0"),
        (lambda: StaticSchedule.evenly(0, 1), InputError, "num_steps: expected an integer >= 1, got 0"),
        (lambda: ScheduleGate("every:2"), InputTypeError, "schedule: expected a StaticSchedule, got str"),
        (lambda: replay_skip_masks([1.0], poly, [0.1], 4), InputError, "x: expected a 2-D array [runs, steps]"),
        (lambda: replay_skip_masks([[1.0] * 4], poly, [-1], 4), InputError, "thresholds: expected finite numbers"),
    ]


@pytest.mark.parametrize("case", range(6))
def test_schedule_and_replay_refusals_are_teacache_errors(case):
    call, kind, message = _schedule_refusals()[case]
    _refused(call, BUILTIN[kind], kind, message)


def test_a_schedule_on_a_pipeline_with_teacache_is_a_state_error(shapes):
    from teacache import apply_teacache
    from teacache.schedule import StaticSchedule, apply_schedule

    with apply_teacache(shapes):
        message = "model: TeaCache is already applied to this pipeline; restore() the first handle"
        _refused(lambda: apply_schedule(shapes, StaticSchedule.evenly(8, 4)), RuntimeError, StateError, message)
