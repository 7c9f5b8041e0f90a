"""Variant adapters: the only modules that know mflux classes.

Each adapter module exposes FAMILY and the functions ``matches(model)``, ``is_applied(model)``,
``variant(model)`` and ``install(model, controller, proxy_class=...) -> restore``, and ``FBCACHE_PROXY``, the
proxy class First-Block Cache installs (:mod:`teacache.fbcache`: block 0 every step, the rest cached). What a
variant is (names, thresholds, calibration) lives in the registry, ``teacache.variants``.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from teacache import variants
from teacache.errors import InputTypeError


def adapters() -> list[ModuleType]:
    found = []
    for fam in variants.families():
        name = f"teacache.adapters.{fam.adapter}"
        try:
            found.append(importlib.import_module(name))
        except ModuleNotFoundError as exc:
            if exc.name != name:
                raise
    return found


def supported_variants() -> list[str]:
    return list(variants.names())


def adapter_for(model) -> ModuleType:
    for module in adapters():
        if module.matches(model):
            return module
    raise InputTypeError(
        f"model: TeaCache does not support {type(model).__name__}; supported variants: "
        f"{', '.join(supported_variants())}"
    )
