"""tiny-z-image (random weights): provisional identity rescale (y = x); no calibration is meaningful here."""

from teacache.coefficients import FittedOn
from teacache.rescale import RescaleFunction

# Provisional: identity, no calibration behind it (random weights give noise-like trajectories).
RESCALE = RescaleFunction(coefficients=(1.0, 0.0), x_range=(0.0, float("inf")), provenance={"status": "provisional"})

FITTED_ON = FittedOn(framework="", evidence="provisional identity: fitted on no traces")

RECIPE = {"num_steps": 10, "guidance": 4.0, "resolution": "128x128", "quantization": None}
