"""Which scorer reads which variant's images, and the sweep's use of it."""

from __future__ import annotations

import numpy as np
import pytest

from bench.quality.scorers import SCORERS, adherence_scorer
from bench.sweep import command
from teacache import variants
from teacache.models import scenes_data


def test_every_variant_that_scores_adherence_has_a_scorer():
    scoring = [spec.name for spec in variants.all_specs() if spec.scores_adherence]
    assert "tiny-shapes" in scoring
    assert set(scoring) <= set(SCORERS)


def test_each_model_is_read_by_its_own_scorer():
    prompt = "a big red striped circle left of a small blue square on a white background"
    image = scenes_data.to_uint8(scenes_data.render(scenes_data.parse_prompt(prompt), np.random.default_rng(0)))
    assert adherence_scorer("tiny-scenes")(image, prompt) == 1.0
    assert adherence_scorer("tiny-scenes")(image, prompt.replace("left of", "right of")) == pytest.approx(0.8)
    with pytest.raises(ValueError, match="prompt"):  # the tiny-shapes scorer cannot read a scene caption
        adherence_scorer("tiny-shapes")(image, prompt)


def test_the_sweep_scores_only_variants_that_score_adherence():
    assert command._adherence_fn("tiny-flux1") is None
    shapes_prompt = "a red circle on a white background at the center"
    image = np.full((32, 32, 3), 245, dtype=np.uint8)
    assert command._adherence_fn("tiny-shapes")(image, shapes_prompt) == pytest.approx(1 / 3)  # the background


def test_an_unknown_variant_is_one_clear_error():
    with pytest.raises(ValueError, match="no adherence scorer"):
        adherence_scorer("dev")
