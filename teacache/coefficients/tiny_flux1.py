"""tiny-flux1 (random weights): no calibration means anything for noise-like trajectories.

Provisional: the upstream FLUX.1-dev tuple (from teacache/coefficients/_upstream.py, not from flux1.py, which a
refit of FLUX.1-dev rewrites), so the plumbing has a rescale function to run. Refit with
``teacache-calib record --model tiny-flux1`` / ``fit`` / ``emit`` to replace it.
"""

from teacache.coefficients._upstream import FLUX1_DEV_FITTED_ON as FITTED_ON
from teacache.coefficients._upstream import FLUX1_DEV_RECIPE as RECIPE
from teacache.coefficients._upstream import FLUX1_DEV_RESCALE as RESCALE
from teacache.coefficients._upstream import FLUX1_DEV_UNSAFE_X as UNSAFE_X

__all__ = ["FITTED_ON", "RECIPE", "RESCALE", "UNSAFE_X"]
