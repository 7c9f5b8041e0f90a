"""Which scorer reads which variant's images, and the sweep's use of it."""

from __future__ import annotations

import importlib
import importlib.util

import numpy as np
import pytest

from bench.quality import scorers
from bench.sweep import measure
from teacache import variants


def test_the_trained_models_and_only_they_score_adherence():
    """A scorer reads the vocabulary a trained model draws; random weights draw nothing to score."""
    scoring = {spec.name for spec in variants.all_specs() if scorers.scores_adherence(spec.name)}
    assert scoring
    assert scoring == {spec.name for spec in variants.all_specs() if spec.trained}


def test_each_builder_names_a_real_model_and_scorer():
    for builder, scorer in scorers.SCORERS.items():
        assert hasattr(importlib.import_module(scorer), "score_adherence")
        assert importlib.util.find_spec(builder) is not None
    assert scorers.scorer_module("teacache.models.open_models:load_tiny_open_flux1") == "bench.quality.open_adherence"
    assert scorers.scorer_module(None) is None


def test_the_sweep_scores_only_variants_that_score_adherence():
    assert measure._adherence_fn("tiny-flux1") is None
    shapes_variant = next(s.name for s in variants.all_specs() if s.builder and "shapes" in s.builder)
    image = np.full((32, 32, 3), 245, dtype=np.uint8)
    prompt = "a red circle on a white background at the center"
    assert measure._adherence_fn(shapes_variant)(image, prompt) == pytest.approx(1 / 3)  # the background only


def test_a_variant_without_a_scorer_is_one_clear_error():
    with pytest.raises(ValueError, match="no adherence scorer"):
        scorers.adherence_scorer("tiny-flux1")
