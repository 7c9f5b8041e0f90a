"""How far a run's result is from its paired vanilla run: final latents and decoded images.

Final latents: max-abs, mean-abs, max-rel = max |a-b| / (|b| + eps) with eps = 1e-6, cosine. Decoded images:
SSIM and PSNR, defined in :mod:`calib.run.similarity` (drift measures with it too, below bench) and re-exported
here. The sweep, the baseline arms and the gap check all measure through these two functions.
"""

from __future__ import annotations

import mlx.core as mx
import numpy as np

from calib.run.similarity import SSIM_SETTINGS, image_metrics

__all__ = ["MAX_REL_EPS", "SSIM_SETTINGS", "image_metrics", "latent_metrics"]

MAX_REL_EPS = 1e-6


def _float64(values) -> np.ndarray:
    """MLX arrays (bfloat16 included: numpy has no such type) or numpy arrays, flattened to float64."""
    if isinstance(values, mx.array):
        values = np.array(values.astype(mx.float32))
    return np.asarray(values, dtype=np.float64).ravel()


def latent_metrics(latents, reference) -> dict:
    a = _float64(latents)
    b = _float64(reference)
    diff = np.abs(a - b)
    denominator = np.linalg.norm(a) * np.linalg.norm(b)
    return {
        "max_abs": float(diff.max()),
        "mean_abs": float(diff.mean()),
        "max_rel": float((diff / (np.abs(b) + MAX_REL_EPS)).max()),
        "cosine": float(np.dot(a, b) / denominator) if denominator > 0 else float("nan"),
    }
