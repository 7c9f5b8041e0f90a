"""The budgeted reference's search: moves keep the budget and the fixed steps, and the climb finds a known optimum."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from bench.studies.budget_search import neighbours, search
from teacache.schedule import StaticSchedule


@settings(max_examples=100, deadline=None)
@given(steps=st.integers(4, 30), data=st.data())
def test_every_move_keeps_the_budget_step_zero_and_the_fixed_steps(steps, data):
    computed = data.draw(st.integers(2, steps))
    start = StaticSchedule.evenly(steps, computed)
    fixed = frozenset({steps - 1})
    for moved in neighbours(start, fixed):
        assert moved.computed == start.computed and moved.compute[0] and moved.compute[-1]
        changed = [s for s in range(steps) if moved.compute[s] != start.compute[s]]
        assert len(changed) == 2 and abs(changed[0] - changed[1]) == 1


def test_the_climb_reaches_the_schedule_a_score_prefers_and_scores_each_once():
    wanted = {0, 5, 9, 15, 19}  # the optimum: these steps computed (19 the forced last)
    start = StaticSchedule.evenly(20, 5)

    def score(schedule):
        return -len(wanted ^ {s for s, c in enumerate(schedule.compute) if c})

    best, history = search(start, score, rounds=20, fixed=frozenset({19}))
    assert {s for s, c in enumerate(best.compute) if c} == wanted
    assert len({h.compute for h, _ in history}) == len(history)  # no schedule scored twice
    assert best.label == "searched:5"


def test_no_improving_move_keeps_the_start():
    start = StaticSchedule.evenly(10, 4)
    best, history = search(start, lambda s: 1.0 if s.compute == start.compute else 0.0, rounds=5)
    assert best.compute == start.compute and history[0][0].compute == start.compute
