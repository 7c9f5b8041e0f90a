"""Packaged rescale functions, one module per calibration; each variant's spec names its module.

Each module defines ``RESCALE`` (a :class:`teacache.rescale.RescaleFunction`) and may define
``RECIPE`` (the generation settings it was fitted on). Modules written by ``teacache-calib emit``
carry the fit's provenance as comments next to each constant.
"""

from __future__ import annotations

import importlib

from teacache import variants
from teacache.rescale import RescaleFunction


def module_name(variant: str) -> str:
    """The module under ``teacache.coefficients`` holding a variant's packaged calibration."""
    spec = variants.find(variant)
    if spec is None or spec.coefficients is None:
        raise ValueError(
            f"variant: no packaged coefficients for {variant!r}; known: {', '.join(variants.packaged_variants())}"
        )
    return spec.coefficients


def load_packaged(variant: str) -> RescaleFunction:
    """The packaged rescale function of a variant."""
    return importlib.import_module(f"teacache.coefficients.{module_name(variant)}").RESCALE


def load_recipe(variant: str) -> dict:
    """The generation settings the packaged coefficients were fitted on ({} when unknown)."""
    return dict(getattr(importlib.import_module(f"teacache.coefficients.{module_name(variant)}"), "RECIPE", {}))


def packaged_modules() -> dict[str, str]:
    """variant name -> coefficient module, for every variant with a packaged calibration."""
    return {name: variants.get(name).coefficients for name in variants.packaged_variants()}


PACKAGED_MODULES = packaged_modules()  # a view of the registry
