"""``tiny-flux2``: mflux's own FLUX.2 Klein pipeline with a tiny random-weight transformer.

It runs the real ``Flux2Klein.generate_image`` (packed latents, the flow-match scheduler, the
``mx.compile``d predict with CFG inside, callbacks, decode) offline. The Qwen3 text encoder is replaced
by a deterministic prompt -> embedding stand-in (Klein keeps no prompt cache, so the pipeline's
``_encode_prompt_pair`` is overridden on the instance), the VAE by a projection + pixel shuffle.
Random weights give noise-like trajectories: plumbing only; ``tiny-shapes`` is the trained FLUX.2 model.
"""

from __future__ import annotations

import hashlib

import mlx.core as mx
from mflux.models.common.config.model_config import ModelConfig
from mflux.models.flux2.flux2_initializer import Flux2Initializer
from mflux.models.flux2.model.flux2_text_encoder.prompt_encoder import Flux2PromptEncoder
from mflux.models.flux2.model.flux2_transformer.transformer import Flux2Transformer
from mflux.models.flux2.variants.txt2img.flux2_klein import Flux2Klein
from mlx import nn

from teacache.models._init import drawn
from teacache.models._releases import no_compute_precision

CONTEXT_DIM = 64
TEXT_TOKENS = 16
LATENT_CHANNELS = 128  # packed: 32 VAE channels x 2x2 patches, 16 px per token


def build_tiny_transformer(seed: int = 0, heads: int = 4, head_dim: int = 32, double: int = 2, single: int = 2):
    """mflux's Flux2Transformer at width heads * head_dim, every Linear drawn from ``seed``."""
    transformer = Flux2Transformer(
        num_layers=double, num_single_layers=single, attention_head_dim=head_dim, num_attention_heads=heads,
        joint_attention_dim=CONTEXT_DIM, axes_dims_rope=(head_dim // 4,) * 4,
    )  # fmt: skip
    return drawn(transformer, seed)


class TinyFlux2VAE(nn.Module):
    """Stands in for Flux2VAE.decode_packed_latents: 128 packed channels -> RGB via 16x pixel shuffle."""

    def __init__(self, seed: int = 0) -> None:
        super().__init__()
        self.proj = nn.Linear(LATENT_CHANNELS, 3 * 16 * 16)
        k_w, k_b = mx.random.split(mx.random.key(seed + 1))
        bound = (1.0 / LATENT_CHANNELS) ** 0.5
        self.proj.weight = mx.random.uniform(-bound, bound, self.proj.weight.shape, key=k_w)
        self.proj.bias = mx.random.uniform(-bound, bound, self.proj.bias.shape, key=k_b) * 0.1

    def decode_packed_latents(self, packed_latents: mx.array, tiling_config=None) -> mx.array:
        b, c, h, w = packed_latents.shape
        x = self.proj(packed_latents.transpose(0, 2, 3, 1)).reshape(b, h, w, 3, 16, 16)
        return mx.tanh(x.transpose(0, 3, 1, 4, 2, 5).reshape(b, 3, h * 16, w * 16))


def hashed_prompt_embeds(prompt: str) -> tuple[mx.array, mx.array]:
    """A fixed random embedding per prompt text: the Qwen3 encoder's shape, no weights."""
    digest = hashlib.sha256(prompt.encode("utf-8")).digest()
    embeds = mx.random.normal((1, TEXT_TOKENS, CONTEXT_DIM), key=mx.random.key(int.from_bytes(digest[:4], "little")))
    embeds = embeds.astype(ModelConfig.precision)
    return embeds, Flux2PromptEncoder.prepare_text_ids(embeds)


def build_tiny_flux2(seed: int = 0) -> Flux2Klein:
    model = Flux2Klein.__new__(Flux2Klein)
    nn.Module.__init__(model)
    Flux2Initializer._init_config(model, ModelConfig.flux2_klein_base_4b())
    model.transformer = build_tiny_transformer(seed)
    model.vae = TinyFlux2VAE(seed)
    model.text_encoder = None
    model.tokenizers = {}
    model.bits, model.lora_paths, model.lora_scales = None, [], []
    model.small_text_encoder = model.small_decoder = False
    if (precision := no_compute_precision()) is not None:
        model.compute_precision = precision
    model.teacache_variant = "tiny-flux2"

    def encode_prompt_pair(*, prompt: str, negative_prompt: str | None, guidance: float):
        embeds, ids = hashed_prompt_embeds(prompt)
        if guidance is not None and guidance > 1.0 and negative_prompt is not None:
            return (embeds, ids, *hashed_prompt_embeds(negative_prompt))
        return embeds, ids, None, None

    object.__setattr__(model, "_encode_prompt_pair", encode_prompt_pair)
    return model
