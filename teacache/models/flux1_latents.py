"""Pixels as mflux's FLUX.1 latent, for the embedded FLUX.1 model (``tiny-open-flux1``), which has no VAE.

64x64 RGB is laid out as mflux's latent of a nominal 256x256 image (16 channels at 32x32; channels 0-11 hold
one 2x2 pixel block, 12-15 are 0), which mflux packs into 256 tokens of 64 values, as for any FLUX.1 image of
that size. Pure numpy on the way in (training data is cheap to draw); reshape/transpose only on the way out,
so it reads MLX arrays as well.
"""

from __future__ import annotations

import numpy as np

IMAGE_SIZE = 64
NOMINAL_SIZE = 256  # the height/width mflux's FLUX.1 pipeline is called with: 16 px per token there
PIXELS_PER_LATENT = 2  # one latent position holds a 2x2 pixel block
LATENT_CHANNELS = 16  # FLUX.1's latent channels; 3 x 2 x 2 = 12 carry pixels, the rest are 0
LATENT_SIDE = IMAGE_SIZE // PIXELS_PER_LATENT  # 32
TOKEN_SIDE = LATENT_SIDE // 2  # mflux packs 2x2 latent positions per token: 16 x 16 = 256 tokens
TOKEN_CHANNELS = LATENT_CHANNELS * 4  # 64


def to_latents(images):
    """(B, 64, 64, 3) -> (B, 16, 32, 32): channels (c, dy, dx) of each 2x2 block, then 4 zero channels."""
    b = images.shape[0]
    p = PIXELS_PER_LATENT
    x = images.reshape(b, LATENT_SIDE, p, LATENT_SIDE, p, 3).transpose(0, 5, 2, 4, 1, 3)
    x = x.reshape(b, 3 * p * p, LATENT_SIDE, LATENT_SIDE)
    zeros = np.zeros((b, LATENT_CHANNELS - 3 * p * p, LATENT_SIDE, LATENT_SIDE), dtype=x.dtype)
    return np.concatenate([x, zeros], axis=1)


def from_latents(latents):
    """(B, 16, 32, 32) -> (B, 3, 64, 64): the inverse of :func:`to_latents` on its first 12 channels.

    Works on numpy and MLX arrays alike (reshape/transpose only)."""
    b = latents.shape[0]
    p = PIXELS_PER_LATENT
    x = latents[:, : 3 * p * p].reshape(b, 3, p, p, LATENT_SIDE, LATENT_SIDE)
    return x.transpose(0, 1, 4, 2, 5, 3).reshape(b, 3, IMAGE_SIZE, IMAGE_SIZE)


def pack(latents):
    """(B, 16, 32, 32) -> (B, 256, 64), the token layout of mflux's ``FluxLatentCreator.pack_latents``."""
    b = latents.shape[0]
    x = latents.reshape(b, LATENT_CHANNELS, TOKEN_SIDE, 2, TOKEN_SIDE, 2).transpose(0, 2, 4, 1, 3, 5)
    return x.reshape(b, TOKEN_SIDE * TOKEN_SIDE, TOKEN_CHANNELS)
