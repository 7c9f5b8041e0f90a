"""Argument parsing and loading shared by the bench commands."""

from __future__ import annotations

import math
from pathlib import Path

from teacache.errors import InputError
from teacache.gate import check_threshold


def parse_numbers(text: str, option: str, what: str, example: str) -> list[tuple[str, float]]:
    """'a,b,c' -> [(item, number), ...]; an InputError naming ``option`` for an empty item among others, an item
    that is not a number or no item at all (``what``: the item's name, ``example``: a valid value)."""
    items = []
    parts = [part.strip() for part in str(text).split(",")]
    if any(not part for part in parts) and any(parts):
        raise InputError(f"{option}: an empty item in {text!r}; expected numbers separated by commas, like {example}")
    for part in parts:
        if not part:
            continue
        try:
            items.append((part, float(part)))
        except ValueError:
            raise InputError(f"{option}: {part!r} is not a number") from None
    if not items:
        raise InputError(f"{option}: expected at least one {what}, like {example}")
    return items


def parse_thresholds(text: str) -> list[float]:
    """'0,0.1,0.2': finite, >= 0, no duplicates; returned sorted."""
    values = []
    for part, value in parse_numbers(text, "--thresholds", "threshold", "0,0.1,0.2"):
        try:
            values.append(check_threshold(value, "--thresholds"))  # the gate's own rule
        except ValueError:
            why = f"{part!r} is not finite" if not math.isfinite(value) else f"{part} is negative"
            raise InputError(f"--thresholds: {why}; thresholds are numbers >= 0 (0 = no skipping)") from None
    duplicates = sorted({v for v in values if values.count(v) > 1})
    if duplicates:
        raise InputError(f"--thresholds: duplicate values {', '.join(f'{v:g}' for v in duplicates)}")
    return sorted(values)


def parse_coefficients(spec: str) -> str | Path | tuple[float, ...]:
    """The form of a --coefficients value, checked without parsing any file: 'packaged', numbers or a path.

    A path is a fit.json, an mlx-teacache calibration (``PATH#SIGNAL`` for one of its signals), a
    coefficient module (.py) or a folder; ``calib.fit.coefficient_sources.resolve_coefficients`` reads it.
    """
    if spec == "packaged":
        return spec
    try:
        coefficients = tuple(float(v) for v in spec.split(","))
    except ValueError:
        return Path(spec.split("#", 1)[0])  # a file, read (and checked to exist) by the command's input check
    if not all(math.isfinite(c) for c in coefficients):
        raise InputError(f"--coefficients: expected finite numbers, got {spec!r}")
    return coefficients
