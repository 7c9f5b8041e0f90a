"""Provisional tolerances: used on hardware that has no generated module of its own.

Each constant says what it was measured from. ``provisional`` means: measured on one other hardware,
not on the one running the tests; derive calibrated constants with ``teacache-bench tolerances``.
"""

STATUS = "provisional"

# tiny-flux1, 10 steps, 128x128, guidance 3.5, threshold 0.3, default gate settings: skipped steps.
# Measured 2026-11-30, cpu AMD EPYC (2 cores), mlx 0.32.2, mflux 0.24.0, 6 prompts x 3 seeds: min 4,
# median 4, max 4 (random weights give a near-constant signal). Band = measured range; provisional.
TINY_FLUX1_SKIP_BAND_T03 = (4, 4)
