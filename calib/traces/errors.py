"""The one error type of the trace reader, so every command that reads traces refuses a bad table the same way."""

from __future__ import annotations

from teacache.errors import TeaCacheError


class TraceError(TeaCacheError, ValueError):
    """Unusable trace input; the message says which argument or column and what was expected."""
