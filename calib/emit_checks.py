"""What emit checks in a fit before it writes anything: that the selected function is the one its scores belong
to, and that it passes the fit's safety check (:func:`teacache.safety.check_given`).

A fit.json edited by hand (coefficients negated or zeroed) still carries the R^2 and the safety record of the
function it replaced; a module emitted from it would print those next to other numbers. The selected candidate is
compared with the candidate of its label and with its own safety record, both written by the fit.
"""

from __future__ import annotations

import sys
import warnings

from calib.fit.errors import FitError
from calib.fit.result import FitResult
from teacache.safety import UnsafeRescaleWarning, check, check_given


def check_emittable(result: FitResult, prog: str, allow_unsafe: bool = False) -> None:
    """FitError when the selected function is not the one the fit scored, or is positive nowhere on its range
    (unless ``allow_unsafe``); one warning line on stderr when it is unsafe somewhere."""
    sel = result.selected
    same_label = [c for c in result.candidates or () if c.label == sel.label]
    if same_label and not any(c.function == sel.function for c in same_label):
        raise FitError(
            f"FIT: the selected {sel.label} holds other numbers than the candidate {sel.label} that the fit scored "
            f"(R^2 {sel.r2:.4f}): the file was edited; refit with teacache-calib fit instead of editing fit.json"
        )
    recorded = sel.get("safety") or {}
    rescale = result.rescale
    if recorded.get("safe") is True and not check(rescale)["safe"]:
        raise FitError(
            f"FIT: the selected {sel.label} is recorded safe but its numbers are not: the file was edited; refit "
            "with teacache-calib fit instead of editing fit.json"
        )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", UnsafeRescaleWarning)
        check_given(rescale, f"FIT {sel.label}", allow_unsafe, insist="--allow-unsafe")
    for warning in caught:
        print(f"{prog}: warning: {warning.message}", file=sys.stderr)
