"""FLUX.2 Klein 4B (distilled): rescale polynomial published by mlx-teacache 0.14.1."""

from teacache.coefficients._upstream import mlx_teacache, newest_mflux_then

# Source: IonDen/mlx-teacache 0.14.1 (PyPI sdist), scripts/_calibration_flux2_klein_4b.json; highest power first,
# fitted free (np.polyfit).
# Recipe: 10 prompts, seed 42, 8 steps, guidance 1.0, 512x512, quantization not stated,
# mflux version and model revision not stated; 70 step pairs. In-sample R^2 0.653; no held-out R^2 published.
# x range: the fitted x_min..x_max (the gate computes above it).
RESCALE = mlx_teacache(
    "_calibration_flux2_klein_4b.json",
    coefficients=(236.9190176127698, -201.47401360106662, 66.91354236854073, -11.14796738073235, 1.2674506310647067),
    x_range=(0.2001306414604187, 0.4252921938896179),
    r2=0.6530168924992779,
)

# Fitted on: mflux 0.17.5 or older, bfloat16: calibrated 2026-05-15 (its config.py in mlx-teacache 0.14.1), when
# 0.17.5 (2026-04-10) was the newest mflux release. Numeric path: FLUX.2's, unchanged by every mflux release
# from 0.16 to 0.24.
FITTED_ON = newest_mflux_then("0.17.5", "calibrated 2026-05-15 (mlx-teacache config.py)", dtype="bfloat16")

# Safety (calib.fit.safety; tests/teacache/test_coefficients.py keeps UNSAFE_X in step with RESCALE): as
# published, this polynomial decreases with x on 0.2001..0.2924 (41.1% of its range), where a larger change
# predicts less. It is kept as published, and the gate evaluates it there as published (max(0, f)); fits
# made here are never selected unsafe (docs/refit-and-drift.md: Safe rescale functions).
UNSAFE_X = {"decreasing": ((0.2001, 0.2924),), "nonpositive": ()}

RECIPE = {"num_steps": 8, "guidance": 1.0, "resolution": "512x512", "quantization": None}
