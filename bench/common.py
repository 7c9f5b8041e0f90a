"""Argument parsing and loading shared by the bench commands."""

from __future__ import annotations

import math
from pathlib import Path

from teacache.gate import check_threshold


def parse_thresholds(text: str) -> list[float]:
    """'0,0.1,0.2': finite, >= 0, no duplicates; returned sorted."""
    values = []
    parts = [part.strip() for part in str(text).split(",")]
    if any(not part for part in parts) and any(parts):
        raise ValueError(f"--thresholds: an empty item in {text!r}; expected numbers separated by commas, like 0,0.1")
    for part in parts:
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


def parse_coefficients(spec: str) -> str | Path | tuple[float, ...]:
    """The form of a --coefficients value, checked without parsing any file: 'packaged', numbers or a path.

    A path is a fit.json, an mlx-teacache calibration (``PATH#SIGNAL`` for one of its signals), a
    coefficient module (.py) or a folder; ``calib.coefficient_sources.resolve_coefficients`` reads it.
    """
    if spec == "packaged":
        return spec
    try:
        coefficients = tuple(float(v) for v in spec.split(","))
    except ValueError:
        return Path(spec.split("#", 1)[0])  # a file, read (and checked to exist) by the command's input check
    if not all(math.isfinite(c) for c in coefficients):
        raise ValueError(f"--coefficients: expected finite numbers, got {spec!r}")
    return coefficients
