"""``teacache-generate``: mflux's own generate commands (FLUX.1, FLUX.2 Klein, Qwen-Image, Z-Image) with TeaCache.

It lives in calib because choosing a threshold by target reads calibration traces and sweep reports
(:mod:`calib.targets`); the caching core it applies (:mod:`teacache`) imports neither.
"""

from teacache.errors import TeaCacheError

PROG = "teacache-generate"  # every message names it


class Refusal(TeaCacheError, ValueError):
    """Bad input found before any model loads; the message is the one line to print."""
