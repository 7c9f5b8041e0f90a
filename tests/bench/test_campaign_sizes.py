"""The campaign sizes in the variant specs: one per embedded model, each naming prompt sets the commands know."""

from __future__ import annotations

from bench.campaign import campaign_models
from calib.run.prompts import SETS
from teacache import variants


def test_every_embedded_model_and_only_they_have_campaign_sizes():
    sized = {spec.name for spec in variants.all_specs(include_refused=True) if spec.campaign_sizes is not None}
    assert sized == set(variants.embedded_names())
    assert campaign_models() == sorted(variants.embedded_names())
    assert variants.get("flux1-dev").campaign_sizes is None


def test_the_sizes_name_known_prompt_sets_and_the_registry_reads_no_scorer_choice():
    for name in variants.embedded_names():
        sizes = variants.get(name).campaign_sizes
        assert {sizes.record_prompts, sizes.sweep_prompts} <= set(SETS)
        assert sizes.repeats >= 1
    spec = variants.get(variants.default_model())
    assert not hasattr(spec, "scores_adherence")
