"""The one timing loop's ordering rule and pairing."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from calib.run.interleave import Turn, interleave, rotation


def test_the_order_rotates_by_one_each_repeat():
    assert [rotation(3, r) for r in range(4)] == [[0, 1, 2], [1, 2, 0], [2, 0, 1], [0, 1, 2]]
    assert [rotation(2, r) for r in range(3)] == [[0, 1], [1, 0], [0, 1]]


@given(st.integers(1, 7), st.integers(1, 3))
def test_over_n_repeats_every_arm_runs_once_in_every_position(arms, cycles):
    turns: list[Turn] = []
    interleave(turns.append, arms, arms * cycles)
    assert Counter((t.arm, t.position) for t in turns) == {(a, p): cycles for a in range(arms) for p in range(arms)}


def test_results_come_back_by_arm_in_repeat_order():
    results = interleave(lambda turn: (turn.arm, turn.repeat), 3, 4)
    assert results == [[(arm, r) for r in range(4)] for arm in range(3)]


def test_a_stop_after_a_repeat_leaves_every_arm_with_as_many_results():
    seen = []

    def after(done: int) -> bool:
        seen.append(done)
        return done < 2

    results = interleave(lambda turn: turn.repeat, 3, 5, after)
    assert seen == [1, 2]
    assert [len(r) for r in results] == [2, 2, 2]


def test_nothing_to_interleave_is_refused():
    with pytest.raises(ValueError, match="at least one arm"):
        interleave(lambda turn: 0, 0, 3)
