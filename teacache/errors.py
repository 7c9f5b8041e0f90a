"""The one error type of this package and of its commands.

A :class:`TeaCacheError` is a refusal the user can act on: its message is one line that says what to change,
and ``exit_status`` is the status the command ends with. The commands' dispatcher catches it once and prints
that line; any other exception is a bug and keeps its traceback.
"""

from __future__ import annotations


class TeaCacheError(Exception):
    """A refusal the user can act on: one line (the message), and the status the command ends with."""

    exit_status = 2  # bad input, like argparse's own errors


class InputError(TeaCacheError, ValueError):
    """An argument, a file or a value the user gave is refused; the message names it and what was expected.

    A ValueError too, so code that catches ValueError around this package keeps working.
    """


class InputTypeError(TeaCacheError, TypeError):
    """An argument of a type this package cannot use (a threshold that is no number, a pipeline of no known
    family); the message names it and what was expected. A TypeError too, as it was before."""


def one_line(message: object) -> str:
    """A message as a command prints it: its whitespace (newlines too) collapsed to single spaces."""
    return " ".join(str(message).split())


class StateError(TeaCacheError, RuntimeError):
    """An object is used in a state that cannot serve the call (a restored handle entered again): the message says
    what to do instead. A RuntimeError too, as such misuse was before."""
