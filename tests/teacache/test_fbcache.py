"""First-Block Cache's rule: a decision sequence by hand, the vectorized replay equal to the rule on random changes,
the ideal bound, bad settings refused in one line before any pipeline is touched."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from teacache.errors import InputError, InputTypeError, TeaCacheError
from teacache.fbcache import FBCacheConfig, apply_fbcache, ideal_speedup, replay, replay_skip_masks


def _against_previous_anchor(values: list[float], n: int) -> np.ndarray:
    """changes[t, s] = values[t] + 0.1 * (t - s - 1): the change grows with the distance to the anchor."""
    c = np.full((n, n), np.nan)
    for t in range(n):
        for s in range(t):
            c[t, s] = values[t] + 0.1 * (t - s - 1)
    return c


def test_a_decision_sequence_by_hand():
    # threshold 0.25, the first two and the last step forced, at most 2 skips in a row; the change against the
    # anchor is values[t] plus 0.1 per step between the anchor and t
    values = [math.nan, 0.05, 0.1, 0.1, 0.3, 0.01, 0.01, 0.01, 0.01, 0.0]
    changes = _against_previous_anchor(values, 10)
    log = replay(FBCacheConfig(threshold=0.25, skip_first_n_steps=2, max_consecutive_skips=2), changes)
    # 0, 1 first; 2: 0.1 against 1 -> skip; 3: 0.1 + 0.1 against 1 -> skip; 4: 0.3 + 0.2 -> compute (threshold);
    # 5: 0.01 against 4 -> skip; 6: 0.11 -> skip; 7: 0.21 would skip, but 2 in a row -> compute (cap); 8: 0.01
    # against 7 -> skip; 9 last
    assert [d.compute for d in log] == [True, True, False, False, True, False, False, True, False, True]
    assert [d.reason for d in log] == [
        "first", "first", "skip", "skip", "threshold", "skip", "skip", "cap", "skip", "last",
    ]  # fmt: skip
    assert log[3].x == pytest.approx(0.2) and log[6].x == pytest.approx(0.11) and log[7].x == pytest.approx(0.21)
    # a change at or above the threshold computes, and the anchor moves there
    over = replay(FBCacheConfig(threshold=0.15, skip_first_n_steps=2), changes)
    assert [d.compute for d in over] == [True, True, False, True, True, False, False, True, False, True]
    assert [d.reason for d in over][3:5] == ["threshold", "threshold"]
    # off: threshold 0, or no skip allowed in a row
    assert all(d.compute for d in replay(FBCacheConfig(threshold=0.0), changes))
    assert all(d.compute for d in replay(FBCacheConfig(0.25, max_consecutive_skips=0), changes))
    # the default forces step 0 only: step 1 is measured against step 0
    assert not replay(FBCacheConfig(threshold=0.25), changes)[1].compute


@settings(max_examples=200, deadline=None)
@given(
    data=st.data(),
    n=st.integers(1, 16),
    runs=st.integers(1, 3),
    first=st.integers(0, 3),
    last=st.integers(0, 3),
    k=st.integers(0, 5),
    thresholds=st.lists(st.floats(0.0, 1.2), min_size=1, max_size=3),
)
def test_the_vectorized_replay_is_the_rule_decision_for_decision(data, n, runs, first, last, k, thresholds):
    values = st.one_of(st.floats(0.0, 1.0), st.just(math.nan), st.just(math.inf))
    changes = np.asarray(data.draw(st.lists(st.lists(st.lists(values, min_size=n, max_size=n), min_size=n,
                                                     max_size=n), min_size=runs, max_size=runs)))  # fmt: skip
    masks = replay_skip_masks(changes, thresholds, skip_first_n_steps=first, skip_last_n_steps=last,
                              max_consecutive_skips=k)  # fmt: skip
    assert masks.shape == (len(thresholds), runs, n)
    for i, threshold in enumerate(thresholds):
        cfg = FBCacheConfig(threshold, first, last, k)
        for r in range(runs):
            log = replay(cfg, changes[r])
            assert masks[i, r].tolist() == [not d.compute for d in log]
            streak = longest = 0
            for d in log:
                streak = 0 if d.compute else streak + 1
                longest = max(longest, streak)
            assert longest <= k and (n == 0 or log[0].compute)


def test_the_ideal_bound_counts_block_zero_at_every_step():
    assert ideal_speedup(10, 4, 5) == pytest.approx(10 / (10 - 4 * 0.8))
    assert ideal_speedup(10, 0, 5) == 1.0
    assert ideal_speedup(28, 14, 1) == 1.0  # one block: skipping the rest saves nothing
    assert ideal_speedup(28, 14, 10**9) == pytest.approx(2.0)  # many blocks: N / (N - k)
    with pytest.raises(InputError, match="skipped: expected fewer than the 10 steps"):
        ideal_speedup(10, 10, 5)


class _NoPipeline:
    """Any touch means a setting was not checked first."""

    def __getattr__(self, name):
        raise AssertionError(f"the pipeline was touched ({name}) before the settings were checked")


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"threshold": -0.1}, InputError, "threshold: expected a finite number >= 0"),
        ({"threshold": math.nan}, InputError, "threshold: expected a finite number >= 0"),
        ({"threshold": math.inf}, InputError, "threshold: expected a finite number >= 0"),
        ({"threshold": "0.08"}, InputTypeError, "threshold: expected a number"),
        ({"max_consecutive_skips": -1}, InputError, "max_consecutive_skips: expected an integer >= 0"),
        ({"max_consecutive_skips": 1.5}, InputTypeError, "max_consecutive_skips: expected an integer"),
        ({"skip_first_n_steps": -1}, InputError, "skip_first_n_steps: expected an integer >= 0"),
        ({"skip_last_n_steps": -2}, InputError, "skip_last_n_steps: expected an integer >= 0"),
        ({"forecast": 1}, InputTypeError, "forecast: expected True or False"),
    ],
)
def test_bad_settings_are_refused_in_one_line_before_the_pipeline(kwargs, error, message):
    with pytest.raises(error) as caught:
        apply_fbcache(_NoPipeline(), **kwargs)
    assert isinstance(caught.value, TeaCacheError)
    assert str(caught.value).startswith(message) and "\n" not in str(caught.value)
    if "forecast" not in kwargs:
        with pytest.raises(error, match=message.split(":")[0]):
            FBCacheConfig(**kwargs)


def test_the_replay_refuses_what_is_no_change_table():
    with pytest.raises(InputError, match=r"changes: expected an array \[runs, steps, steps\]"):
        replay_skip_masks(np.zeros((3, 4)), [0.1])
    with pytest.raises(InputError, match="thresholds: expected a finite number >= 0"):
        replay_skip_masks(np.zeros((1, 3, 3)), [-1.0])
