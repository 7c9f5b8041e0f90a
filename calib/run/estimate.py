"""How long a command's generations will take, from one timed on this machine, and the confirmation above an hour.

A plan line that says "9 pairs x 6 arms x 2 repeats" does not say whether that is a minute or a week; a
per-step time measured by the command's own warm-up does. The estimate is an upper bound: TeaCache runs
skip steps, and the warm-up may include compilation.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable
from dataclasses import dataclass

from teacache.errors import InputError

# Above this much estimated work a command asks for --yes before it measures anything.
CONFIRM_ABOVE_S = 3600.0


@dataclass(frozen=True)
class Work:
    """What is left to run: whole generations of ``steps`` denoising steps each."""

    generations: int
    steps: int

    def seconds(self, per_step_s: float) -> float:
        return self.generations * self.steps * per_step_s


def clock(seconds: float) -> str:
    """'1 day, 2:03:04' style, whole seconds."""
    return str(datetime.timedelta(seconds=round(seconds)))


def describe(work: Work, per_step_s: float, source: str) -> str:
    """The estimate line printed (and logged) before the measured runs start."""
    return (
        f"estimate: at most {clock(work.seconds(per_step_s))} for {work.generations} generations x {work.steps} "
        f"steps at {per_step_s:.3g} s/step ({source})"
    )


def check_confirmed(
    work: Work,
    per_step_s: float,
    yes: bool,
    fewer: str = "prompts, seeds, thresholds or repeats",
    what: str = "this is",
) -> None:
    """Raise InputError naming --yes when the work is estimated above an hour and was not confirmed; ``what``
    names the work when it is not the command's own (a campaign's later stage)."""
    seconds = work.seconds(per_step_s)
    if seconds > CONFIRM_ABOVE_S and not yes:
        raise InputError(
            f"--yes: {what} about {clock(seconds)} of work ({work.generations} generations x {work.steps} steps at "
            f"{per_step_s:.3g} s/step); pass --yes to run it, or ask for fewer {fewer}"
        )


def per_step(
    first_s: float, again: Callable[[], float], work: Work, yes: bool, later: Work | None = None
) -> tuple[float, str]:
    """(seconds per step, where it came from): the first (warm-up) generation's ``first_s`` over its steps, or,
    where that estimate would ask for --yes for ``work`` or the ``later`` stage checked with the same figure, one
    more generation timed by ``again`` (compiled by then)."""
    measured = first_s / work.steps
    if all(w.seconds(measured) <= CONFIRM_ABOVE_S for w in (work, later) if w is not None) or yes:
        return measured, "the warm-up's vanilla run, compilation included"
    return again() / work.steps, "a vanilla run after the warm-up"
