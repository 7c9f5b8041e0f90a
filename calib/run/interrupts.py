"""Ctrl-C during a long command: one line that says what is saved and how to resume, exit 130.

mflux turns a KeyboardInterrupt inside its denoising loop into StopImageGenerationException; both
mean the user stopped the command.
"""

from __future__ import annotations

from teacache.errors import TeaCacheError


class Interrupted(TeaCacheError):
    """The user stopped the command; the message says what is saved and how to resume."""

    exit_status = 130  # 128 + SIGINT, what a shell reports for Ctrl-C


def interruptions() -> tuple[type[BaseException], ...]:
    """The exception types a Ctrl-C arrives as (for an ``except`` clause)."""
    try:
        from mflux.utils.exceptions import StopImageGenerationException
    except ImportError:  # mflux not importable: only Python's own
        return (KeyboardInterrupt,)
    return (KeyboardInterrupt, StopImageGenerationException)
