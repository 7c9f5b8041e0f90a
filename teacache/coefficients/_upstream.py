"""Rescale functions published upstream that more than one coefficient module uses, kept by hand, and the
builders of the hand-kept modules that hold one published function each.

``teacache-calib emit`` regenerates a variant's module (``flux1.py``, ``tiny_flux1.py``...) from a fit; no
variant's spec names this one, so emit never writes it. Modules that share a published function import it
from here, never from another variant's module, and tests pin the published tuples here.
"""

from teacache.coefficients import FittedOn
from teacache.rescale import RescaleFunction

# Source: ali-vilab/TeaCache, TeaCache4FLUX/teacache_flux.py (arXiv:2411.19108), the tuple published for
# FLUX.1-dev, highest power first. Fitted upstream with np.polyfit(x, y, 4) on FLUX.1-dev generations
# (28 steps, 1024x1024, guidance 3.5, bf16, no quantization); upstream publishes no R^2 and no x range,
# so the range here is unbounded. Its minimum is ~0.180 near x=0.053: thresholds at or below it never skip.
# Scored on FLUX.1-Krea data by mlx-teacache it gave R^2 -496: refit before trusting it on Krea.
FLUX1_DEV_RESCALE = RescaleFunction(
    coefficients=(4.98651651e02, -2.83781631e02, 5.58554382e01, -3.82021401e00, 2.64230861e-01),
    x_range=(0.0, float("inf")),
    provenance={"source": "ali-vilab/TeaCache TeaCache4FLUX, FLUX.1-dev", "status": "published"},
)

# Fitted on: PyTorch (diffusers' FluxPipeline, bf16), not on any mflux release, so no mflux numeric change can
# be placed before or after it; upstream publishes no traces to compare with mflux's path.
FLUX1_DEV_FITTED_ON = FittedOn(
    framework="PyTorch diffusers",
    dtype="bfloat16",
    evidence="ali-vilab/TeaCache TeaCache4FLUX/teacache_flux.py runs diffusers' FluxPipeline",
)

# Safety (calib.fit.safety; tests/teacache/test_coefficients.py keeps it in step with FLUX1_DEV_RESCALE): as
# published, this polynomial decreases with x on 0..0.0525 (5.5% of its range; the range is unbounded, so
# checked on x 0..1), where a larger change predicts less. It is kept as published, and the gate evaluates
# it there as published (max(0, f)); fits made here are never selected unsafe
# (docs/refit-and-drift.md: Safe rescale functions).
FLUX1_DEV_UNSAFE_X = {"decreasing": ((0.0, 0.0525),), "nonpositive": ()}

FLUX1_DEV_RECIPE = {"num_steps": 28, "guidance": 3.5, "resolution": "1024x1024", "quantization": None}

MLX_TEACACHE = "IonDen/mlx-teacache 0.14.1"


def mlx_teacache(
    calibration: str, coefficients, x_range, r2: float, status: str = "published", **more
) -> RescaleFunction:
    """The function mlx-teacache 0.14.1 publishes in ``scripts/<calibration>`` of its sdist, as published (highest
    power first); ``calibration`` may name the signal after the file. ``more``: further provenance, in order."""
    provenance = {"source": f"{MLX_TEACACHE} scripts/{calibration}", "status": status, "r2": r2, **more}
    return RescaleFunction(coefficients=coefficients, x_range=x_range, provenance=provenance)


def newest_mflux_then(release: str, when: str, dtype: str | None = None) -> FittedOn:
    """Fitted on mflux ``release`` or older: ``when`` says when the source fitted it, when ``release`` was the
    newest mflux out."""
    return FittedOn(
        mflux=release, exact=False, dtype=dtype, evidence=f"{when}; mflux {release} the newest release then"
    )
