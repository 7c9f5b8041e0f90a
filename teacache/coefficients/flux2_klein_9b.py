"""FLUX.2 Klein 9B (distilled): rescale polynomial published by mlx-teacache 0.14.1."""

from teacache.coefficients._upstream import mlx_teacache, newest_mflux_then

# Source: IonDen/mlx-teacache 0.14.1 (PyPI sdist), scripts/_calibration_flux2_klein_9b.json; highest power first,
# fitted through the origin.
# Recipe: 10 prompts, seed 42, 8 steps, guidance 1.0, 512x512, quantization not stated,
# mflux version and model revision not stated; 70 step pairs. In-sample R^2 0.471; no held-out R^2 published.
# x range: the fitted x_min..x_max (the gate computes above it).
# R^2 0.471 is low: the signal explains little of the output change for this model; measure with
# teacache-bench sweep before trusting a threshold, or refit on your own recipe.
RESCALE = mlx_teacache(
    "_calibration_flux2_klein_9b.json",
    coefficients=(-523.8412980807129, 530.2492512602308, -177.64385734082498, 20.893264957040557, 0.0),
    x_range=(0.1315704584121704, 0.44975757598876953),
    r2=0.4710289350635284,
)

# Fitted on: mflux 0.17.5 or older, bfloat16: calibrated 2026-05-16 (its config.py in mlx-teacache 0.14.1), when
# 0.17.5 (2026-04-10) was the newest mflux release. Numeric path: FLUX.2's, unchanged by every mflux release
# from 0.16 to 0.24.
FITTED_ON = newest_mflux_then("0.17.5", "calibrated 2026-05-16 (mlx-teacache config.py)", dtype="bfloat16")

# Safety (calib.fit.safety; tests/teacache/test_coefficients.py keeps UNSAFE_X in step with RESCALE): as
# published, this polynomial decreases with x on 0.1316..0.2763, 0.3901..0.4498 (64.6% of its range), where
# a larger change predicts less. It is kept as published, and the gate evaluates it there as published
# (max(0, f)); fits made here are never selected unsafe (docs/refit-and-drift.md: Safe rescale functions).
UNSAFE_X = {"decreasing": ((0.1316, 0.2763), (0.3901, 0.4498)), "nonpositive": ()}

RECIPE = {"num_steps": 8, "guidance": 1.0, "resolution": "512x512", "quantization": None}
