"""Argument parsing and loading shared by the bench commands."""

from __future__ import annotations

import math
from pathlib import Path

from teacache.rescale import RescaleFunction


def parse_thresholds(text: str) -> list[float]:
    """'0,0.1,0.2': finite, >= 0, no duplicates; returned sorted."""
    values = []
    for part in str(text).split(","):
        part = part.strip()
        if not part:
            continue
        try:
            value = float(part)
        except ValueError:
            raise ValueError(f"--thresholds: {part!r} is not a number") from None
        if math.isnan(value) or math.isinf(value):
            raise ValueError(f"--thresholds: {part!r} is not finite; thresholds are numbers >= 0")
        if value < 0:
            raise ValueError(f"--thresholds: {part} is negative; thresholds are numbers >= 0 (0 = no skipping)")
        values.append(value)
    if not values:
        raise ValueError("--thresholds: expected at least one threshold, like 0,0.1,0.2")
    duplicates = sorted({v for v in values if values.count(v) > 1})
    if duplicates:
        raise ValueError(f"--thresholds: duplicate values {', '.join(f'{v:g}' for v in duplicates)}")
    return sorted(values)


def resolve_rescale(spec: str, variant: str) -> RescaleFunction:
    """'packaged' (the variant's module), a fit.json from teacache-calib fit, or 'c4,c3,...,c0'."""
    from teacache.coefficients import load_packaged

    if spec == "packaged":
        return load_packaged(variant)
    if Path(spec).suffix == ".json":
        from calib.fit import rescale_from_fit

        if not Path(spec).exists():
            raise ValueError(f"--coefficients: {spec} does not exist")
        return rescale_from_fit(spec)
    try:
        coefficients = tuple(float(v) for v in spec.split(","))
    except ValueError:
        raise ValueError(
            f"--coefficients: expected 'packaged', a fit.json or numbers highest power first, got {spec!r}"
        ) from None
    return RescaleFunction(coefficients, provenance={"source": "command line"})
