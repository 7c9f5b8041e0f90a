"""mflux's ``Flux1`` around a small trained FLUX.1 transformer (``tiny-open-flux1``; ``open_models`` builds it).

It generates through mflux's ``Flux1.generate_image`` itself: the same latents, scheduler, transformer call,
callbacks and decode path as FLUX.1-dev. What stands in for the parts a trained FLUX.1 has and this one does not:
- the transformer is mflux's ``Transformer`` (FLUX.1-dev config, guidance embedder included) at width
  128 (one head of 128, so mflux's RoPE axes fit), a few joint and single blocks;
- the text encoders are learned embedding tables: the T5 sequence is the caption's token vectors plus
  a vector per position, the CLIP pooled vector the mean of a second table over the caption's words;
- there is no VAE: pixels are laid out as the latent (``flux1_latents.to_latents``), so the pipeline is
  called at the nominal 256x256 and decodes to the 64x64 image.
"""

from __future__ import annotations

from collections.abc import Callable

import mlx.core as mx
import numpy as np
from mflux.models.common.config.model_config import ModelConfig
from mflux.models.flux.flux_initializer import FluxInitializer
from mflux.models.flux.model.flux_transformer.joint_attention import JointAttention
from mflux.models.flux.model.flux_transformer.single_block_attention import SingleBlockAttention
from mflux.models.flux.variants.txt2img.flux import Flux1
from mlx import nn

from teacache._platform import use_float32_on_cpu
from teacache.errors import InputError
from teacache.models.flux1_latents import IMAGE_SIZE, LATENT_CHANNELS, NOMINAL_SIZE, from_latents
from teacache.models.tiny_flux1 import build_tiny_transformer

__all__ = ["TinyFlux1Model", "as_pipeline", "sampling_record"]

SAMPLE_GUIDANCE = 3.5  # the schedule does not depend on it; mflux's Config asks for one


class CaptionTextEncoder(nn.Module):
    """Stands in for T5 + CLIP: token plus position vectors for the sequence, a mean of other vectors for the pool.

    The position vectors matter: mflux gives FLUX.1's text tokens no position of their own (T5's output
    carries it), and without them a caption is a bag of words whose roles the transformer cannot tell apart."""

    def __init__(self, vocab_size: int, dim: int, text_len: int) -> None:
        super().__init__()
        self.sequence = nn.Embedding(vocab_size, dim)
        self.position = nn.Embedding(text_len, dim)
        self.pooled = nn.Embedding(vocab_size, dim)

    def __call__(self, token_ids: mx.array) -> tuple[mx.array, mx.array]:
        """(B, text_len) ids -> (B, text_len, dim) sequence, (B, dim) pooled (padding left out of the mean)."""
        words = (token_ids != 0).astype(mx.float32)[..., None]
        pooled = (self.pooled(token_ids) * words).sum(axis=1) / mx.maximum(words.sum(axis=1), 1.0)
        sequence = self.sequence(token_ids) + self.position(mx.arange(token_ids.shape[1]))
        return sequence, pooled


class TinyFlux1Model(nn.Module):
    """Text stand-in + mflux's FLUX.1 ``Transformer``; ``velocity`` is the batched training forward."""

    def __init__(self, architecture: dict, seed: int = 0) -> None:
        super().__init__()
        use_float32_on_cpu()  # before building: some mflux modules take their dtype from ModelConfig
        enc, tr = architecture["text_encoder"], architecture["transformer"]
        self.text_encoder = CaptionTextEncoder(enc["vocab_size"], enc["dim"], enc["text_len"])
        self.transformer = build_tiny_transformer(
            seed,
            heads=tr["heads"],
            joint_blocks=tr["joint_blocks"],
            single_blocks=tr["single_blocks"],
            model_config=ModelConfig.dev(),
            text_width=enc["dim"],
            head_dim=tr.get("head_dim", 128),
        )

    def set_batch_size(self, batch: int) -> None:
        """mflux's FLUX.1 attention reshapes with a stored batch size (1 when generating)."""
        for _, module in self.transformer.named_modules():
            if isinstance(module, JointAttention | SingleBlockAttention):
                module.batch_size = batch

    def velocity(
        self, latents: mx.array, token_ids: mx.array, sigma: mx.array, guidance: mx.array, rotary: mx.array
    ) -> mx.array:
        """``Transformer.__call__`` for a batch of sigmas: what it computes at step t with
        ``sigmas[t] = sigma`` and ``config.guidance = guidance`` (the test holds them equal)."""
        tr = self.transformer
        prompt_embeds, pooled = self.text_encoder(token_ids)
        hidden = tr.x_embedder(latents)
        encoder_hidden = tr.context_embedder(prompt_embeds)
        conditioning = tr.time_text_embed(sigma * 1000.0, pooled, guidance * 1000.0)
        for block in tr.transformer_blocks:
            encoder_hidden, hidden = block(
                hidden_states=hidden,
                encoder_hidden_states=encoder_hidden,
                text_embeddings=conditioning,
                rotary_embeddings=rotary,
            )
        hidden = mx.concatenate([encoder_hidden, hidden], axis=1)
        for block in tr.single_transformer_blocks:
            hidden = block(hidden_states=hidden, text_embeddings=conditioning, rotary_embeddings=rotary)
        hidden = tr.norm_out(hidden[:, encoder_hidden.shape[1] :], conditioning)
        return tr.proj_out(hidden)


class PixelDecoder(nn.Module):
    """The VAE's place in ``Flux1.generate_image``: latents laid out from pixels, read back as pixels."""

    spatial_scale = IMAGE_SIZE // (NOMINAL_SIZE // 8)  # 2: one latent position holds 2x2 pixels
    latent_channels = LATENT_CHANNELS

    def __init__(self, latent_scale: float, name: str) -> None:
        super().__init__()
        self.latent_scale = latent_scale  # latents = latent_scale x pixels
        self.name = name

    def decode(self, latents: mx.array) -> mx.array:
        if latents.ndim == 5:
            latents = latents[:, :, 0, :, :]
        if tuple(latents.shape[-2:]) != (IMAGE_SIZE // self.spatial_scale,) * 2:
            side = latents.shape[-1] * 8
            raise InputError(
                f"height/width: {self.name} draws {IMAGE_SIZE}x{IMAGE_SIZE} images, generated at height = width = "
                f"{NOMINAL_SIZE}; got {side}"
            )
        if self.latent_scale != 1.0:
            latents = latents / self.latent_scale
        return from_latents(latents)[:, :, None, :, :]

    def encode(self, image: mx.array) -> mx.array:
        raise NotImplementedError(f"{self.name} has no image encoder: image-to-image is not supported")


class CaptionEmbeddings(dict):
    """mflux's prompt cache, filled on demand from the learned text encoder.

    ``PromptEncoder.encode_prompt`` returns ``prompt_cache[prompt]`` when the prompt is "in" the cache,
    so T5 and CLIP are never called; an unknown word raises the tokenizer's one-line error.
    """

    def __init__(self, encoder: CaptionTextEncoder, tokenizer: Callable[[str], np.ndarray]) -> None:
        super().__init__()
        self.encoder = encoder
        self.tokenizer = tokenizer

    def __contains__(self, prompt: object) -> bool:
        return isinstance(prompt, str)

    def __missing__(self, prompt: str) -> tuple[mx.array, mx.array]:
        sequence, pooled = self.encoder(mx.array(self.tokenizer(prompt))[None])
        value = (sequence.astype(ModelConfig.precision), pooled.astype(ModelConfig.precision))
        mx.eval(value)
        self[prompt] = value
        return value


def as_pipeline(
    model: TinyFlux1Model,
    manifest: dict | None,
    variant: str,
    tokenizer: Callable[[str], np.ndarray],
    latent_scale: float = 1.0,
) -> Flux1:
    """mflux's ``Flux1`` (FLUX.1-dev config) around the trained transformer and its text stand-in."""
    model.set_batch_size(1)
    pipeline = Flux1.__new__(Flux1)
    nn.Module.__init__(pipeline)
    FluxInitializer._init_config(pipeline, ModelConfig.dev())  # prompt_cache, model_config, callbacks, tiling
    pipeline.prompt_cache = CaptionEmbeddings(model.text_encoder, tokenizer)
    pipeline.vae = PixelDecoder(latent_scale, variant)
    pipeline.transformer = model.transformer
    pipeline.t5_text_encoder = pipeline.clip_text_encoder = None
    pipeline.tokenizers = {"t5": None, "clip": None}  # read before the prompt cache is consulted
    pipeline.bits, pipeline.lora_paths, pipeline.lora_scales = None, [], []
    pipeline.teacache_variant = variant
    pipeline.manifest = manifest or {}
    return pipeline


def sampling_record(steps: int = 28) -> dict:
    """The schedule mflux's FLUX.1-dev pipeline uses at the nominal size."""
    from mflux.models.common.config.config import Config  # mflux's Config needs ModelConfig set first

    config = Config(
        width=NOMINAL_SIZE,
        height=NOMINAL_SIZE,
        guidance=SAMPLE_GUIDANCE,
        scheduler="linear",
        model_config=ModelConfig.dev(),
        num_inference_steps=steps,
    )
    return {
        "pipeline": "mflux Flux1.generate_image (FLUX.1-dev model config)",
        "scheduler": "linear",
        "default_steps": steps,
        "height_width": NOMINAL_SIZE,
        "sigmas": [round(float(s), 6) for s in np.array(config.scheduler.sigmas)],
        "note": (
            f"called at {NOMINAL_SIZE}x{NOMINAL_SIZE}, which mflux counts as 256 tokens "
            f"(16 px each); the decoder turns them into the {IMAGE_SIZE}x{IMAGE_SIZE} image"
        ),
    }
