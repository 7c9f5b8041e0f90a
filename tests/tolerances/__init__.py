"""Tolerance constants for the tests, one generated module per hardware.

``teacache-bench tolerances`` writes ``tests/tolerances/<hardware-slug>.py``. The tests load the module of
the hardware they run on; where none exists they fall back to ``provisional.py`` (constants measured on other
hardware, read at import) and say so once. Each variant's constants come with the (prompt, seed) pairs they
were measured on (``<VARIANT>_CASES``): a test that checks a measured bound runs on one of those. A module may
also hold the quantized no-op bounds of full-size FLUX.1-dev measured on its hardware (``quantized_noop_bounds``).
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


def provisional_variants(module: ModuleType) -> dict[str, str]:
    """variant -> why its constants are provisional though the module's STATUS may say calibrated."""
    out = {v: "kept from an earlier derivation here" for v in getattr(module, "KEPT", ())}
    out.update({v: f"measured on {hw}" for v, hw in getattr(module, "PROVISIONAL_FROM", {}).items()})
    return out


def describe(module: ModuleType) -> str:
    """One line: the module, its status, and which variants' constants are provisional and why."""
    line = f"{module.__name__.replace('.', '/')}.py ({module.STATUS})"
    by_reason: dict[str, list[str]] = {}
    for variant, why in provisional_variants(module).items():
        by_reason.setdefault(why, []).append(variant)
    for why, variants in by_reason.items():
        line += f"; provisional ({why}): {', '.join(variants)}"
    return line


def measured_cases(module: ModuleType, variant: str) -> tuple[tuple[str, str, int], ...]:
    """The (prompt id, prompt, seed) pairs the module's constants for ``variant`` were measured on."""
    from bench.tolerances.module import prefix

    name = f"{prefix(variant)}_CASES"
    cases = getattr(module, name, ())
    if not cases:
        raise LookupError(f"{module.__name__} has no {name}: re-derive it (docs/tolerances.md: Re-derive tolerances)")
    return cases


def measured_case(module: ModuleType, variant: str, index: int = 0) -> tuple[str, int]:
    """(prompt, seed) of the ``index``-th measured pair (wrapping around), for a test of a measured bound."""
    cases = measured_cases(module, variant)
    _, prompt, seed = cases[index % len(cases)]
    return prompt, seed


def quantized_noop_bounds(module: ModuleType, bits: int) -> dict:
    """The settings, max-abs and relative RMS bounds of the quantized no-op at ``bits`` measured on this hardware;
    LookupError saying how to measure and derive them where the module has none."""
    from bench.tolerances.quantized_noop import ARG, SCRIPT, constant_name

    names = {kind: constant_name(bits, kind) for kind in ("SETTINGS", "MAX_ABS", "REL_RMS")}
    missing = [name for name in names.values() if not hasattr(module, name)]
    if missing:
        raise LookupError(
            f"{module.__name__} has no {', '.join(missing)}: measure them on this hardware with "
            f"QUANT={bits} KEEP_BF16=x_embedder python3 {SCRIPT} STEPS SIZE REPEATS OUT.json and derive them with "
            f"teacache-bench tolerances RUNS... {ARG} OUT.json (docs/tolerances.md: The quantized no-op at full size)"
        )
    return {kind.lower(): getattr(module, name) for kind, name in names.items()}
