"""Which adherence scorer reads a variant's images: each embedded model draws its own vocabulary.

Keyed by the module that builds the model (its spec's ``builder``), so that a variant's name stays
spelled in its spec and its builder only.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable

from teacache import variants
from teacache.errors import InputError

SCORERS: dict[str, str] = {  # builder module -> module with score_adherence(image, prompt) -> {"score": ...}
    "teacache.models.shapes": "bench.quality.adherence",
    "teacache.models.open_models": "bench.quality.open_adherence",
}


def scorer_module(builder: str | None) -> str | None:
    """The scoring module for a ``"module:function"`` builder; None when no scorer reads its images."""
    return SCORERS.get((builder or "").partition(":")[0])


def scores_adherence(variant: str) -> bool:
    """Whether a scorer reads the variant's images (its embedded model draws its prompts' vocabulary)."""
    return scorer_module(variants.get(variant).builder) is not None


def adherence_scorer(variant: str) -> Callable[[object, str], float]:
    """``(image, prompt) -> score in [0, 1]`` for a variant that ``scores_adherence``."""
    module = scorer_module(variants.get(variant).builder)
    if module is None:
        raise InputError(f"{variant}: no adherence scorer reads its images (bench.quality.scorers.SCORERS)")
    score = importlib.import_module(module).score_adherence  # heavy: imported when asked for
    return lambda image, prompt: float(score(image, prompt)["score"])
