"""Does an open-scenes image show what its caption names? Colour, shape and position, from pixels alone.

The caption names one object; everything else in the picture is chance (``teacache.models.open_data``),
so the checker looks for that object only. The image is smoothed over 3x3 pixels (the grain is
independent per pixel), every pixel within COLOR_RADIUS of the named colour is a candidate, and the
largest connected region of candidates is the object: present if it covers at least MIN_AREA_SHARE of
the smallest object the recipe draws; its shape the nearest of the three fill ratios of its bounding
box (triangle ~0.5, circle ~0.79, square 1); its position the anchor nearest to its centroid. The
other objects never have the named colour, so they cannot be mistaken for it. A caption that leaves the
shape open ("a red shape") is not scored on shape, as one that leaves the position open is not on position.
"""

from __future__ import annotations

import numpy as np
from scipy import ndimage

from teacache.models.open_data import (
    COLORS,
    POSITIONS,
    SHAPES,
    SIZE_RANGE,
    OpenSpec,
    captions_of,
    parse_prompt,
    shape_masks,
)

COLOR_RADIUS = 0.3  # Euclidean distance in RGB [0, 1] after smoothing (measured on rendered images)
MIN_AREA_SHARE = 0.35
AREA_PER_RADIUS2 = {"circle": np.pi, "square": 1.7**2, "triangle": 0.5 * 1.8 * 2 * 0.62 * 1.8}  # open_data's solids
CHECKS = ("color", "shape", "position")


def _rgb01(image) -> np.ndarray:
    array = np.asarray(image)
    if array.dtype == np.uint8:
        return array.astype(np.float64) / 255.0
    return np.clip((array.astype(np.float64) + 1.0) / 2.0, 0.0, 1.0)  # rendered [-1, 1]


def best_shape(region: np.ndarray, cx: float, cy: float) -> str:
    """The shape whose solid of the same area and centroid overlaps ``region`` best (intersection over union)."""
    area = region.sum()
    ious = {}
    for index, shape in enumerate(SHAPES):
        radius = np.sqrt(area / AREA_PER_RADIUS2[shape])
        solid = shape_masks(np.array([index]), np.array([cx]), np.array([cy]), np.array([radius]), region.shape[0])[0]
        ious[shape] = (solid & region).sum() / max(1, (solid | region).sum())
    return max(ious, key=ious.get)


def check(image, spec: OpenSpec) -> dict[str, bool | None]:
    """{"color", "shape", "position", "all"}: True/False; shape or position None when the caption leaves it open."""
    rgb = ndimage.uniform_filter(_rgb01(image), size=(3, 3, 1), mode="nearest")
    size = rgb.shape[0]
    target = np.array(COLORS[spec.color], dtype=np.float64) / 255.0
    labels, count = ndimage.label(np.linalg.norm(rgb - target, axis=-1) < COLOR_RADIUS)
    min_area = MIN_AREA_SHARE * 0.5 * (2 * SIZE_RANGE[0] * size) ** 2  # half the smallest bounding square
    result: dict[str, bool | None] = {
        "color": False,
        "shape": None if spec.shape is None else False,
        "position": None if spec.position is None else False,
    }
    if count:
        areas = ndimage.sum_labels(np.ones_like(labels), labels, index=np.arange(1, count + 1))
        best = int(np.argmax(areas)) + 1
        region = labels == best
        if areas[best - 1] >= min_area:
            result["color"] = True
            rows, cols = np.nonzero(region)
            if spec.shape is not None:
                result["shape"] = best_shape(region, cols.mean() + 0.5, rows.mean() + 0.5) == spec.shape
            if spec.position is not None:
                centre = np.array([cols.mean() + 0.5, rows.mean() + 0.5]) / size
                nearest = min(POSITIONS, key=lambda p: np.sum((np.array(POSITIONS[p]) - centre) ** 2))
                result["position"] = nearest == spec.position
    result["all"] = all(v for v in result.values() if v is not None)
    return result


def summarize(results: list[dict[str, bool | None]]) -> dict[str, float]:
    """Share passed per check (shape and position over the captions that name one; NaN: none does) and overall."""
    out = {}
    for key in (*CHECKS, "all"):
        values = [r[key] for r in results if r[key] is not None]
        out[key] = float(np.mean(values)) if values else float("nan")
    return out


def score_adherence(image, spec_or_prompt: OpenSpec | str) -> dict:
    """The checks of :func:`check` and ``score``, the share of the applicable ones passed (the sweep's scorer)."""
    if isinstance(spec_or_prompt, str):
        spec = parse_prompt(spec_or_prompt, captions=captions_of(spec_or_prompt))
    else:
        spec = spec_or_prompt
    result = check(image, spec)
    applicable = [result[k] for k in CHECKS if result[k] is not None]
    return {**result, "score": float(sum(applicable)) / len(applicable)}
