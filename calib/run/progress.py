"""How long commands say how far they are: a live bar on a terminal, plain lines anywhere else.

A bar redrawn in place says nothing to a log file or a CI job until the command exits; there each
finished unit (a run, a pair) prints one line with done / total and the ETA, at most one line per
``MIN_INTERVAL_S`` seconds (the last one always), flushed at once. Nothing left to do prints nothing,
not an empty bar. With ``log``, every unit also appends a timestamped line to that file (``progress.log``
in the output folder), so a long run can be watched from anywhere, terminal or not.
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TextIO

from rich.progress import Progress

from teacache.io import append_log  # noqa: F401  (the log line, re-exported for the commands that write one)

MIN_INTERVAL_S = 10.0  # lines closer together than this are folded into the next one


def _clock(seconds: float) -> str:
    seconds = int(round(seconds))
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


class ProgressLines:
    """Plain progress lines: ``label: 3/16 pairs done, 0:00:42 elapsed, ETA 0:03:02``."""

    def __init__(
        self,
        label: str,
        total: int,
        noun: str,
        stream: TextIO | None = None,
        min_interval_s: float = MIN_INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.label, self.total, self.noun = label, total, noun
        self.stream = stream
        self.min_interval_s, self.clock = min_interval_s, clock
        self.done = 0
        self.start = clock()
        self.last_line: float | None = None

    def line(self) -> str:
        elapsed = self.clock() - self.start
        eta = elapsed / self.done * (self.total - self.done) if self.done else None
        return (
            f"{self.label}: {self.done}/{self.total} {self.noun} done, {_clock(elapsed)} elapsed, "
            f"ETA {_clock(eta) if eta is not None else 'unknown'}"
        )

    def advance(self, n: int = 1) -> None:
        self.done += n
        now = self.clock()
        last = self.done >= self.total
        if last or self.last_line is None or now - self.last_line >= self.min_interval_s:
            stream = self.stream or sys.stdout
            print(self.line(), file=stream, flush=True)
            self.last_line = now


class _Bar:
    def __init__(self, progress, task) -> None:
        self.progress, self.task = progress, task

    def advance(self, n: int = 1) -> None:
        self.progress.advance(self.task, n)


class _Nothing:
    def advance(self, n: int = 1) -> None:
        pass


class _Logged:
    """Advances what the terminal shows and appends each unit's line to the log file."""

    def __init__(self, shown, lines: ProgressLines, path: Path) -> None:
        self.shown, self.lines, self.path = shown, lines, path

    def advance(self, n: int = 1) -> None:
        self.shown.advance(n)
        self.lines.done += n
        append_log(self.path, self.lines.line())


@contextlib.contextmanager
def track(
    label: str, total: int, noun: str, stream: TextIO | None = None, log: Path | None = None
) -> Iterator[ProgressLines | _Bar | _Nothing | _Logged]:
    """The progress of ``total`` units: ``.advance()`` after each one (and a line into ``log`` for each)."""
    if total <= 0:
        yield _Nothing()
        return
    stream = stream or sys.stdout
    if log is not None:
        append_log(log, f"{label}: {total} {noun} to do")
    with _shown(label, total, noun, stream) as shown:
        yield shown if log is None else _Logged(shown, ProgressLines(label, total, noun, stream), log)


@contextlib.contextmanager
def _shown(label: str, total: int, noun: str, stream: TextIO) -> Iterator[ProgressLines | _Bar]:
    if not stream.isatty():
        yield ProgressLines(label, total, noun, stream)
        return
    with Progress() as progress:
        yield _Bar(progress, progress.add_task(label, total=total))
