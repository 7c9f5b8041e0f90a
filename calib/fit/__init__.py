"""Fitting rescale functions to traces: :func:`fit` with :class:`FitOptions` (``fitting``, ``options``), which
``teacache-calib fit`` (``command``) runs; candidate rescale functions, fitting, selection, decision scores,
fit.json (``result``: the one reader and writer), its plots, and where a rescale function to use or score comes
from (``coefficient_sources``).

``fit`` and ``FitOptions`` load on first use: importing a light module of this package (``files``, which a
campaign checks its folder with) does not load pandas and the fitting code.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from calib.fit.fitting import fit
    from calib.fit.options import FitOptions

__all__ = ["FitOptions", "fit"]


def __getattr__(name: str):
    if name == "fit":
        from calib.fit.fitting import fit

        return fit
    if name == "FitOptions":
        from calib.fit.options import FitOptions

        return FitOptions
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
