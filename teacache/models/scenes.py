"""``tiny-scenes``: a small trained text-to-image model on mflux's own FLUX.1 ``Transformer``.

The second trained model beside ``tiny-shapes`` (FLUX.2), so that quality findings rest on two
families. It is trained (``python -m teacache.models.train_scenes``) with flow matching on procedural
64x64 scenes of two objects in a relation ("a big red striped circle left of a small blue square on a
white background"), and it generates through mflux's ``Flux1.generate_image`` itself: the same
latents, scheduler, transformer call, callbacks and decode path as FLUX.1-dev.

What stands in for the parts a trained FLUX.1 has and this one does not:
- the transformer is mflux's ``Transformer`` (FLUX.1-dev config, guidance embedder included) at width
  128 (one head of 128, so mflux's RoPE axes fit), 2 joint and 4 single blocks;
- the text encoders are learned embedding tables: the T5 sequence is the caption's 16 token vectors plus
  a vector per position, the CLIP pooled vector the mean of a second table over the caption's words;
- there is no VAE: pixels are laid out as the latent (``scenes_data.to_latents``), so the pipeline is
  called at the nominal 256x256 and decodes to the 64x64 image.
Guidance is embedded as FLUX.1-dev does, but the model was trained with guidance drawn from 1..5
independently of the image, so it has learned to ignore it.
"""

from __future__ import annotations

from pathlib import Path

import mlx.core as mx
from mflux.models.common.config.model_config import ModelConfig
from mflux.models.flux.flux_initializer import FluxInitializer
from mflux.models.flux.model.flux_transformer.joint_attention import JointAttention
from mflux.models.flux.model.flux_transformer.single_block_attention import SingleBlockAttention
from mflux.models.flux.model.flux_transformer.transformer import Transformer
from mflux.models.flux.variants.txt2img.flux import Flux1
from mlx import nn

from teacache._platform import use_float32_on_cpu
from teacache.errors import InputError
from teacache.models._weights import WeightsError, load_checked_weights, parameter_count, read_checked_manifest
from teacache.models.scenes_data import (
    IMAGE_SIZE,
    MODEL_NAME,
    NOMINAL_SIZE,
    RECIPE_VERSION,
    TEXT_LEN,
    VOCAB,
    from_latents,
    tokenize,
)
from teacache.models.tiny_flux1 import build_tiny_transformer

__all__ = ["WeightsError", "load_tiny_scenes", "parameter_count"]

WEIGHTS_DIR = Path(__file__).resolve().parent / "weights" / MODEL_NAME
DEFAULT_WEIGHTS = WEIGHTS_DIR / "tiny-scenes.safetensors"
DEFAULT_MANIFEST = WEIGHTS_DIR / "tiny-scenes.json"
TRAIN_COMMAND = "python -m teacache.models.train_scenes"

ARCHITECTURE: dict = {
    "text_encoder": {"vocab_size": len(VOCAB), "dim": 64, "text_len": TEXT_LEN},
    "transformer": {"class": "mflux Transformer (FLUX.1)", "model_config": "dev", "heads": 1, "width": 128,
                    "joint_blocks": 2, "single_blocks": 4},
}  # fmt: skip


class SceneTextEncoder(nn.Module):
    """Stands in for T5 + CLIP: token plus position vectors for the sequence, a mean of other vectors for the pool.

    The position vectors matter: mflux gives FLUX.1's text tokens no position of their own (T5's output
    carries it), and without them "a red circle left of a blue square on a white background" is a bag of
    colours whose roles the transformer cannot tell apart."""

    def __init__(self, vocab_size: int, dim: int, text_len: int = TEXT_LEN) -> None:
        super().__init__()
        self.sequence = nn.Embedding(vocab_size, dim)
        self.position = nn.Embedding(text_len, dim)
        self.pooled = nn.Embedding(vocab_size, dim)

    def __call__(self, token_ids: mx.array) -> tuple[mx.array, mx.array]:
        """(B, TEXT_LEN) ids -> (B, TEXT_LEN, dim) sequence, (B, dim) pooled (padding left out of the mean)."""
        words = (token_ids != 0).astype(mx.float32)[..., None]
        pooled = (self.pooled(token_ids) * words).sum(axis=1) / mx.maximum(words.sum(axis=1), 1.0)
        sequence = self.sequence(token_ids) + self.position(mx.arange(token_ids.shape[1]))
        return sequence, pooled


class TinyScenesModel(nn.Module):
    """Text stand-in + mflux's FLUX.1 ``Transformer``; ``velocity`` is the batched training forward."""

    def __init__(self, architecture: dict | None = None, seed: int = 0) -> None:
        super().__init__()
        arch = architecture or ARCHITECTURE
        use_float32_on_cpu()  # before building: some mflux modules take their dtype from ModelConfig
        enc, tr = arch["text_encoder"], arch["transformer"]
        self.text_encoder = SceneTextEncoder(enc["vocab_size"], enc["dim"], enc["text_len"])
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


def rotary_embeddings(transformer: Transformer) -> mx.array:
    """The RoPE table the pipeline builds at the nominal size, for TEXT_LEN caption tokens."""
    txt_ids = Transformer._prepare_text_ids(seq_len=TEXT_LEN)
    img_ids = Transformer._prepare_latent_image_ids(height=NOMINAL_SIZE, width=NOMINAL_SIZE)
    return transformer.pos_embed(mx.concatenate((txt_ids, img_ids), axis=1))


class PixelDecoder(nn.Module):
    """The VAE's place in ``Flux1.generate_image``: latents laid out from pixels, read back as pixels."""

    spatial_scale = IMAGE_SIZE // (NOMINAL_SIZE // 8)  # 2: one latent position holds 2x2 pixels
    latent_channels = 16

    def __init__(self, latent_scale: float = 1.0, name: str = MODEL_NAME) -> None:
        super().__init__()
        self.latent_scale = latent_scale  # latents = latent_scale x pixels (1 for tiny-scenes)
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

    def __init__(self, encoder: SceneTextEncoder, tokenizer=tokenize) -> None:
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
    model: TinyScenesModel,
    manifest: dict | None = None,
    variant: str = MODEL_NAME,
    tokenizer=tokenize,
    latent_scale: float = 1.0,
) -> Flux1:
    """mflux's ``Flux1`` (FLUX.1-dev config) around the trained transformer and its text stand-in;
    ``variant``, ``tokenizer`` and ``latent_scale`` are another FLUX.1 model's on the same layout."""
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


def load_tiny_scenes(weights_path: str | Path | None = None, manifest_path: str | Path | None = None) -> Flux1:
    """The committed ``tiny-scenes`` model as mflux's ``Flux1``, once the file matches its manifest.

    The manifest is ``manifest_path``, else the ``.json`` beside the weights, else the packaged one.
    Generate at height = width = 256 (the nominal size); the image is 64x64. Float32 on the CPU backend.
    """
    use_float32_on_cpu()
    path = Path(weights_path) if weights_path is not None else DEFAULT_WEIGHTS
    if manifest_path is None:
        beside = path.with_suffix(".json")
        manifest_path = beside if beside.exists() else DEFAULT_MANIFEST
    manifest = read_checked_manifest(path, Path(manifest_path), RECIPE_VERSION, VOCAB, TRAIN_COMMAND)
    model = TinyScenesModel(manifest.get("architecture", ARCHITECTURE))
    load_checked_weights(model, path, MODEL_NAME)
    return as_pipeline(model, manifest)
