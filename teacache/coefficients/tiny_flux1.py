"""tiny-flux1 (random weights): no calibration means anything for noise-like trajectories.

Provisional: the upstream FLUX.1-dev tuple (from teacache/coefficients/_upstream.py, not from flux1.py, which a
refit of FLUX.1-dev rewrites), so the plumbing has a rescale function to run. Refit with
``teacache-calib record --model tiny-flux1`` / ``fit`` / ``emit`` to replace it.
"""

from teacache.coefficients._upstream import FLUX1_DEV_FITTED_ON as FITTED_ON
from teacache.coefficients._upstream import FLUX1_DEV_RESCALE as RESCALE
from teacache.coefficients._upstream import FLUX1_DEV_UNSAFE_X as UNSAFE_X

# The recipe this provisional tuple is used at: tiny-flux1's own settings. The tuple was fitted on FLUX.1-dev at 28
# steps and 1024x1024, never on this model, so FLUX.1-dev's recipe would warn at tiny-flux1's every default run.
RECIPE = {"num_steps": 20, "guidance": 3.5, "resolution": "128x128", "quantization": None}

__all__ = ["FITTED_ON", "RECIPE", "RESCALE", "UNSAFE_X"]
