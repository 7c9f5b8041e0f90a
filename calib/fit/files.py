"""What ``teacache-calib fit`` writes into its folder, and how the output rule (:mod:`teacache.outputs`) tells a
folder it wrote. Light to import: a campaign checks its fit folder with it before it loads anything heavy."""

from __future__ import annotations

import os
from pathlib import Path

from teacache.outputs import Writes

PROG = "teacache-calib fit"
FIT_FILE = "fit.json"
PLOT_FILES = {
    "scatter": "fit_scatter.png",
    "residuals": "fit_residuals.png",
    "cv": "fit_cv.png",
    "decision": "fit_decision.png",  # drawn by calib.fit.decision_plot.plot_decision_curves from the decision result
}


def check_out(out: str | os.PathLike) -> None:
    """FitError when ``out`` is something other than a folder (or nothing yet): fit.json goes into it."""
    from calib.fit.errors import FitError

    out = Path(out)
    if out.exists() and not out.is_dir():
        raise FitError(f"--out: {out} exists and is not a folder")


def is_fit(path: Path) -> bool:
    """``path`` is a fit.json this command wrote (its fields and format version)."""
    # heavy (numpy, through the rescale functions): loaded only when a folder holds a fit.json
    from calib.fit.errors import FitError
    from calib.fit.result import FitResult

    try:
        FitResult.read(path)
    except FitError:
        return False
    return True


# fit.json and its plots, in a folder of its own (a fit.json it wrote marks it; notes beside it are kept)
WRITES = Writes(PROG, names=(FIT_FILE, *PLOT_FILES.values()), marker=FIT_FILE, is_own=is_fit)
