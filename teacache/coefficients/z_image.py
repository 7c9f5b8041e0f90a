"""Z-Image (base, Tongyi-MAI/Z-Image): rescale polynomial published by mlx-teacache 0.14.1, fitted on ANOTHER signal.

mlx-teacache gates Z-Image on the rel-L1 change of the first main layer's residual (its "signal B", computed
on the positive branch after both refiners); this adapter gates on the first noise-refiner block's modulated
input, the signal every other family here uses. The same polynomial therefore reads a different x: treat it
as a placeholder with the right order of magnitude, not a calibration of this gate, until
``teacache-calib record`` / ``fit`` / ``emit`` replaces it with a fit on Z-Image traces of this signal.
mlx-teacache also fitted a caption-independent noise-refiner signal (its "signal A", the refiner's output):
R^2 0.069, held-out 0.016, rejected there. Target of both fits: the larger of the two CFG branches' rel-L1
change of the main-layer output.
"""

from teacache.coefficients._upstream import mlx_teacache, newest_mflux_then

# Source: IonDen/mlx-teacache 0.14.1 (PyPI sdist), scripts/_calibration_z_image.json, signals.B
# (src/mlx_teacache/variants/z_image_base/config.py reads it); highest power first, fitted through the origin.
# Recipe: Tongyi-MAI/Z-Image (revision not stated), 10 prompts (7 fitted, 3 held out), seed 42, 50 steps,
# guidance 4.0 (CFG), 512x512, 8-bit quantization, mflux version not stated, M1 Max 32 GB, 2026-05-31;
# 343 step pairs. R^2 0.400, held-out R^2 0.179. x range: the fitted x_min..x_max (of signal B).
RESCALE = mlx_teacache(
    "_calibration_z_image.json signals.B",
    coefficients=(-898.9907628349583, 367.7086118008557, -45.41511572598643, 3.95114319842774, 0.0),
    x_range=(0.027887196237753466, 0.25914120883567665),
    r2=0.3997548048012458,
    status="published, fitted on another signal (first main layer residual)",
    heldout_r2=0.17919779742100683,
    n_pairs=343,
)

# Fitted on: mflux 0.17.5 or older, dtype not stated: calibrated 2026-05-31, when 0.17.5 (2026-04-10) was the
# newest mflux release. Numeric path: before mflux 0.22.0, whose stream_t_emb keeps a bfloat16 model's hidden
# stream in bfloat16 (it was promoted to float32 before).
FITTED_ON = newest_mflux_then("0.17.5", "calibrated 2026-05-31 (mlx-teacache z_image_base/config.py)")

# Safety (calib.fit.safety; tests/teacache/test_coefficients.py keeps UNSAFE_X in step with RESCALE): as
# published, this polynomial decreases with x on 0.2123..0.2591 (20.4% of its range), where a larger change
# predicts less. It is kept as published, and the gate evaluates it there as published (max(0, f)); fits
# made here are never selected unsafe (docs/refit-and-drift.md: Safe rescale functions).
UNSAFE_X = {"decreasing": ((0.2123, 0.2591),), "nonpositive": ()}

RECIPE = {"num_steps": 50, "guidance": 4.0, "resolution": "512x512", "quantization": 8}
