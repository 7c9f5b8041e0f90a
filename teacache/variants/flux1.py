"""FLUX.1 variants (mflux's ``Flux1``; adapter ``teacache.adapters.flux1``)."""

from teacache.variants import CampaignSizes, Family, Generation, NumericChange, VariantSpec, random_weights

FAMILY = Family(
    name="flux1",
    label="FLUX.1",
    adapter="flux1",
    pipeline="mflux.models.flux.variants.txt2img.flux:Flux1",
    weights="mflux.models.flux.weights.flux_weight_definition:FluxWeightDefinition",
    transformer="mflux.models.flux.model.flux_transformer.transformer:Transformer",
    lora_mapping="mflux.models.flux.weights.flux_lora_mapping:FluxLoRAMapping",
    random_builder="teacache.models.fullsize:build_random_flux1",
    transformer_config="model_config",
    block_keywords=("num_transformer_blocks", "num_single_transformer_blocks"),
    numeric_changes=(
        NumericChange(
            release="0.22.0",
            what="AdaLayerNormContinuous gained a bias: the checkpoints' norm_out bias loads (0.16-0.21 dropped it)",
        ),
    ),
)
_UPSTREAM = "upstream TeaCache's FLUX.1-dev setting for ~1.5x at 28 steps (README of ali-vilab/TeaCache)"

_TINY = random_weights(  # the random-weight model
    "tiny-flux1", "flux1", "teacache.models.tiny_flux1:build_tiny_flux1", steps=20, guidance=3.5,
    thresholds="0,0.2,0.25,0.3,0.5", threshold=0.25,
    why="random weights: a plumbing value (FLUX.1's upstream default)",
)  # fmt: skip

_REVISIONS = {  # as mlx-teacache's tests/hf_revisions.toml pins them
    "black-forest-labs/FLUX.1-dev": "3de623fc3c33e44ffbe2bad470d0f45bccf2eb21",
    "black-forest-labs/FLUX.1-schnell": "741f7c3ce8b383c54771c7003378a50191e9efe9",
}


def _released(name: str, repo: str, alias: str, generation: Generation, why: str = _UPSTREAM, coefficients="flux1"):
    """A released FLUX.1 checkpoint with upstream's FLUX.1-dev threshold. ``alias``: the name mflux loads it by,
    its ``ModelConfig`` factory's with dashes."""
    return VariantSpec(
        name=name,
        family="flux1",
        mflux_names=(repo,),
        revision=_REVISIONS.get(repo),
        mflux_config=alias.replace("-", "_"),
        load_names=(alias,),
        default_threshold=0.25,
        default_threshold_why=why,
        generation=generation,
        coefficients=coefficients,
    )


_SCHNELL_WHY = _UPSTREAM + "; schnell's 4 steps leave little to skip"
SPECS = (
    _released("flux1-dev", "black-forest-labs/FLUX.1-dev", "dev", Generation(28, 1024, 1024, 3.5)),
    _released(
        "flux1-schnell", "black-forest-labs/FLUX.1-schnell", "schnell", Generation(4, 1024, 1024, 0.0), _SCHNELL_WHY
    ),
    _released(
        "flux1-krea-dev",
        "black-forest-labs/FLUX.1-Krea-dev",
        "krea-dev",
        Generation(28, 1024, 1024, 4.5),
        coefficients="flux1_krea",
    ),
    _TINY,
    VariantSpec(
        name="tiny-scenes",
        family="flux1",
        default_threshold=0.03,
        default_threshold_why=(
            "retired: its campaign's recommendation (results/cpu-intel-xeon-2c/tiny-scenes/0.24.0 at commit 0cd4016)"
        ),
        skip_first_n_steps=2,
        generation=Generation(steps=28, width=256, height=256, guidance=3.5),  # what its committed results ran
        refuse_why=(
            "tiny-scenes was retired (its output changed 10-30x less per step than a real model's); tiny-open-flux1 "
            "replaces it, and its weights are in the git history (teacache/models/weights/tiny-scenes/ at commit "
            "08304d6)"
        ),
    ),
    VariantSpec(
        name="tiny-open-flux1",
        family="flux1",
        default_threshold=0.5,
        default_threshold_why=(
            "the recommended threshold of its campaign (the highest whose p5 SSIM against vanilla stays >= 0.95): "
            "0.5 skipped 22 of 28 steps at 3.73x (ideal 4.67x), p5 SSIM 0.962 (2026-12-06, CPU AMD EPYC 2 cores, "
            "8 prompts x 1 seed; results/<hardware>/tiny-open-flux1/ holds the committed campaign)"
        ),
        skip_first_n_steps=2,
        skip_first_why=(
            "the first step pair changes the output far more than the rest (median y 0.36 on step 1 against "
            "0.04-0.17 on steps 2-27, results/<hardware>/dynamics), so steps 0 and 1 are always computed"
        ),
        generation=Generation(steps=28, width=256, height=256, guidance=5.0),
        coefficients="tiny_open_flux1",
        prompt_set="tiny-open-any",
        # open captions: outputs change per step as a real model's do, so thresholds on a real model's scale
        campaign_sizes=CampaignSizes(
            "tiny-open-any", "0,1", "tiny-open-any-sweep", "0", "0,0.05,0.1,0.2,0.3,0.5,0.8", 2
        ),
        builder="teacache.models.open_models:load_tiny_open_flux1",
        trained=True,
        only_its_size=True,
        image_side=64,
        prompt_check="teacache.models.open_data:parse_any_shape_prompt",
        drift_subject=True,
    ),
)
