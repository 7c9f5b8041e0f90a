"""FLUX.1 Krea dev: rescale polynomial published by mlx-teacache 0.14.1 (its calibration JSON, data not code)."""

from teacache.coefficients import FittedOn
from teacache.coefficients._upstream import mlx_teacache

# Source: IonDen/mlx-teacache 0.14.1 (PyPI sdist), scripts/_calibration_flux1_krea_dev.json; highest power first,
# fitted free (np.polyfit).
# Recipe: 10 prompts, seed 42, 28 steps, guidance 4.5, 512x512, quantization 4,
# mflux version and model revision not stated; 270 step pairs. In-sample R^2 0.682; no held-out R^2 published.
# x range: the fitted x_min..x_max (the gate computes above it).
# The same source scored the upstream FLUX.1-dev tuple on these traces: R^2 -496.3.
RESCALE = mlx_teacache(
    "_calibration_flux1_krea_dev.json",
    coefficients=(24.18037744588824, -45.41912128506917, 26.20213376107934, -3.579234954660995, 0.40140693642366004),
    x_range=(0.06265655253122461, 0.662358805642947),
    r2=0.681705882207051,
)

# Fitted on: mflux 0.19.1 or older, dtype not stated. mlx-teacache 0.11.0 (2026-09-06) shipped this fit and
# pinned mflux>=0.17.5,<0.20; the newest 0.19 release then was 0.19.1 (2026-08-26). Numeric path: before
# mflux 0.22.0, which loads FLUX.1's norm_out bias.
FITTED_ON = FittedOn(
    mflux="0.19.1",
    exact=False,
    evidence="shipped by mlx-teacache 0.11.0 (2026-09-06), pinned mflux<0.20; 0.19.1 the newest 0.19 then",
)

# Safety (calib.fit.safety; tests/teacache/test_coefficients.py keeps UNSAFE_X in step with RESCALE): as
# published, this polynomial decreases with x on 0.06266..0.08515, 0.5634..0.6624 (20.7% of its range),
# where a larger change predicts less. It is kept as published, and the gate evaluates it there as published
# (max(0, f)); fits made here are never selected unsafe (docs/refit-and-drift.md: Safe rescale functions).
UNSAFE_X = {"decreasing": ((0.06266, 0.08515), (0.5634, 0.6624)), "nonpositive": ()}

RECIPE = {"num_steps": 28, "guidance": 4.5, "resolution": "512x512", "quantization": 4}
