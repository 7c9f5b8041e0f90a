"""The budgeted reference: for a fixed number of computed steps, the best fixed schedule a local search finds.

A per-prompt rule (TeaCache, MagCache) earns its keep only if it beats every fixed schedule of the same cost,
not only the evenly spread one. Searching all of them is out of reach (28 steps, 10 computed: 4.4 million), so
this climbs from a start (the even schedule) by moving one computed step to a neighbouring skipped one while
that improves the score on the calibration prompts; the schedule found is then scored on held-out prompts.
The score is the caller's (e.g. SSIM against vanilla, averaged over prompts): the search only needs a number.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from teacache.schedule import StaticSchedule


def neighbours(schedule: StaticSchedule, fixed: frozenset[int] = frozenset()) -> Iterator[StaticSchedule]:
    """Every schedule with one computed step moved to the skipped step just before or after it, keeping the
    number computed, step 0 computed and the ``fixed`` steps (e.g. the forced last one) as they are."""
    mask = schedule.compute
    keep = fixed | {0}
    for step, computed in enumerate(mask):
        if not computed or step in keep:
            continue
        for target in (step - 1, step + 1):
            if 0 < target < len(mask) and not mask[target] and target not in keep:
                moved = list(mask)
                moved[step], moved[target] = False, True
                yield StaticSchedule(tuple(moved), schedule.label)


def search(
    start: StaticSchedule,
    score: Callable[[StaticSchedule], float],
    rounds: int = 3,
    fixed: frozenset[int] = frozenset(),
) -> tuple[StaticSchedule, list[tuple[StaticSchedule, float]]]:
    """Best-improvement hill climb from ``start`` for at most ``rounds`` moves (higher score is better).

    Returns the best schedule and every schedule scored, in order (each scored once)."""
    seen: dict[tuple[bool, ...], float] = {}
    history: list[tuple[StaticSchedule, float]] = []

    def scored(candidate: StaticSchedule) -> float:
        if candidate.compute not in seen:
            seen[candidate.compute] = float(score(candidate))
            history.append((candidate, seen[candidate.compute]))
        return seen[candidate.compute]

    best, best_score = start, scored(start)
    for _ in range(rounds):
        options = [(scored(c), c) for c in neighbours(best, fixed)]
        if not options:
            break
        top_score, top = max(options, key=lambda pair: pair[0])
        if top_score <= best_score:
            break
        best, best_score = top, top_score
    return StaticSchedule(best.compute, f"searched:{best.computed}"), history
