"""FLUX.2 Klein base 4B: rescale polynomial published by mlx-teacache 0.14.1 (its calibration JSON, data not code)."""

from teacache.coefficients._upstream import mlx_teacache, newest_mflux_then

# Source: IonDen/mlx-teacache 0.14.1 (PyPI sdist), scripts/_calibration_flux2_klein_base_4b.json; highest power
# first, fitted through the origin.
# Recipe: 10 prompts, seed 42, 25 steps, guidance 1.0, 512x512, quantization not stated,
# mflux version and model revision not stated; 240 step pairs. In-sample R^2 0.106; no held-out R^2 published.
# x range: the fitted x_min..x_max (the gate computes above it).
# R^2 0.106 is low: the signal explains little of the output change for this model; measure with
# teacache-bench sweep before trusting a threshold, or refit on your own recipe.
RESCALE = mlx_teacache(
    "_calibration_flux2_klein_base_4b.json",
    coefficients=(-1841.022165607874, 848.4417137572868, -131.3554469956159, 8.179509586828413, 0.0),
    x_range=(0.028261402621865273, 0.21984468400478363),
    r2=0.10643408169124158,
)

# Fitted on: mflux 0.17.5 or older, dtype not stated: calibrated 2026-05-17 (its config.py in mlx-teacache 0.14.1), when
# 0.17.5 (2026-04-10) was the newest mflux release. Numeric path: FLUX.2's, unchanged by every mflux release
# from 0.16 to 0.24.
FITTED_ON = newest_mflux_then("0.17.5", "calibrated 2026-05-17 (mlx-teacache config.py)")

# Safety (calib.fit.safety; tests/teacache/test_coefficients.py keeps UNSAFE_X in step with RESCALE): as
# published, this polynomial decreases with x on 0.05987..0.09963, 0.1858..0.2198 (38.9% of its range),
# where a larger change predicts less. It is kept as published, and the gate evaluates it there as published
# (max(0, f)); fits made here are never selected unsafe (docs/refit-and-drift.md: Safe rescale functions).
UNSAFE_X = {"decreasing": ((0.05987, 0.09963), (0.1858, 0.2198)), "nonpositive": ()}

RECIPE = {"num_steps": 25, "guidance": 1.0, "resolution": "512x512", "quantization": None}
