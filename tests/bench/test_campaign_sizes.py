"""bench's campaign sizes: one entry per embedded model, each naming prompt sets the commands know."""

from __future__ import annotations

from bench.campaign import campaign_models
from bench.campaign_sizes import CAMPAIGN_SIZES, campaign_sizes
from calib.run.prompts import SETS
from teacache import variants


def test_every_embedded_model_and_only_they_have_campaign_sizes():
    assert set(CAMPAIGN_SIZES) == set(variants.embedded_names())
    assert campaign_models() == sorted(variants.embedded_names())
    assert campaign_sizes("flux1-dev") is None


def test_the_sizes_name_known_prompt_sets_and_the_registry_reads_none_of_them():
    for sizes in CAMPAIGN_SIZES.values():
        assert {sizes.record_prompts, sizes.sweep_prompts} <= set(SETS)
        assert sizes.repeats >= 1
    spec = variants.get(variants.default_model())
    assert not hasattr(spec, "campaign") and not hasattr(spec, "scores_adherence")
