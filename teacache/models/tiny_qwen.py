"""``tiny-qwen-image``: mflux's own Qwen-Image pipeline with a tiny random-weight transformer.

It runs the real ``QwenImage.generate_image`` (noise, the linear scheduler with Qwen's sigma shift, two
transformer calls per step for true CFG, callbacks, decode) offline. The transformer is mflux's
``QwenTransformer`` with 2 dual-stream blocks, 2 heads of 128 (head_dim must stay 128: the RoPE axes
[16, 56, 56] are fixed in its ``__init__``) and a 64-wide text context. The Qwen2.5-VL text encoder is
replaced at mflux's own seam, the prompt cache (``QwenPromptEncoder.encode_prompt`` returns
``prompt_cache["<prompt>|NEG|<negative>"]`` when the key is "in" it), and the VAE by a 1x1 projection +
pixel shuffle that decodes in milliseconds. Random weights give noise-like trajectories: plumbing only.
"""

from __future__ import annotations

import hashlib

import mlx.core as mx
from mflux.models.common.config.model_config import ModelConfig
from mflux.models.qwen.model.qwen_transformer.qwen_transformer import QwenTransformer
from mflux.models.qwen.qwen_initializer import QwenImageInitializer
from mflux.models.qwen.variants.txt2img.qwen_image import QwenImage
from mlx import nn

from teacache.models._init import drawn
from teacache.models.tiny_flux1 import TinyVAE

CONTEXT_DIM = 64  # joint_attention_dim (3584 in Qwen-Image)
HEAD_DIM = 128
NEGATIVE_SEPARATOR = "|NEG|"  # QwenPromptEncoder's cache key: f"{prompt}|NEG|{negative_prompt}"


def build_tiny_transformer(seed: int = 0, heads: int = 2, layers: int = 2) -> QwenTransformer:
    """mflux's QwenTransformer at width ``heads * 128``, every Linear drawn from ``seed`` with explicit keys."""
    transformer = QwenTransformer(
        num_layers=layers, attention_head_dim=HEAD_DIM, num_attention_heads=heads, joint_attention_dim=CONTEXT_DIM
    )
    return drawn(transformer, seed)


def _prompt_embedding(text: str) -> tuple[mx.array, mx.array]:
    """A fixed random (embeds, mask) per text; the length grows with the word count like a real tokenizer's."""
    digest = hashlib.sha256(text.encode("utf-8")).digest()
    tokens = min(32, 4 + len(text.split()))
    embeds = mx.random.normal((1, tokens, CONTEXT_DIM), key=mx.random.key(int.from_bytes(digest[:4], "little")))
    return embeds.astype(ModelConfig.precision), mx.ones((1, tokens), dtype=mx.int32)


class HashedQwenPromptCache(dict):
    """mflux's Qwen prompt cache, filled on demand: every ``prompt|NEG|negative`` key is "in" it.

    ``QwenPromptEncoder.encode_prompt`` returns ``prompt_cache[key]`` for a key it finds, so the
    tokenizer and the text encoder are never touched; the same texts always give the same tensors.
    """

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and NEGATIVE_SEPARATOR in key

    def __missing__(self, key: str):
        prompt, _, negative = key.partition(NEGATIVE_SEPARATOR)
        value = (*_prompt_embedding(prompt), *_prompt_embedding(negative))
        mx.eval(value)
        self[key] = value
        return value


def build_tiny_qwen_image(seed: int = 0) -> QwenImage:
    """mflux's ``QwenImage`` with the tiny transformer, a tiny VAE and hashed prompt embeddings."""
    model = QwenImage.__new__(QwenImage)
    nn.Module.__init__(model)
    QwenImageInitializer._init_config(model, ModelConfig.qwen_image())  # prompt_cache, callbacks, tiling
    model.prompt_cache = HashedQwenPromptCache()
    model.tokenizers = {"qwen": None}  # read before the prompt cache is consulted
    model.text_encoder = None
    model.vae = TinyVAE(seed)
    model.transformer = build_tiny_transformer(seed)
    model.bits, model.lora_paths, model.lora_scales = None, [], []
    model.teacache_variant = "tiny-qwen-image"
    return model
