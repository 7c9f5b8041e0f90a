"""``tiny-flux1``: mflux's own FLUX.1 pipeline with a shrunken transformer, random weights from a seed.

It exercises the real ``Flux1.generate_image`` (latents, scheduler, callbacks, decode) offline. The
transformer is mflux's ``Transformer`` with every 3072-wide Linear shrunk to ``heads * 128`` (head_dim
128 keeps EmbedND's [16, 56, 56] RoPE axes valid). Text encoders are replaced by a deterministic
prompt -> embedding table, the VAE by a 1x1 projection + pixel shuffle that decodes in milliseconds.
Random weights give noise-like trajectories: use it for plumbing, not for calibration figures.
"""

from __future__ import annotations

import hashlib

import mlx.core as mx
from mflux.models.common.config.model_config import ModelConfig
from mflux.models.flux.flux_initializer import FluxInitializer
from mflux.models.flux.model.flux_transformer.ada_layer_norm_continuous import AdaLayerNormContinuous
from mflux.models.flux.model.flux_transformer.ada_layer_norm_zero import AdaLayerNormZero
from mflux.models.flux.model.flux_transformer.ada_layer_norm_zero_single import AdaLayerNormZeroSingle
from mflux.models.flux.model.flux_transformer.joint_attention import JointAttention
from mflux.models.flux.model.flux_transformer.single_block_attention import SingleBlockAttention
from mflux.models.flux.model.flux_transformer.transformer import Transformer
from mflux.models.flux.variants.txt2img.flux import Flux1
from mlx import nn

from teacache.errors import InputError
from teacache.models._init import redraw_linears

FULL_WIDTH = 3072
T5_DIM = 4096
CLIP_DIM = 768
# RoPE's (text index, row, column) axes per head width: FLUX.1's own at 128, the same proportions at 32
ROPE_AXES = {128: (16, 56, 56), 32: (8, 12, 12)}


class AdaLayerNormZeroAnyWidth(AdaLayerNormZero):
    """AdaLayerNormZero slices with the literal ``18432 // 6``; same maths with the width from the weight."""

    def __call__(self, hidden_states: mx.array, text_embeddings: mx.array):
        emb = self.linear(nn.silu(text_embeddings))
        chunk = emb.shape[-1] // 6
        shift, scale, gate, shift_mlp, scale_mlp, gate_mlp = (emb[:, i * chunk : (i + 1) * chunk] for i in range(6))
        return (
            self.norm(hidden_states) * (1 + scale[:, None]) + shift[:, None],
            gate,
            shift_mlp,
            scale_mlp,
            gate_mlp,
        )


def build_tiny_transformer(
    seed: int = 0,
    heads: int = 2,
    joint_blocks: int = 2,
    single_blocks: int = 2,
    model_config: ModelConfig | None = None,
    text_width: int | None = None,
    head_dim: int = 128,
) -> Transformer:
    """mflux's FLUX.1 Transformer at width ``heads * head_dim``, every Linear drawn from ``seed``.

    ``text_width``: the width of the prompt embeddings (T5's 4096 and CLIP's pooled 768 when None).
    ``head_dim`` other than FLUX.1's 128 resizes the q/k norms and RoPE's axes (``ROPE_AXES``) with it."""
    if head_dim not in ROPE_AXES:
        raise InputError(f"head_dim: expected one of {sorted(ROPE_AXES)}, got {head_dim}")
    config = model_config or ModelConfig.dev()
    transformer = Transformer(
        model_config=config, num_transformer_blocks=joint_blocks, num_single_transformer_blocks=single_blocks
    )
    width = heads * head_dim

    def shrink(dim: int) -> int:  # 3072*k -> width*k; T5 (4096), CLIP (768) -> text_width; 256 and 64 stay
        if dim % FULL_WIDTH == 0:
            return width * (dim // FULL_WIDTH)
        if text_width is not None and dim in (T5_DIM, CLIP_DIM):
            return text_width
        return dim

    redraw_linears(transformer, seed, shape=lambda out_dim, in_dim: (shrink(out_dim), shrink(in_dim)))
    for _name, module in transformer.named_modules():
        if isinstance(module, JointAttention | SingleBlockAttention):
            module.num_heads = heads
            if head_dim != module.head_dimension:
                module.head_dimension = head_dim
                for norm in ("norm_q", "norm_k", "norm_added_q", "norm_added_k"):
                    if hasattr(module, norm):
                        setattr(module, norm, nn.RMSNorm(head_dim))
        if isinstance(module, AdaLayerNormZeroSingle):
            module.dim = width
        if isinstance(module, AdaLayerNormContinuous):
            module.embedding_dim = width
        if type(module) is AdaLayerNormZero:
            module.__class__ = AdaLayerNormZeroAnyWidth
    transformer.pos_embed.axes_dim = list(ROPE_AXES[head_dim])
    transformer.set_dtype(ModelConfig.precision)
    mx.eval(transformer.parameters())
    return transformer


class TinyVAE(nn.Module):
    """A stand-in for mflux's VAE decoder: 16 latent channels -> RGB via 1x1 projection + 8x pixel shuffle."""

    scaling_factor = 0.3611
    shift_factor = 0.1159
    spatial_scale = 8
    latent_channels = 16

    def __init__(self, seed: int = 0) -> None:
        super().__init__()
        self.proj = nn.Linear(self.latent_channels, 3 * self.spatial_scale**2)
        bound = (1.0 / self.latent_channels) ** 0.5
        k_w, k_b = mx.random.split(mx.random.key(seed + 1))
        self.proj.weight = mx.random.uniform(-bound, bound, self.proj.weight.shape, key=k_w)
        self.proj.bias = mx.random.uniform(-bound, bound, self.proj.bias.shape, key=k_b) * 0.1

    def decode(self, latents: mx.array) -> mx.array:
        if latents.ndim == 5:
            latents = latents[:, :, 0, :, :]
        b, c, h, w = latents.shape
        s = self.spatial_scale
        x = self.proj(latents.transpose(0, 2, 3, 1))  # (b, h, w, 3*s*s)
        x = x.reshape(b, h, w, 3, s, s).transpose(0, 3, 1, 4, 2, 5).reshape(b, 3, h * s, w * s)
        return mx.tanh(x)[:, :, None, :, :]

    def encode(self, image: mx.array) -> mx.array:
        raise NotImplementedError("tiny-flux1 has no VAE encoder: image-to-image is not supported")


class HashedPromptEmbeddings(dict):
    """mflux's prompt cache, pre-filled on demand: each prompt maps to fixed random embeddings.

    ``PromptEncoder.encode_prompt`` returns ``prompt_cache[prompt]`` when the prompt is "in" the
    cache, so the T5/CLIP encoders are never touched. The same text always gives the same tensors.
    """

    def __init__(self, tokens: int = 32) -> None:
        super().__init__()
        self.tokens = tokens

    def __contains__(self, prompt: object) -> bool:
        return isinstance(prompt, str)

    def __missing__(self, prompt: str):
        digest = hashlib.sha256(prompt.encode("utf-8")).digest()
        k_t5, k_clip = mx.random.split(mx.random.key(int.from_bytes(digest[:4], "little")))
        value = (
            mx.random.normal((1, self.tokens, T5_DIM), key=k_t5).astype(ModelConfig.precision),
            mx.random.normal((1, CLIP_DIM), key=k_clip).astype(ModelConfig.precision),
        )
        mx.eval(value)
        self[prompt] = value
        return value


def build_tiny_flux1(seed: int = 0, schnell: bool = False) -> Flux1:
    """mflux's ``Flux1`` pipeline with the tiny transformer, tiny VAE and hashed prompt embeddings."""
    model_config = ModelConfig.schnell() if schnell else ModelConfig.dev()
    model = Flux1.__new__(Flux1)
    nn.Module.__init__(model)
    FluxInitializer._init_config(model, model_config)  # prompt_cache, model_config, callbacks, tiling
    model.prompt_cache = HashedPromptEmbeddings()
    model.vae = TinyVAE(seed)
    model.transformer = build_tiny_transformer(seed, model_config=model_config)
    model.t5_text_encoder = model.clip_text_encoder = None
    model.tokenizers = {"t5": None, "clip": None}  # read before the prompt cache is consulted
    model.bits, model.lora_paths, model.lora_scales = None, [], []
    model.teacache_variant = "tiny-flux1"
    return model
