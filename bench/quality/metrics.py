"""How far a run's result is from its paired vanilla run: final latents and decoded images.

Final latents: max-abs, mean-abs, max-rel = max |a-b| / (|b| + eps) with eps = 1e-6, cosine. Decoded uint8
RGB images: SSIM (scikit-image, data_range=255, channel_axis=-1, i.e. per-channel SSIM averaged, default
7x7 Gaussian-free window) and PSNR (data_range=255; inf for identical images). The sweep, the baseline
arms and the gap check all measure through these two functions.
"""

from __future__ import annotations

import mlx.core as mx
import numpy as np

MAX_REL_EPS = 1e-6
SSIM_SETTINGS = {
    "data_range": 255,
    "channel_axis": -1,
    "note": "skimage.metrics.structural_similarity on uint8 RGB, per-channel SSIM averaged",
}


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


def image_metrics(image: np.ndarray, reference: np.ndarray) -> dict:
    # scikit-image loads scipy (seconds): imported at the first image, so a bad argument is refused at once
    from skimage.metrics import peak_signal_noise_ratio, structural_similarity

    if min(image.shape[:2]) < 7:
        return {"ssim": float("nan"), "psnr": float("nan")}
    ssim = structural_similarity(reference, image, data_range=255, channel_axis=-1)
    with np.errstate(divide="ignore"):
        psnr = peak_signal_noise_ratio(reference, image, data_range=255)
    return {"ssim": float(ssim), "psnr": float(psnr)}
