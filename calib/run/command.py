"""How every command ends: a refusal (:class:`~teacache.errors.TeaCacheError`) becomes one line and its status.

:func:`run_command` is the one place that turns a refusal into ``prog: message`` on stderr and the error's
``exit_status`` (2 for bad input, 130 when interrupted, 1 when ranks left work undone); the dispatcher runs every
subcommand through it, and :func:`command` routes a module's own ``main`` (``python -m``, a test, another
command calling it) through it too. Any other exception is a bug: it propagates, traceback and all.
"""

from __future__ import annotations

import argparse
import functools
import sys
from collections.abc import Callable

from teacache.errors import TeaCacheError, one_line


def run_command(prog: str, action: Callable[..., int | None], *args, **kwargs) -> int:
    """``action(*args, **kwargs)``'s exit code (None counts as 0); a refusal prints ``prog: message`` and ends
    with its ``exit_status``."""
    try:
        return action(*args, **kwargs) or 0
    except TeaCacheError as exc:
        print(f"{prog}: {one_line(exc)}", file=sys.stderr)
        return exc.exit_status


def parsed(parser: argparse.ArgumentParser, argv: list[str] | None) -> tuple[list[str], argparse.Namespace | int]:
    """``argv`` (the process's own when None) and what ``parser`` makes of it, or the exit status that --help or a
    usage error ends with (argparse has printed what it had to say)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        return argv, parser.parse_args(argv)
    except SystemExit as exc:
        return argv, int(exc.code or 0)


def command(prog: str) -> Callable[[Callable[..., int | None]], Callable[..., int]]:
    """Decorator of a module's ``main(argv)``: it ends through :func:`run_command` under ``prog``."""

    def decorate(main: Callable[..., int | None]) -> Callable[..., int]:
        @functools.wraps(main)
        def guarded(*args, **kwargs) -> int:
            return run_command(prog, main, *args, **kwargs)

        return guarded

    return decorate
