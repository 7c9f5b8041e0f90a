"""Qwen-Image (the original Qwen/Qwen-Image checkpoint): rescale polynomial published by mlx-teacache 0.14.1.

Its gate signal is this adapter's: the rel-L1 change of block 0's modulated image input. Its target is the
larger of the two CFG branches' rel-L1 change of the transformer body output (before norm_out/proj_out),
where upstream TeaCache fits the model output. Our gate clamps x to the fitted range like mlx-teacache does.
"""

from teacache.coefficients._upstream import mlx_teacache, newest_mflux_then

# Source: IonDen/mlx-teacache 0.14.1 (PyPI sdist), scripts/_calibration_qwen.json, signals.A
# (src/mlx_teacache/variants/qwen_image/config.py reads it); highest power first, fitted through the origin.
# Recipe: Qwen/Qwen-Image (revision not stated), 10 prompts (7 fitted, 3 held out), seed 42, 50 steps,
# guidance 4.0 (true CFG), 768x768, 4-bit quantization, mflux version not stated, M1 Max 32 GB, 2026-06-17;
# 343 step pairs. R^2 0.849, held-out R^2 0.845. x range: the fitted x_min..x_max.
RESCALE = mlx_teacache(
    "_calibration_qwen.json signals.A",
    coefficients=(-12.954226906135869, 8.883805167578382, -0.9363839862290331, 1.4538816050570036, 0.0),
    x_range=(0.04675976472922664, 0.587799896108221),
    r2=0.8489899729766744,
    heldout_r2=0.8451455989514055,
    n_pairs=343,
)

# Fitted on: mflux 0.18.0 or older, dtype not stated: calibrated 2026-06-17, when 0.18.0 (2026-06-07) was the
# newest mflux release. Numeric path: before mflux 0.22.0, which loads Qwen-Image's norm_out bias.
FITTED_ON = newest_mflux_then("0.18.0", "calibrated 2026-06-17 (mlx-teacache qwen_image/config.py)")

# Safety (calib.fit.safety; tests/teacache/test_coefficients.py keeps UNSAFE_X in step with RESCALE): as
# published, this polynomial decreases with x on 0.5432..0.5878 (8.5% of its range), where a larger change
# predicts less. It is kept as published, and the gate evaluates it there as published (max(0, f)); fits
# made here are never selected unsafe (docs/refit-and-drift.md: Safe rescale functions).
UNSAFE_X = {"decreasing": ((0.5432, 0.5878),), "nonpositive": ()}

RECIPE = {"num_steps": 50, "guidance": 4.0, "resolution": "768x768", "quantization": 4}
