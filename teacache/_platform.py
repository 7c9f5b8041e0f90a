"""Linux CPU speed: load OpenBLAS before MLX, run float32.

The mlx-cpu wheel links a reference BLAS (float32 matmul ~5 GFLOP/s). opencv-python, an mflux
dependency, ships OpenBLAS; loading it RTLD_GLOBAL before the first ``import mlx.core`` makes MLX
resolve its cblas symbols there (~150-200 GFLOP/s on 2 cores). bfloat16 matmuls have no fast CPU path,
so models built through this package use float32 on the CPU backend.
Set ``TEACACHE_NO_BLAS_PRELOAD=1`` to measure without it (``teacache-bench blas``).
"""

from __future__ import annotations

import ctypes
import glob
import os
import sys
import sysconfig
import warnings

PRELOADED_BLAS: str | None = None


def preload_openblas() -> str | None:
    """Load opencv-python's OpenBLAS globally; a no-op off Linux, when disabled, or once MLX is loaded."""
    global PRELOADED_BLAS
    if PRELOADED_BLAS is not None or not sys.platform.startswith("linux"):
        return PRELOADED_BLAS
    if os.environ.get("TEACACHE_NO_BLAS_PRELOAD"):
        return None
    candidates = []
    for key in ("purelib", "platlib"):
        site = sysconfig.get_paths()[key]
        candidates += sorted(glob.glob(os.path.join(site, "opencv_python.libs", "libopenblas*.so*")))
    if not candidates:
        return None
    if "mlx.core" in sys.modules:
        warnings.warn(
            "mlx.core was imported before teacache: the OpenBLAS preload comes too late and float32 matmuls "
            "on the CPU backend run ~30x slower. Import teacache first.",
            RuntimeWarning,
            stacklevel=3,
        )
        return None
    ctypes.CDLL(candidates[0], mode=os.RTLD_GLOBAL)
    PRELOADED_BLAS = candidates[0]
    return PRELOADED_BLAS


def quiet_transformers() -> None:
    """Silence transformers' notice at import that torch is absent (mflux imports it; torch is not needed).

    The commands call this at their start (calib's and bench's packages, the training scripts), before
    anything imports mflux; ``import teacache`` sets no environment variable.
    """
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")


def on_cpu_backend() -> bool:
    """Whether MLX computes on the CPU here (the default device, or no Metal and no CUDA to use)."""
    import mlx.core as mx  # never at this module's top: it must come after preload_openblas()

    return mx.default_device() == mx.cpu or not (mx.metal.is_available() or _cuda_available(mx))


def use_float32_on_cpu() -> None:
    """mflux builds modules in ModelConfig.precision (bfloat16): switch to float32 on the CPU backend."""
    if on_cpu_backend():
        import mlx.core as mx
        from mflux.models.common.config.model_config import ModelConfig  # heavy (mflux): loaded only when this runs

        ModelConfig.precision = mx.float32


def _cuda_available(mx) -> bool:
    return bool(getattr(mx, "cuda", None) and mx.cuda.is_available())
