"""Variant adapters: the only modules that know mflux classes.

Each adapter module exposes FAMILY, VARIANTS, DEFAULT_THRESHOLD and the functions ``matches(model)``,
``is_applied(model)``, ``variant(model)`` and ``install(model, controller) -> restore``.
"""

from __future__ import annotations

import importlib
from types import ModuleType

ADAPTER_MODULES = (
    "teacache.adapters.flux1",
    "teacache.adapters.flux2",
    "teacache.adapters.qwen",
    "teacache.adapters.zimage",
)


def adapters() -> list[ModuleType]:
    found = []
    for name in ADAPTER_MODULES:
        try:
            found.append(importlib.import_module(name))
        except ModuleNotFoundError as exc:
            if exc.name != name:
                raise
    return found


def supported_variants() -> list[str]:
    return [v for module in adapters() for v in module.VARIANTS]


def adapter_for(model) -> ModuleType:
    for module in adapters():
        if module.matches(model):
            return module
    raise TypeError(
        f"model: TeaCache does not support {type(model).__name__}; supported variants: "
        f"{', '.join(supported_variants())}"
    )


def variant_setting(variant: str, table: str):
    """A per-variant gate setting (``DEFAULT_THRESHOLD``, ``SKIP_FIRST_N_STEPS``) without a loaded model."""
    for module in adapters():
        if variant in module.VARIANTS:
            values = getattr(module, table)
            return values.get(variant, values["*"])
    raise ValueError(f"variant: unknown variant {variant!r}; supported: {', '.join(supported_variants())}")
