"""Which adherence scorer reads a variant's images: each embedded model draws its own vocabulary."""

from __future__ import annotations

import importlib
from collections.abc import Callable

SCORERS: dict[str, str] = {  # variant -> module with score_adherence(image, prompt) -> {"score": ...}
    "tiny-shapes": "bench.quality.adherence",
    "tiny-scenes": "bench.quality.scene_adherence",
}


def adherence_scorer(variant: str) -> Callable[[object, str], float]:
    """``(image, prompt) -> score in [0, 1]`` for a variant whose spec has ``scores_adherence``."""
    if variant not in SCORERS:
        raise ValueError(
            f"{variant}: no adherence scorer; expected one of {', '.join(SCORERS)} (bench.quality.scorers)"
        )
    score = importlib.import_module(SCORERS[variant]).score_adherence  # heavy: imported when asked for
    return lambda image, prompt: float(score(image, prompt)["score"])
