"""How close a decoded image is to its paired vanilla one: SSIM and PSNR, the one definition that the sweep, the
baseline arms and the gap check (through :mod:`bench.quality.metrics`) and drift's quality question measure with.

Decoded uint8 RGB images: SSIM (scikit-image, data_range=255, channel_axis=-1, i.e. per-channel SSIM averaged,
default 7x7 Gaussian-free window) and PSNR (data_range=255; inf for identical images).
"""

from __future__ import annotations

import numpy as np

SSIM_SETTINGS = {
    "data_range": 255,
    "channel_axis": -1,
    "note": "skimage.metrics.structural_similarity on uint8 RGB, per-channel SSIM averaged",
}


def image_metrics(image: np.ndarray, reference: np.ndarray) -> dict:
    """SSIM and PSNR of ``image`` against ``reference`` (NaN for images under 7 pixels a side: SSIM's window)."""
    # scikit-image loads scipy (seconds): imported at the first image, so a bad argument is refused at once
    from skimage.metrics import peak_signal_noise_ratio, structural_similarity

    if min(image.shape[:2]) < 7:
        return {"ssim": float("nan"), "psnr": float("nan")}
    ssim = structural_similarity(reference, image, data_range=255, channel_axis=-1)
    with np.errstate(divide="ignore"):
        psnr = peak_signal_noise_ratio(reference, image, data_range=255)
    return {"ssim": float(ssim), "psnr": float(psnr)}
