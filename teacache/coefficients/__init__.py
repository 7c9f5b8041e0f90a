"""Packaged rescale functions, one module per variant family.

Each module defines ``RESCALE`` (a :class:`teacache.rescale.RescaleFunction`) and may define
``RECIPE`` (the generation settings it was fitted on). Modules written by ``teacache-calib emit``
carry the fit's provenance as comments next to each constant.
"""

from __future__ import annotations

import importlib

from teacache.rescale import RescaleFunction

# variant name -> module under teacache.coefficients
PACKAGED_MODULES = {
    "flux1-dev": "flux1",
    "flux1-schnell": "flux1",
    "flux1-krea-dev": "flux1_krea",
    "tiny-flux1": "tiny_flux1",
    "tiny-shapes": "tiny_shapes",
    "tiny-flux2": "tiny_flux2",
    "flux2-klein-4b": "flux2_klein_4b",
    "flux2-klein-9b": "flux2_klein_9b",
    "flux2-klein-base-4b": "flux2_klein_base_4b",
    # flux2-klein-base-9b: no published calibration; pass coefficients= or run teacache-calib
    "qwen-image": "qwen_image",
    "qwen-image-2512": "qwen_image_2512",
    "tiny-qwen-image": "tiny_qwen_image",
    "z-image": "z_image",
    "tiny-z-image": "tiny_z_image",
}


def module_name(variant: str) -> str:
    try:
        return PACKAGED_MODULES[variant]
    except KeyError:
        raise ValueError(
            f"variant: no packaged coefficients for {variant!r}; known: {', '.join(sorted(PACKAGED_MODULES))}"
        ) from None


def load_packaged(variant: str) -> RescaleFunction:
    """The packaged rescale function of a variant (re-imported, so a freshly emitted module is seen)."""
    module = importlib.import_module(f"teacache.coefficients.{module_name(variant)}")
    return module.RESCALE


def load_recipe(variant: str) -> dict:
    module = importlib.import_module(f"teacache.coefficients.{module_name(variant)}")
    return dict(getattr(module, "RECIPE", {}))
