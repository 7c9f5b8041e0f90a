"""tiny-shapes: provisional identity rescale (y = x) until a calibration is emitted here.

Replace with ``teacache-calib record --model tiny-shapes`` / ``fit`` / ``emit --variant tiny-shapes``.
"""

from teacache.rescale import RescaleFunction

# Provisional: identity, no calibration behind it.
RESCALE = RescaleFunction(coefficients=(1.0, 0.0), x_range=(0.0, float("inf")), provenance={"status": "provisional"})

RECIPE = {"num_steps": 28, "guidance": 1.0, "resolution": "32x32", "quantization": None}
