"""FLUX.1 dev and schnell: the rescale polynomial published upstream for FLUX.1-dev, until a refit replaces it.

Source: ali-vilab/TeaCache TeaCache4FLUX (the tuple, its recipe and its safety live in
teacache/coefficients/_upstream.py, which tiny-flux1's module uses too). ``teacache-calib emit --variant
flux1-dev`` rewrites this module from a fit; no other module imports from it.
"""

from teacache.coefficients._upstream import FLUX1_DEV_FITTED_ON as FITTED_ON
from teacache.coefficients._upstream import FLUX1_DEV_RECIPE as RECIPE
from teacache.coefficients._upstream import FLUX1_DEV_RESCALE as RESCALE
from teacache.coefficients._upstream import FLUX1_DEV_UNSAFE_X as UNSAFE_X

__all__ = ["FITTED_ON", "RECIPE", "RESCALE", "UNSAFE_X"]
