"""The one paired, interleaved timing loop: every command that times arms against vanilla runs through it.

Arm 0 is vanilla. Each repeat runs every arm once, one after the other in one process (after the caller's
warm-up), and the order rotates by one from repeat to repeat: repeat ``r`` starts at arm ``r mod n`` and
goes on in order, wrapping round (three arms: 0 1 2, then 1 2 0, then 2 0 1, ...). Over ``n`` repeats every
arm runs once in every position, so no arm always runs first, last or straight after the same neighbour
(warm caches, allocator state, clock boost); with two arms, vanilla and the wrapper alternate which goes
first. The times are paired by repeat: ``results[i][r]`` and ``results[0][r]`` were measured in the same
repeat, a few seconds apart.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

T = TypeVar("T")


@dataclass(frozen=True)
class Turn:
    """One generation of the loop: which arm, in which repeat, at which position within the repeat."""

    arm: int
    repeat: int
    position: int


def rotation(arms: int, repeat: int) -> list[int]:
    """The arms' order in repeat ``repeat`` (from 0): the order of repeat 0 rotated left ``repeat`` times."""
    shift = repeat % arms
    return [*range(shift, arms), *range(shift)]


def interleave(
    run: Callable[[Turn], T], arms: int, repeats: int, after_repeat: Callable[[int], bool] | None = None
) -> list[list[T]]:
    """``run`` every arm once per repeat in :func:`rotation` order; its results by arm, in repeat order.

    ``after_repeat(done)``, when given, is called after each repeat with the number of repeats done; it
    returns False to stop early (a time budget), leaving every arm with the same number of results.
    """
    if arms < 1 or repeats < 1:
        raise ValueError(f"interleave: expected at least one arm and one repeat, got {arms} and {repeats}")
    results: list[list[T]] = [[] for _ in range(arms)]
    for repeat in range(repeats):
        for position, arm in enumerate(rotation(arms, repeat)):
            results[arm].append(run(Turn(arm, repeat, position)))
        if after_repeat is not None and not after_repeat(repeat + 1):
            break
    return results
