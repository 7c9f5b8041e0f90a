"""Packaged rescale functions, one module per calibration; each variant's spec names its module.

Each module defines ``RESCALE`` (a :class:`teacache.rescale.RescaleFunction`), ``FITTED_ON`` (the mflux
release and dtype its traces were recorded on, as far as its source says) and may define ``RECIPE`` (the
generation settings it was fitted on). Modules written by ``teacache-calib emit`` carry the fit's provenance
as comments next to each constant. A published function that several modules use lives in ``_upstream``,
which emit never writes: no module imports from a variant's module, which a refit may rewrite.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass

from teacache import _compat, variants
from teacache._compat import DRIFT_COMMAND, parse_release
from teacache.errors import InputError
from teacache.rescale import RescaleFunction

MFLUX = "mflux"


@dataclass(frozen=True)
class FittedOn:
    """Where a calibration's traces were recorded: which mflux release and compute dtype, as far as its source
    says. Only a known release can tell whether a later mflux changed the numbers the fit describes.

    ``mflux``: the release, or with ``exact=False`` the newest it can have been (the newest release out when the
    source fitted it). ``framework``: another framework when the source did not run mflux; "" when nothing was
    fitted (a provisional function). ``evidence``: where the release comes from.
    """

    mflux: str | None = None
    exact: bool = True
    dtype: str | None = None
    framework: str = MFLUX
    evidence: str = ""

    def describe(self) -> str:
        if not self.framework:
            return "no traces (a provisional function)"
        if self.framework != MFLUX:
            return f"{self.framework}, not mflux"
        release = "an unknown mflux release" if self.mflux is None else f"mflux {self.mflux}"
        if self.mflux is not None and not self.exact:
            release += " or older"
        return release + (f", {self.dtype}" if self.dtype else "")


def module_name(variant: str) -> str:
    """The module under ``teacache.coefficients`` holding a variant's packaged calibration."""
    spec = variants.find(variant)
    if spec is None or spec.coefficients is None:
        raise InputError(
            f"variant: no packaged coefficients for {variant!r}; known: {', '.join(variants.packaged_variants())}"
        )
    return spec.coefficients


def load_packaged(variant: str) -> RescaleFunction:
    """The packaged rescale function of a variant."""
    return importlib.import_module(f"teacache.coefficients.{module_name(variant)}").RESCALE


def load_recipe(variant: str) -> dict:
    """The generation settings the packaged coefficients were fitted on ({} when unknown)."""
    return dict(getattr(importlib.import_module(f"teacache.coefficients.{module_name(variant)}"), "RECIPE", {}))


def fitted_on(variant: str) -> FittedOn:
    """Where the packaged coefficients of a variant were fitted (an unknown release when its module names none)."""
    module = importlib.import_module(f"teacache.coefficients.{module_name(variant)}")
    return getattr(module, "FITTED_ON", FittedOn(evidence="the module names no FITTED_ON"))


def numeric_path(variant: str) -> str:
    """Which of its family's numeric changes the packaged fit ran with, in words."""
    fit = fitted_on(variant)
    changes = variants.family(variants.get(variant).family).numeric_changes
    if not fit.framework:
        return "none: fitted on no traces"
    if fit.framework != MFLUX:
        return f"{fit.framework}'s, not mflux's"
    if not changes:
        return "its family's only one (no mflux release changed its numbers)"
    if fit.mflux is None:
        return "unknown (the mflux release is not known)"
    before = [c.release for c in changes if parse_release(c.release) > parse_release(fit.mflux)]
    if before:
        return f"before mflux {', '.join(before)}"
    if not fit.exact:
        return "unknown (only the newest release it can have run is known)"
    return f"with mflux {', '.join(c.release for c in changes)}"


def packaged_numeric_changes(
    variant: str, release: str | None = None, dtype=None
) -> tuple[variants.NumericChange, ...]:
    """The numeric changes of the variant's family between its packaged fit and mflux ``release`` (default: the
    installed one) that move ``dtype``; empty when none lies between them or when that cannot be known."""
    fit = fitted_on(variant)
    if fit.framework != MFLUX or fit.mflux is None:
        return ()
    release = release or _compat.installed_mflux()
    if not fit.exact and parse_release(release) <= parse_release(fit.mflux):
        return ()  # the fit may be older than ``release`` or not: nothing certain to say
    return variants.numeric_changes_since(variant, fit.mflux, release, dtype)


def numeric_change_note(variant: str, release: str | None = None, dtype=None) -> str | None:
    """One sentence when mflux ``release`` (default: installed) runs the variant's family on another numeric path
    than its packaged coefficients were fitted on; None otherwise."""
    release = release or _compat.installed_mflux()
    changes = packaged_numeric_changes(variant, release, dtype)
    if not changes:
        return None
    fam = variants.family(variants.get(variant).family)
    running = f"mflux {release}" + (f" in {variants.dtype_name(dtype)}" if dtype is not None else "")
    what = "; ".join(f"{c.release}: {c.what}" for c in changes)
    return (
        f"the packaged {variant} coefficients were fitted on {fitted_on(variant).describe()}, and between that "
        f"and {running} mflux changed {fam.label}'s numbers ({what}): check with `{DRIFT_COMMAND}` or refit "
        "(teacache-calib record / fit / emit)"
    )


def packaged_modules() -> dict[str, str]:
    """variant name -> coefficient module, for every variant with a packaged calibration."""
    return {name: variants.get(name).coefficients for name in variants.packaged_variants()}


PACKAGED_MODULES = packaged_modules()  # a view of the registry
