"""Argument parsing and loading shared by the bench commands."""

from __future__ import annotations

import math
from pathlib import Path

from teacache.gate import check_threshold
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
        try:
            values.append(check_threshold(value, "--thresholds"))  # the gate's own rule
        except ValueError:
            why = f"{part!r} is not finite" if not math.isfinite(value) else f"{part} is negative"
            raise ValueError(f"--thresholds: {why}; thresholds are numbers >= 0 (0 = no skipping)") from None
    if not values:
        raise ValueError("--thresholds: expected at least one threshold, like 0,0.1,0.2")
    duplicates = sorted({v for v in values if values.count(v) > 1})
    if duplicates:
        raise ValueError(f"--thresholds: duplicate values {', '.join(f'{v:g}' for v in duplicates)}")
    return sorted(values)


def parse_coefficients(spec: str) -> str | Path | RescaleFunction:
    """The form of a --coefficients value, checked without reading any file: 'packaged', a path or numbers."""
    if spec == "packaged":
        return spec
    if Path(spec).suffix == ".json":
        return Path(spec)
    try:
        coefficients = tuple(float(v) for v in spec.split(","))
    except ValueError:
        raise ValueError(
            f"--coefficients: expected 'packaged', a fit.json or numbers highest power first, got {spec!r}"
        ) from None
    if not all(math.isfinite(c) for c in coefficients):
        raise ValueError(f"--coefficients: expected finite numbers, got {spec!r}")
    return RescaleFunction(coefficients, provenance={"source": "command line"})


def resolve_rescale(spec: str, variant: str | None) -> RescaleFunction:
    """'packaged' (the variant's module), a fit.json from teacache-calib fit, or 'c4,c3,...,c0'."""
    parsed = parse_coefficients(spec)
    if isinstance(parsed, RescaleFunction):
        return parsed
    if isinstance(parsed, Path):
        from calib.fit import rescale_from_fit

        if not parsed.exists():
            raise ValueError(f"--coefficients: {spec} does not exist")
        try:
            return rescale_from_fit(parsed)
        except (ValueError, KeyError, TypeError) as exc:
            raise ValueError(f"--coefficients: {spec} is not a usable fit.json ({exc})") from None
    from teacache.coefficients import load_packaged

    return load_packaged(variant)
