"""tiny-flux1 (random weights): no calibration means anything for noise-like trajectories.

Provisional: the upstream FLUX.1-dev tuple, so the plumbing has a rescale function to run. Refit with
``teacache-calib record --model tiny-flux1`` / ``fit`` / ``emit`` to replace it.
"""

from teacache.coefficients.flux1 import FITTED_ON, RECIPE, RESCALE, UNSAFE_X  # noqa: F401
