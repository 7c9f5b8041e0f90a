"""The one error type of the fitting modules, so every command reports a failed fit the same way."""

from __future__ import annotations

from teacache.errors import TeaCacheError


class FitError(TeaCacheError, ValueError):
    """The data or an argument cannot support the requested fit; the message says which and why."""
