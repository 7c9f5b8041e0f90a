"""``tiny-shapes``: a small trained text-to-image model on mflux's own ``Flux2Transformer``.

Real FLUX weights are gigabytes; random weights give noise-like trajectories that say nothing about
how a trained model's steps relate. This model is trained (``python -m teacache.models.train_shapes``)
with flow matching on procedurally drawn 32x32 images ("a red circle on a blue background at the
left"), so it has real denoising dynamics, follows its prompts, and runs a 28-step generation on a CPU
in about a second. Its pipeline is driven exactly like mflux's ``Flux2Klein``: the same scheduler, the
same ``_predict`` closure (compiled, with CFG inside), the same callbacks, one ``mx.eval`` per step.

Pixels go straight into the transformer as 2x2 patches (12 channels, 256 tokens); there is no VAE.
The text encoder is a learned token embedding over a fixed vocabulary.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path

import mlx.core as mx
import numpy as np
import PIL.Image
from mflux.callbacks.callback_registry import CallbackRegistry
from mflux.models.common.config.config import Config
from mflux.models.common.config.model_config import ModelConfig
from mflux.models.flux2.latent_creator.flux2_latent_creator import Flux2LatentCreator
from mflux.models.flux2.model.flux2_text_encoder.prompt_encoder import Flux2PromptEncoder
from mflux.models.flux2.model.flux2_transformer.transformer import Flux2Transformer
from mflux.utils.apple_silicon import AppleSiliconUtil
from mflux.utils.exceptions import StopImageGenerationException
from mflux.utils.image_util import ImageUtil
from mlx import nn

from teacache._platform import use_float32_on_cpu
from teacache.errors import InputError
from teacache.io import atomic_path, file_sha256
from teacache.models._weights import WeightsError, load_checked_weights, parameter_count, read_checked_manifest  # noqa: F401
from teacache.models.shapes_data import (
    IMAGE_SIZE,
    LATENT_CHANNELS,
    LATENT_SIDE,
    MODEL_NAME,
    RECIPE_VERSION,
    TEXT_LEN,
    VOCAB,
    tokenize,
    unpatchify,
)

WEIGHTS_DIR = Path(__file__).resolve().parent / "weights"
DEFAULT_WEIGHTS = WEIGHTS_DIR / "tiny-shapes.safetensors"
DEFAULT_MANIFEST = WEIGHTS_DIR / "tiny-shapes.json"

# ---------------------------------------------------------------------------------------------------
# Model
# ---------------------------------------------------------------------------------------------------
ARCHITECTURE: dict = {
    "text_encoder": {"vocab_size": len(VOCAB), "dim": 64, "text_len": TEXT_LEN},
    "transformer": {
        "patch_size": 1,
        "in_channels": LATENT_CHANNELS,
        "num_layers": 2,
        "num_single_layers": 4,
        "attention_head_dim": 32,
        "num_attention_heads": 4,
        "joint_attention_dim": 64,
        "timestep_guidance_channels": 256,
        "mlp_ratio": 3.0,
        "axes_dims_rope": [8, 8, 8, 8],
        "rope_theta": 2000,
        "guidance_embeds": False,
    },
}


class TinyTextEncoder(nn.Module):
    """Stands in for FLUX.2's Qwen3 encoder: one learned vector per vocabulary word."""

    def __init__(self, vocab_size: int, dim: int, text_len: int = TEXT_LEN) -> None:
        super().__init__()
        self.text_len = text_len
        self.embedding = nn.Embedding(vocab_size, dim)

    def __call__(self, token_ids: mx.array) -> mx.array:
        return self.embedding(token_ids)


class TinyShapesModel(nn.Module):
    """Token embedding + mflux's ``Flux2Transformer``; ``__call__`` is the training forward (velocity)."""

    def __init__(self, architecture: dict | None = None) -> None:
        super().__init__()
        arch = architecture or ARCHITECTURE
        use_float32_on_cpu()  # before building: some mflux modules take their dtype from ModelConfig
        enc = arch["text_encoder"]
        self.text_encoder = TinyTextEncoder(enc["vocab_size"], enc["dim"], enc["text_len"])
        tr = dict(arch["transformer"])
        tr["axes_dims_rope"] = tuple(tr["axes_dims_rope"])
        self.transformer = Flux2Transformer(**tr)

    def __call__(
        self, latents: mx.array, token_ids: mx.array, timestep: mx.array, img_ids: mx.array, txt_ids: mx.array
    ) -> mx.array:
        """``timestep`` is sigma * 1000, exactly what the pipeline passes (``scheduler.timesteps[t]``)."""
        return self.transformer(
            hidden_states=latents,
            encoder_hidden_states=self.text_encoder(token_ids),
            timestep=timestep,
            img_ids=img_ids,
            txt_ids=txt_ids,
            guidance=None,
        )


def image_ids(batch_size: int = 1) -> mx.array:
    """(B, 256, 4) position ids (t, h, w, layer) of the 16x16 token grid, as Flux2LatentCreator makes them."""
    grid = mx.zeros((batch_size, LATENT_CHANNELS, LATENT_SIDE, LATENT_SIDE))
    return Flux2LatentCreator.prepare_grid_ids(grid, t_coord=0)


def text_ids(batch_size: int = 1) -> mx.array:
    """(B, TEXT_LEN, 4) position ids (0, 0, 0, token index), as Flux2PromptEncoder makes them."""
    return Flux2PromptEncoder.prepare_text_ids(mx.zeros((batch_size, TEXT_LEN, 1)))


def tiny_shapes_model_config() -> ModelConfig:
    """An mflux ModelConfig with FLUX.2 Klein's scheduling settings (sigma shift on, 1000 train steps)."""
    return ModelConfig(
        priority=1000,
        aliases=[MODEL_NAME],
        model_name=MODEL_NAME,
        base_model=None,
        controlnet_model=None,
        custom_transformer_model=None,
        num_train_steps=1000,
        max_sequence_length=TEXT_LEN,
        supports_guidance=True,
        requires_sigma_shift=True,
    )


def schedule(num_inference_steps: int = 28) -> tuple[np.ndarray, np.ndarray]:
    """The (sigmas, timesteps) the pipeline uses at 32x32, straight from mflux's scheduler."""
    config = Config(
        model_config=tiny_shapes_model_config(),
        num_inference_steps=num_inference_steps,
        height=IMAGE_SIZE,
        width=IMAGE_SIZE,
        scheduler="flow_match_euler_discrete",
    )
    return np.array(config.scheduler.sigmas), np.array(config.scheduler.timesteps)


@dataclasses.dataclass
class ShapesImage:
    """What ``generate_image`` returns: the 32x32 image, the final latents and how they were made."""

    image: PIL.Image.Image
    latents: mx.array
    seed: int
    prompt: str
    steps: int
    guidance: float
    negative_prompt: str = ""
    generation_time: float | None = None

    def upscaled(self, scale: int = 8) -> PIL.Image.Image:
        """Nearest-neighbour enlargement for viewing (32 px is too small to see)."""
        return upscale(self.image, scale)

    def save(self, path: str | Path, scale: int = 1) -> None:
        with atomic_path(path) as tmp:
            (self.upscaled(scale) if scale > 1 else self.image).save(tmp, format="PNG")


def upscale(image: PIL.Image.Image, scale: int = 8) -> PIL.Image.Image:
    return image.resize((image.width * scale, image.height * scale), PIL.Image.NEAREST)


class TinyShapesPipeline:
    """Driven like mflux's ``Flux2Klein``: ``transformer``, ``callbacks``, ``model_config``, ``_predict``.

    TeaCache adapters swap ``transformer`` for a proxy and ``_predict`` for an uncompiled version, as
    for Flux2Klein; ``generate_image`` keeps Klein's call pattern so both swaps take effect.
    """

    teacache_variant = MODEL_NAME
    default_guidance = 1.0  # generate_image's guidance when none is given: the variant's own

    def __init__(self, model: TinyShapesModel, manifest: dict | None = None) -> None:
        self.model = model
        self.text_encoder = model.text_encoder
        self.transformer = model.transformer
        self.model_config = tiny_shapes_model_config()
        self.callbacks = CallbackRegistry()
        self.prompt_cache: dict[str, tuple[mx.array, mx.array]] = {}
        self.manifest = manifest or {}
        self.bits = None
        self.lora_paths: list[str] = []
        self.lora_scales: list[float] = []

    # What a model trained on other data changes (teacache.models.open_models): its captions' tokens, the
    # text ids of its caption length, and the scale between its latents and pixels.
    @staticmethod
    def _tokenize(prompt: str) -> np.ndarray:
        return tokenize(prompt)

    @staticmethod
    def _text_ids(batch_size: int) -> mx.array:
        return text_ids(batch_size)

    @staticmethod
    def _pixels(latents: mx.array) -> mx.array:
        """(B, 256, 12) latents -> (B, 3, H, W) pixels in [-1, 1], as a VAE decoder returns them."""
        return unpatchify(latents).transpose(0, 3, 1, 2)

    def encode_prompt(self, prompt: str) -> tuple[mx.array, mx.array]:
        """Prompt -> (embeddings (1, TEXT_LEN, 64), text ids (1, TEXT_LEN, 4)), cached per prompt."""
        if prompt not in self.prompt_cache:
            ids = mx.array(self._tokenize(prompt))[None]
            embeds = self.text_encoder(ids).astype(ModelConfig.precision)
            txt_ids = Flux2PromptEncoder.prepare_text_ids(embeds)
            mx.eval(embeds, txt_ids)
            self.prompt_cache[prompt] = (embeds, txt_ids)
        return self.prompt_cache[prompt]

    def _encode_prompt_pair(
        self, *, prompt: str, negative_prompt: str | None, guidance: float
    ) -> tuple[mx.array, mx.array, mx.array | None, mx.array | None]:
        prompt_embeds, txt_ids = self.encode_prompt(prompt)
        negative_prompt_embeds = negative_text_ids = None
        if guidance is not None and guidance > 1.0 and negative_prompt is not None:
            negative_prompt_embeds, negative_text_ids = self.encode_prompt(negative_prompt)
        return prompt_embeds, txt_ids, negative_prompt_embeds, negative_text_ids

    @staticmethod
    def _check_size(height: int, width: int) -> None:
        if (height, width) != (IMAGE_SIZE, IMAGE_SIZE):
            raise InputError(
                f"height/width: tiny-shapes only makes {IMAGE_SIZE}x{IMAGE_SIZE} images, got {height}x{width}"
            )

    @staticmethod
    def _initial_latents(seeds: Sequence[int]) -> mx.array:
        noise = [mx.random.normal((1, LATENT_SIDE * LATENT_SIDE, LATENT_CHANNELS), key=mx.random.key(s)) for s in seeds]
        return mx.concatenate(noise, axis=0).astype(ModelConfig.precision)

    def _config(
        self, num_inference_steps: int, guidance: float, height: int = IMAGE_SIZE, width: int = IMAGE_SIZE,
        scheduler: str = "flow_match_euler_discrete",
    ) -> Config:  # fmt: skip
        """A generation's Config (and with it mflux's scheduler), made as Klein makes it."""
        return Config(
            model_config=self.model_config,
            num_inference_steps=num_inference_steps,
            height=height,
            width=width,
            guidance=guidance,
            scheduler=scheduler,
        )

    @staticmethod
    def _denoise_step(predict, config: Config, t: int, latents: mx.array, conditioning: tuple) -> mx.array:
        """One step of the denoising loop as Klein takes it: the predicted noise, then the scheduler's update."""
        noise = predict(latents, *conditioning, config.scheduler.timesteps[t])  # predict's arguments in order
        return config.scheduler.step(noise=noise, timestep=t, latents=latents, sigmas=config.scheduler.sigmas)

    def generate_image(
        self,
        seed: int,
        prompt: str,
        num_inference_steps: int = 28,
        guidance: float | None = None,
        height: int = IMAGE_SIZE,
        width: int = IMAGE_SIZE,
        negative_prompt: str = "",
        scheduler: str = "flow_match_euler_discrete",
    ) -> ShapesImage:
        """One image, the way ``Flux2Klein.generate_image`` makes one (CFG if guidance > 1; by default the
        model's own guidance, ``default_guidance``)."""
        self._check_size(height, width)
        guidance = self.default_guidance if guidance is None else guidance
        # 0. Config (and with it mflux's scheduler) as Klein makes it
        config = self._config(num_inference_steps, guidance, height, width, scheduler)
        # 1. Encode prompt(s)
        prompt_embeds, txt_ids, negative_prompt_embeds, negative_text_ids = self._encode_prompt_pair(
            prompt=prompt, negative_prompt=negative_prompt, guidance=guidance
        )
        # 2. Latents: noise from the seed, 256 tokens of 2x2 RGB patches
        latents = self._initial_latents([seed])
        latent_ids = image_ids(1)

        # 3. Denoising loop
        ctx = self.callbacks.start(seed=seed, prompt=prompt, config=config)
        ctx.before_loop(latents)
        predict = self._predict(self.transformer)
        conditioning = (latent_ids, prompt_embeds, txt_ids, negative_prompt_embeds, negative_text_ids, guidance)
        for t in config.time_steps:
            try:
                latents = self._denoise_step(predict, config, t, latents, conditioning)
                ctx.in_loop(t, latents)
                mx.eval(latents)
            except KeyboardInterrupt:  # noqa: PERF203
                ctx.interruption(t, latents)
                raise StopImageGenerationException(
                    f"Stopping image generation at step {t + 1}/{config.num_inference_steps}"
                ) from None
        del predict
        ctx.after_loop(latents)

        # 4. Decode: the latents are the image's patches
        pixels = self._pixels(latents)  # (1, 3, H, W) as a VAE decoder returns it
        return ShapesImage(
            image=ImageUtil.to_pil(pixels),
            latents=latents,
            seed=seed,
            prompt=prompt,
            steps=num_inference_steps,
            guidance=guidance,
            negative_prompt=negative_prompt,
            generation_time=config.time_steps.format_dict.get("elapsed"),
        )

    def generate_batch(
        self,
        seeds: Sequence[int],
        prompts: Sequence[str],
        num_inference_steps: int = 28,
        guidance: float | None = None,
        negative_prompt: str = "",
    ) -> list[ShapesImage]:
        """Many images in one batched loop, for evaluation; no callbacks. Same noise per seed as
        ``generate_image``; results agree with it up to float rounding of the batched matmuls."""
        if len(seeds) != len(prompts):
            raise InputError(f"seeds/prompts: {len(seeds)} seeds for {len(prompts)} prompts")
        guidance = self.default_guidance if guidance is None else guidance
        config = self._config(num_inference_steps, guidance)
        n = len(seeds)
        encoded = [self.encode_prompt(p) for p in prompts]
        prompt_embeds = mx.concatenate([e for e, _ in encoded], axis=0)
        txt_ids = self._text_ids(n)
        negative_prompt_embeds = negative_text_ids = None
        if guidance is not None and guidance > 1.0:
            negative = self.encode_prompt(negative_prompt)[0]
            negative_prompt_embeds = mx.broadcast_to(negative, (n, *negative.shape[1:]))
            negative_text_ids = txt_ids
        latents = self._initial_latents(seeds)
        latent_ids = image_ids(n)
        predict = self._predict(self.transformer)
        conditioning = (latent_ids, prompt_embeds, txt_ids, negative_prompt_embeds, negative_text_ids, guidance)
        for t in range(config.num_inference_steps):
            latents = self._denoise_step(predict, config, t, latents, conditioning)
            mx.eval(latents)
        pixels = self._pixels(latents)
        return [
            ShapesImage(
                image=ImageUtil.to_pil(pixels[i : i + 1]),
                latents=latents[i : i + 1],
                seed=int(seeds[i]),
                prompt=prompts[i],
                steps=num_inference_steps,
                guidance=guidance,
                negative_prompt=negative_prompt,
            )
            for i in range(n)
        ]

    @staticmethod
    def _predict(transformer):
        """Flux2Klein._predict, same signature and semantics: CFG inside, compiled except on M1/M2."""

        def predict(
            latents: mx.array,
            latent_ids: mx.array,
            prompt_embeds: mx.array,
            text_ids: mx.array,
            negative_prompt_embeds: mx.array | None,
            negative_text_ids: mx.array | None,
            guidance: float,
            timestep: mx.array,
        ):
            def branch_noise(embeds, ids):
                return transformer(
                    hidden_states=latents, encoder_hidden_states=embeds, timestep=timestep, img_ids=latent_ids,
                    txt_ids=ids, guidance=None,
                )  # fmt: skip

            noise = branch_noise(prompt_embeds, text_ids)
            if negative_prompt_embeds is not None and negative_text_ids is not None:
                negative_noise = branch_noise(negative_prompt_embeds, negative_text_ids)
                noise = negative_noise + guidance * (noise - negative_noise)
            return noise

        if AppleSiliconUtil.is_m1_or_m2():
            return predict
        return mx.compile(predict)


# ---------------------------------------------------------------------------------------------------
# Weights
# ---------------------------------------------------------------------------------------------------
sha256_file = file_sha256  # the name the loader and its tests use


def load_tiny_shapes(
    weights_path: str | Path | None = None, manifest_path: str | Path | None = None
) -> TinyShapesPipeline:
    """The committed ``tiny-shapes`` model as a pipeline, after checking the file against its manifest.

    The manifest is ``manifest_path``, else the ``.json`` beside the weights, else the packaged one.
    Float32 on the CPU backend.
    """
    use_float32_on_cpu()
    path = Path(weights_path) if weights_path is not None else DEFAULT_WEIGHTS
    if manifest_path is None:
        beside = path.with_suffix(".json")
        manifest_path = beside if beside.exists() else DEFAULT_MANIFEST
    retrain = "python -m teacache.models.train_shapes"
    manifest = read_checked_manifest(path, Path(manifest_path), RECIPE_VERSION, VOCAB, retrain)
    model = TinyShapesModel(manifest.get("architecture", ARCHITECTURE))
    load_checked_weights(model, path, MODEL_NAME)
    return TinyShapesPipeline(model, manifest=manifest)
