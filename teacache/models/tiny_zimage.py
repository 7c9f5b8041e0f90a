"""``tiny-z-image``: mflux's own Z-Image (base) pipeline with a tiny random-weight transformer.

It runs the real ``ZImage.generate_image`` (noise, the flow-match scheduler, the ``mx.compile``d predict
with CFG inside when guidance > 1, callbacks, decode) offline. The transformer is mflux's
``ZImageTransformer`` at width 256 (2 heads of 128; the RoPE axes [32, 48, 48] sum to the head dim) with
2 noise-refiner, 2 context-refiner and 2 main layers. The Qwen3 text encoder is replaced one level
below the pipeline's own ``_encode_prompts`` (which keeps mflux's guidance and negative-prompt rules):
the tokenizer by a word-hashing stand-in and the encoder by a fixed random embedding table. The VAE
is a 1x1 projection + pixel shuffle. Random weights give noise-like trajectories: plumbing only.
"""

from __future__ import annotations

import hashlib

import mlx.core as mx
from mflux.models.common.config.model_config import ModelConfig
from mflux.models.common.tokenizer.tokenizer_output import TokenizerOutput
from mflux.models.z_image.model.z_image_transformer.transformer import ZImageTransformer
from mflux.models.z_image.variants.z_image import ZImage
from mflux.models.z_image.z_image_initializer import ZImageInitializer
from mlx import nn

from teacache.models._init import drawn
from teacache.models._releases import no_compute_precision, stream_in_model_precision
from teacache.models.tiny_flux1 import TinyVAE

CAPTION_DIM = 64  # cap_feat_dim (2560 in Z-Image)
VOCAB = 512
MAX_TOKENS = 32
BOS = 1


def build_tiny_transformer(seed: int = 0, dim: int = 256, heads: int = 2, layers: int = 2, refiners: int = 2):
    """mflux's ZImageTransformer at width ``dim``, every Linear drawn from ``seed`` with explicit keys."""
    head_dim = dim // heads
    axes = [head_dim // 4, 3 * head_dim // 8, 3 * head_dim // 8]  # [32, 48, 48] at head_dim 128, like Z-Image's
    transformer = ZImageTransformer(
        dim=dim, n_heads=heads, n_layers=layers, n_refiner_layers=refiners, cap_feat_dim=CAPTION_DIM, axes_dims=axes
    )
    stream_in_model_precision(transformer)
    return drawn(transformer, seed)


class HashedTokenizer:
    """Stands in for Z-Image's Qwen3 tokenizer: BOS + one hashed id per word, padded to ``max_length``."""

    tokenizer = None
    max_length = MAX_TOKENS

    def tokenize(self, prompt: str, images=None, max_length: int | None = None, **_) -> TokenizerOutput:
        ids = [BOS] + [
            2 + int.from_bytes(hashlib.sha256(word.encode("utf-8")).digest()[:4], "little") % (VOCAB - 2)
            for word in prompt.split()
        ]
        ids = ids[: self.max_length]
        valid = len(ids)
        ids = ids + [0] * (self.max_length - valid)
        mask = [1] * valid + [0] * (self.max_length - valid)
        return TokenizerOutput(
            input_ids=mx.array([ids], dtype=mx.int32), attention_mask=mx.array([mask], dtype=mx.int32)
        )


class TableTextEncoder(nn.Module):
    """Stands in for the Qwen3 encoder: a fixed random embedding per token id, drawn from ``seed``."""

    def __init__(self, seed: int = 0) -> None:
        super().__init__()
        self.table = mx.random.normal((VOCAB, CAPTION_DIM), key=mx.random.key(seed + 2)).astype(ModelConfig.precision)

    def __call__(self, input_ids: mx.array, attention_mask: mx.array) -> mx.array:
        return self.table[input_ids]


def build_tiny_z_image(seed: int = 0) -> ZImage:
    """mflux's ``ZImage`` (base config: guidance, flow-match scheduler) with the tiny parts above."""
    model = ZImage.__new__(ZImage)
    nn.Module.__init__(model)
    ZImageInitializer._init_config(model, ModelConfig.z_image())  # model_config, callbacks, tiling
    model.tokenizers = {"z_image": HashedTokenizer()}
    model.text_encoder = TableTextEncoder(seed)
    model.vae = TinyVAE(seed)
    model.transformer = build_tiny_transformer(seed)
    model.bits, model.lora_paths, model.lora_scales = None, [], []
    model.float32 = False
    if (precision := no_compute_precision()) is not None:
        model.compute_precision = precision
    model.teacache_variant = "tiny-z-image"
    return model
