"""What ``teacache-bench campaign`` runs for each embedded model: sized to fit minutes on 2 CPU cores.

A bench fact, so it lives here and not in the variant registry: keyed by variant name, checked against
``teacache.variants`` by the tests (every embedded model has sizes, every key is an embedded model).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class CampaignSizes:
    """The prompt sets, seeds, thresholds and repeats of one model's campaign stages."""

    record_prompts: str
    record_seeds: str
    sweep_prompts: str
    sweep_seeds: str
    thresholds: str
    repeats: int


_FAST_RECORD = ("fast", "0,1", "fast", "0,1,2")  # random weights: a few prompts, seconds per run

CAMPAIGN_SIZES: dict[str, CampaignSizes] = {
    "tiny-flux1": CampaignSizes(*_FAST_RECORD, "0,0.2,0.25,0.3,0.5", 2),
    "tiny-scenes": CampaignSizes("tiny-scenes", "0,1", "tiny-scenes-sweep", "0", "0,0.005,0.01,0.02,0.03,0.05,0.1", 2),
    "tiny-shapes": CampaignSizes("tiny-shapes", "0,1", "tiny-shapes-sweep", "0", "0,0.005,0.01,0.02,0.03,0.05,0.1", 2),
    # open captions: outputs change per step as a real model's do, so thresholds on a real model's scale
    "tiny-open-flux1": CampaignSizes("tiny-open", "0,1", "tiny-open-sweep", "0", "0,0.05,0.1,0.2,0.3,0.5,0.8", 2),
    "tiny-open-flux2": CampaignSizes("tiny-open", "0,1", "tiny-open-sweep", "0", "0,0.05,0.1,0.2,0.3,0.5,0.8", 2),
    "tiny-flux2": CampaignSizes(*_FAST_RECORD, "0,0.1,0.2,0.3", 2),
    "tiny-qwen-image": CampaignSizes(*_FAST_RECORD, "0,0.1,0.2,0.3", 2),
    "tiny-z-image": CampaignSizes(*_FAST_RECORD, "0,0.1,0.2,0.3", 2),
}


def campaign_sizes(variant: str) -> CampaignSizes | None:
    """The campaign sizes of a variant; None for a model no campaign runs (the real ones)."""
    return CAMPAIGN_SIZES.get(variant)
