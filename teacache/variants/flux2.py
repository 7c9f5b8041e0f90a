"""FLUX.2 Klein variants and the embedded FLUX.2 models (mflux's ``Flux2Klein``; adapter ``adapters.flux2``)."""

from teacache.variants import CampaignSizes, Family, Generation, VariantSpec, random_weights

FAMILY = Family(
    name="flux2",
    label="FLUX.2",
    adapter="flux2",
    pipeline="mflux.models.flux2.variants.txt2img.flux2_klein:Flux2Klein",
    weights="mflux.models.flux2.weights.flux2_weight_definition:Flux2KleinWeightDefinition",
    transformer="mflux.models.flux2.model.flux2_transformer.transformer:Flux2Transformer",
    lora_mapping="mflux.models.flux2.weights.flux2_lora_mapping:Flux2LoRAMapping",
    random_builder="teacache.models.fullsize:build_random_flux2",
    transformer_config="overrides",
    block_keywords=("num_layers", "num_single_layers"),
    numeric_changes=(),  # 0.16-0.24: none (its norm_out has no bias; 0.18/0.19 changed call signatures only)
)
_KLEIN = "FLUX.2 Klein: no published threshold; 0.3 is a starting point to measure, not a calibration"
_DISTILLED = Generation(steps=8, width=1024, height=1024, guidance=1.0)  # the published fits' recipe
_BASE = Generation(steps=28, width=1024, height=1024, guidance=4.0)

_TINY = random_weights(  # the random-weight model
    "tiny-flux2", "flux2", "teacache.models.tiny_flux2:build_tiny_flux2", steps=20, guidance=1.0,
    thresholds="0,0.1,0.2,0.3", why="random weights: a plumbing value (FLUX.2 Klein's starting point)",
)  # fmt: skip


def _klein(name: str, repo: str, generation: Generation, packaged: bool = True, revision: str | None = None):
    """A FLUX.2 Klein checkpoint: its mflux config and (``packaged``) its coefficient module are named like it."""
    module = name.replace("-", "_")
    return VariantSpec(
        name=name,
        family="flux2",
        mflux_names=(repo,),
        revision=revision,
        mflux_config=module,
        default_threshold=0.3,
        default_threshold_why=_KLEIN,
        generation=generation,
        coefficients=module if packaged else None,
    )


SPECS = (
    # the 4B's revision as mlx-teacache's tests/hf_revisions.toml pins it
    _klein(
        "flux2-klein-4b",
        "black-forest-labs/FLUX.2-klein-4B",
        _DISTILLED,
        revision="e7b7dc27f91deacad38e78976d1f2b499d76a294",
    ),
    _klein("flux2-klein-9b", "black-forest-labs/FLUX.2-klein-9B", _DISTILLED),
    _klein("flux2-klein-base-4b", "black-forest-labs/FLUX.2-klein-base-4B", _BASE),
    # no published calibration: pass coefficients= or run teacache-calib
    _klein("flux2-klein-base-9b", "black-forest-labs/FLUX.2-klein-base-9B", _BASE, packaged=False),
    VariantSpec(
        name="tiny-shapes",
        family="flux2",
        default_threshold=0.03,
        default_threshold_why=(
            "the recommended threshold of its campaign (the highest whose p5 SSIM against vanilla stays >= 0.95): "
            "0.03 skipped 18 of 28 steps at 2.57x (ideal 2.80x), p5 SSIM 0.973 (make demo, 2026-11-30, CPU AMD "
            "EPYC 2 cores, 8 prompts x 1 seed; results/<hardware>/tiny-shapes/ holds the committed campaign)"
        ),
        skip_first_n_steps=2,
        skip_first_why=(
            "the first step pair (sigma 1.0 -> 0.99) changes the output ~10x more than its signal says (traces of "
            "16 prompts x 2 seeds, 28 steps: mean y 0.095 at x 0.10 against y ~0.01 at x 0.03-0.05 on later "
            "steps), the outlier upstream TeaCache's ret_steps also computes; so steps 0 and 1 are always computed"
        ),
        generation=Generation(steps=28, width=32, height=32, guidance=1.0),
        coefficients="tiny_shapes",
        prompt_set="tiny-shapes",
        campaign_sizes=CampaignSizes(
            "tiny-shapes", "0,1", "tiny-shapes-sweep", "0", "0,0.005,0.01,0.02,0.03,0.05,0.1", 2
        ),
        builder="teacache.models.shapes:load_tiny_shapes",
        trained=True,
        only_its_size=True,
        prompt_check="teacache.models.shapes_data:parse_prompt",
    ),
    _TINY,
    VariantSpec(
        name="tiny-open-flux2",
        family="flux2",
        default_threshold=0.5,
        default_threshold_why=(
            "the recommended threshold of its campaign (the highest whose p5 SSIM against vanilla stays >= 0.95): "
            "0.5 skipped 22 of 28 steps at 4.21x [95% CI 3.60, 4.72] (ideal 4.67x), p5 SSIM 0.955 (2026-12-03, CPU AMD "
            "EPYC 2 cores under other load, guidance 2.0, 8 prompts x 1 seed; results/<hardware>/tiny-open-flux2/ "
            "holds the committed campaign)"
        ),
        skip_first_n_steps=2,
        skip_first_why=(
            "as for the other trained embedded models, steps 0 and 1 are always computed; its committed campaign "
            "was measured so (its own y is not an outlier on step 1: median 0.165 against 0.085-0.217 on steps 2-3)"
        ),
        generation=Generation(steps=28, width=32, height=32, guidance=2.0),
        coefficients="tiny_open_flux2",
        prompt_set="tiny-open",
        # open captions: outputs change per step as a real model's do, so thresholds on a real model's scale
        campaign_sizes=CampaignSizes("tiny-open", "0,1", "tiny-open-sweep", "0", "0,0.05,0.1,0.2,0.3,0.5,0.8", 2),
        builder="teacache.models.open_models:load_tiny_open_flux2",
        trained=True,
        is_default_model=True,
        only_its_size=True,
        prompt_check="teacache.models.open_data:parse_prompt",
        drift_subject=True,
    ),
)
