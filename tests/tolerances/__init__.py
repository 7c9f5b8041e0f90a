"""Tolerance constants for the tests, one generated module per hardware.

``teacache-bench tolerances`` writes ``tests/tolerances/<hardware-slug>.py``. The tests load the module of
the hardware they run on; where none exists they fall back to ``provisional.py`` and say so once.
"""

from __future__ import annotations

import importlib
import warnings
from types import ModuleType


def load_tolerances(slug: str | None = None) -> ModuleType:
    from teacache.provenance import hardware_slug, tolerance_module_name

    slug = slug or hardware_slug()
    try:
        return importlib.import_module(f"tests.tolerances.{tolerance_module_name(slug)}")
    except ModuleNotFoundError:
        warnings.warn(
            f"no tolerance module for hardware {slug!r}: using tests/tolerances/provisional.py "
            "(provisional constants; derive real ones with teacache-bench tolerances)",
            UserWarning,
            stacklevel=2,
        )
        return importlib.import_module("tests.tolerances.provisional")
