"""TeaCache step-skipping for mflux pipelines, with the tools to calibrate and benchmark it.

Importing this package first loads OpenBLAS for MLX's CPU backend (see ``teacache._platform``), which
every submodule relies on, since any ``import teacache.<module>`` runs this first; it does nothing else
(no environment variable, no embedded model: the zoo, ``teacache.models``, loads when a model is built).
"""

from teacache._platform import preload_openblas

preload_openblas()  # before anything imports mlx.core: on Linux CPUs its reference BLAS is ~30x slower

from teacache.api import apply_teacache  # noqa: E402
from teacache.core import RecipeMismatchWarning, TeaCacheStats  # noqa: E402
from teacache.gate import GateConfig, NeverSkipsWarning  # noqa: E402
from teacache.handle import TeaCacheHandle  # noqa: E402
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
