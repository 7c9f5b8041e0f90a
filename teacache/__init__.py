"""TeaCache step-skipping for mflux pipelines, with the tools to calibrate and benchmark it.

Importing this package first loads OpenBLAS for MLX's CPU backend (see ``teacache._platform``).
"""

from teacache._platform import preload_openblas

preload_openblas()

from teacache.api import apply_teacache  # noqa: E402
from teacache.core import RecipeMismatchWarning, TeaCacheHandle, TeaCacheStats  # noqa: E402
from teacache.gate import GateConfig, NeverSkipsWarning  # noqa: E402
from teacache.loading import load_model  # noqa: E402
from teacache.rescale import RescaleFunction  # noqa: E402

__all__ = [
    "GateConfig",
    "NeverSkipsWarning",
    "RecipeMismatchWarning",
    "RescaleFunction",
    "TeaCacheHandle",
    "TeaCacheStats",
    "apply_teacache",
    "load_model",
]
