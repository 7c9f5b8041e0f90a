"""Warnings that point at the line that called into teacache or mflux, wherever inside them they are raised.

A recipe mismatch is found in a callback mflux calls from ``generate_image``: a fixed ``stacklevel`` would name a
line of mflux or of this package, never the user's ``generate_image`` or ``apply_teacache`` call.
"""

from __future__ import annotations

import os
import sys
import warnings

_PACKAGE = os.path.dirname(os.path.abspath(__file__))


def _internal() -> tuple[str, ...]:
    """Folders whose frames a warning skips: this package, and mflux and MLX once imported."""
    folders = [_PACKAGE]
    for name in ("mflux", "mlx"):
        module = sys.modules.get(name)
        folders += [os.path.abspath(p) for p in getattr(module, "__path__", ()) or ()]
    return tuple(folder + os.sep for folder in folders)


def _bootstrap(frame) -> bool:
    """A frame of the import machinery, which ``warnings.warn`` does not count as a stack level."""
    filename = frame.f_code.co_filename
    return "importlib" in filename and "_bootstrap" in filename


def _next_counted(frame):
    """The caller of ``frame`` as ``warnings.warn`` counts stack levels: import machinery skipped."""
    frame = frame.f_back
    while frame is not None and _bootstrap(frame):
        frame = frame.f_back
    return frame


def warn(message: str, category: type[Warning]) -> None:
    """``warnings.warn`` attributed to the first frame outside teacache, mflux and MLX (a warning raised while a
    module of this package imports names the user's ``import`` line, not the import machinery)."""
    internal = _internal()
    frame, level = sys._getframe(1), 2
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(internal):
        frame, level = _next_counted(frame), level + 1
    warnings.warn(message, category, stacklevel=level)
