"""Qwen-Image variants (mflux's ``QwenImage``; adapter ``teacache.adapters.qwen``).

mflux 0.24.0 resolves its aliases "qwen-image" and "qwen" to Qwen/Qwen-Image-2512; here ``qwen-image`` is the
original Qwen/Qwen-Image checkpoint and ``qwen-image-2512`` the newer one, each with its own calibration.
"""

from teacache.variants import Family, Generation, NumericChange, VariantSpec, random_weights

FAMILY = Family(
    name="qwen",
    label="Qwen-Image",
    adapter="qwen",
    pipeline="mflux.models.qwen.variants.txt2img.qwen_image:QwenImage",
    weights="mflux.models.qwen.weights.qwen_weight_definition:QwenWeightDefinition",
    transformer="mflux.models.qwen.model.qwen_transformer.qwen_transformer:QwenTransformer",
    lora_mapping="mflux.models.qwen.weights.qwen_lora_mapping:QwenLoRAMapping",
    random_builder="teacache.models.fullsize:build_random_qwen",
    block_keywords=("num_layers",),
    numeric_changes=(
        NumericChange(
            release="0.22.0",
            what="AdaLayerNormContinuous gained a bias: the checkpoints' norm_out bias loads (0.16-0.21 dropped it)",
        ),
    ),
)
_MLX_TEACACHE = (
    "mlx-teacache 0.14.1's sweeps at its calibration recipe (768x768, 50 steps, guidance 4, q4, one prompt): "
    "Qwen-Image 0.30 (33 of 48 active steps skipped, SSIM 0.967); Qwen-Image-2512 0.25 (29 of 48, SSIM 0.969; "
    "0.30 fell to SSIM 0.947 there). Starting points under our gate, to re-measure with teacache-bench sweep"
)
_GENERATION = Generation(steps=50, width=1024, height=1024, guidance=4.0)

_TINY = random_weights(  # the random-weight model
    "tiny-qwen-image", "qwen", "teacache.models.tiny_qwen:build_tiny_qwen_image", steps=10, guidance=4.0,
    thresholds="0,0.1,0.2,0.3",
)  # fmt: skip

SPECS = (
    VariantSpec(
        name="qwen-image",
        family="qwen",
        mflux_names=("Qwen/Qwen-Image",),
        mflux_config="qwen_image",
        default_threshold=0.3,
        default_threshold_why=_MLX_TEACACHE,
        generation=_GENERATION,
        coefficients="qwen_image",
    ),
    VariantSpec(
        name="qwen-image-2512",
        family="qwen",
        mflux_names=("Qwen/Qwen-Image-2512",),
        mflux_config="qwen_image",  # the same architecture; mflux's qwen_image config names the 2512 release
        load_names=("qwen-2512",),
        default_threshold=0.25,
        default_threshold_why=_MLX_TEACACHE,
        generation=_GENERATION,
        coefficients="qwen_image_2512",
    ),
    _TINY,
)
