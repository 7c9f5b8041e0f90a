"""Z-Image variants (mflux's ``ZImage``; adapter ``teacache.adapters.zimage``)."""

from teacache.variants import Family, Generation, NumericChange, VariantSpec, random_weights

FAMILY = Family(
    name="zimage",
    label="Z-Image",
    adapter="zimage",
    pipeline="mflux.models.z_image.variants.z_image:ZImage",
    weights="mflux.models.z_image.weights.z_image_weight_definition:ZImageWeightDefinition",
    transformer="mflux.models.z_image.model.z_image_transformer.transformer:ZImageTransformer",
    lora_mapping="mflux.models.z_image.weights.z_image_lora_mapping:ZImageLoRAMapping",
    random_builder="teacache.models.fullsize:build_random_zimage",
    block_keywords=("n_layers", "n_refiner_layers"),
    numeric_changes=(
        NumericChange(
            release="0.22.0",
            what="stream_t_emb casts the time embedding to the model precision, so the hidden stream stays in it "
            "where it was promoted to float32 (set_float32(True) restores the old path; a float32 run is unchanged)",
            dtypes=("bfloat16", "float16"),
        ),
    ),
)

_TINY = random_weights(  # the random-weight model
    "tiny-z-image", "zimage", "teacache.models.tiny_zimage:build_tiny_z_image", steps=10, guidance=4.0,
    thresholds="0,0.1,0.2,0.3",
)  # fmt: skip

SPECS = (
    VariantSpec(
        name="z-image",
        family="zimage",
        mflux_names=("Tongyi-MAI/Z-Image",),
        mflux_config="z_image",
        default_threshold=0.12,
        default_threshold_why=(
            "mlx-teacache 0.14.1's default for Z-Image base, set at its SSIM knee (512x512, 50 steps, guidance 4, "
            "q8, one prompt: 15 of 48 active steps skipped at SSIM 0.991). Its fit maps a different signal (see "
            "teacache/coefficients/z_image.py): a starting point to re-measure, not a calibration of this gate"
        ),
        generation=Generation(steps=50, width=1024, height=1024, guidance=4.0),
        coefficients="z_image",
    ),
    VariantSpec(
        name="z-image-turbo",
        family="zimage",
        mflux_names=("Tongyi-MAI/Z-Image-Turbo",),
        default_threshold=0.0,
        default_threshold_why="refused",
        generation=Generation(steps=9, width=1024, height=1024, guidance=0.0),
        refuse_why=(
            "Z-Image-Turbo is distilled to 8-9 steps, which leaves TeaCache nothing to skip, and has no calibration"
        ),
    ),
    _TINY,
)
