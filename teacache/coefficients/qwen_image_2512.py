"""Qwen-Image-2512 (mflux 0.24.0's ``qwen-image``): rescale polynomial published by mlx-teacache 0.14.1.

Same architecture and gate signal as Qwen-Image (block 0's modulated image input); the checkpoint has its
own fit. Target: the larger of the two CFG branches' rel-L1 change of the transformer body output.
"""

from teacache.coefficients import FittedOn
from teacache.coefficients._upstream import mlx_teacache

# Source: IonDen/mlx-teacache 0.14.1 (PyPI sdist), scripts/_calibration_qwen_2512.json, signals.A
# (src/mlx_teacache/variants/qwen_image_2512/config.py reads it); highest power first, fitted through the origin.
# Recipe: Qwen/Qwen-Image-2512 revision 25468b98e3276ca6700de15c6628e51b7de54a26, 10 prompts (7 fitted,
# 3 held out), seed 42, 50 steps, guidance 4.0 (true CFG), 768x768, 4-bit quantization, mflux 0.23.0,
# M1 Max 32 GB, 2026-10-20; 343 step pairs. R^2 0.818, held-out R^2 0.785. x range: the fitted x_min..x_max.
RESCALE = mlx_teacache(
    "_calibration_qwen_2512.json signals.A",
    coefficients=(-13.200421839759947, 4.851407025105924, 2.4891133197469846, 0.2453630032662089, 0.0),
    x_range=(0.08094493952514002, 0.4705715918534816),
    r2=0.8183118337227409,
    heldout_r2=0.7851961443423294,
    n_pairs=343,
)

# Fitted on: mflux 0.23.0 (stated by the source), dtype not stated. Numeric path: with mflux 0.22.0's
# norm_out bias, the path mflux 0.22.0 to 0.24.0 run.
FITTED_ON = FittedOn(mflux="0.23.0", evidence="mlx-teacache qwen_image_2512/config.py: mflux 0.23.0, 2026-10-20")

RECIPE = {"num_steps": 50, "guidance": 4.0, "resolution": "768x768", "quantization": 4}
