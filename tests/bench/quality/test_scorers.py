"""Which scorer reads which variant's images, and the sweep's use of it."""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util

import numpy as np
import pytest

from bench.quality import scorers
from bench.sweep import measure
from teacache import variants
from teacache.models import scenes_data


def test_the_trained_models_and_only_they_score_adherence():
    """A scorer reads the vocabulary a trained model draws; random weights draw nothing to score."""
    scoring = {spec.name for spec in variants.all_specs() if scorers.scores_adherence(spec.name)}
    assert scoring
    assert scoring == {spec.name for spec in variants.all_specs() if spec.trained}


def test_each_builder_names_a_real_model_and_scorer():
    for builder, scorer in scorers.SCORERS.items():
        assert hasattr(importlib.import_module(scorer), "score_adherence")
        assert importlib.util.find_spec(builder) is not None
    assert scorers.scorer_module("teacache.models.scenes:load_tiny_scenes") == "bench.quality.scene_adherence"
    assert scorers.scorer_module(None) is None


def test_the_scenes_scorer_reads_scene_captions(monkeypatch):
    scoring = next(s for s in variants.all_specs() if s.trained)
    scenes_spec = dataclasses.replace(scoring, builder="teacache.models.scenes:load_tiny_scenes")
    monkeypatch.setattr(variants, "get", lambda _name: scenes_spec)
    prompt = "a big red striped circle left of a small blue square on a white background"
    image = scenes_data.to_uint8(scenes_data.render(scenes_data.parse_prompt(prompt), np.random.default_rng(0)))
    score = scorers.adherence_scorer("a scenes model")
    assert score(image, prompt) == 1.0
    assert score(image, prompt.replace("left of", "right of")) == pytest.approx(0.8)


def test_the_sweep_scores_only_variants_that_score_adherence():
    assert measure._adherence_fn("tiny-flux1") is None
    shapes_variant = next(s.name for s in variants.all_specs() if s.builder and "shapes" in s.builder)
    image = np.full((32, 32, 3), 245, dtype=np.uint8)
    prompt = "a red circle on a white background at the center"
    assert measure._adherence_fn(shapes_variant)(image, prompt) == pytest.approx(1 / 3)  # the background only


def test_a_variant_without_a_scorer_is_one_clear_error():
    with pytest.raises(ValueError, match="no adherence scorer"):
        scorers.adherence_scorer("tiny-flux1")
