"""The open-scenes models: ``tiny-open-flux2`` and ``tiny-open-flux1``, one spec per family.

Both are trained on ``open_data`` (captions that name one object and leave the rest open) with the
same mflux transformers and token layouts as ``tiny-shapes`` (FLUX.2: 32 px, 2x2 patches) and, for
FLUX.1, 64 px laid out as a 16-channel latent (``flux1_latents``, ``flux1_pipeline``); only the data, the
vocabulary and the latent scale differ. Pixels are multiplied by ``open_data.LATENT_SCALE`` on the way in
and divided on the way out, as a VAE's scaling factor: content then spreads as widely as the noise, as in a
real latent space.

At this width mflux's FLUX.1 transformer never learned to draw a named shape
(results/cuda-nvidia-h200/flux1-layout-study): ``train_open --captions any-shape`` trains it on captions that
leave the shape open (``open_data.ANY_SHAPE``), docs/test-subjects.md says what that gave so far.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

import mlx.core as mx
import numpy as np
from mlx import nn

from teacache import variants
from teacache.models import flux1_latents, open_data, shapes_data
from teacache.models._weights import parameter_count

__all__ = [
    "FAMILIES",
    "OpenLayout",
    "batched_velocity",
    "build",
    "flux1_rotary",
    "flux2_text_ids",
    "load_tiny_open_flux1",
    "load_tiny_open_flux2",
    "parameter_count",
    "sampling_record",
    "trained_model",
]

WEIGHTS_DIR = Path(__file__).resolve().parent / "weights"
TEXT_DIM = 64


@dataclasses.dataclass(frozen=True)
class OpenLayout:
    """What differs between the two families: the name, the image size, the architecture, the tokens, the captions."""

    name: str
    family: str
    image_size: int
    architecture: dict
    to_tokens: Callable[[np.ndarray], np.ndarray]
    captions: open_data.Captions = open_data.NAMED_SHAPE

    @property
    def weights_name(self) -> str:
        return f"{self.name}.safetensors"

    @property
    def manifest_name(self) -> str:
        return f"{self.name}.json"

    @property
    def folder(self) -> Path:
        return WEIGHTS_DIR / self.name


def _flux2_tokens(images: np.ndarray) -> np.ndarray:
    return shapes_data.patchify(images) * open_data.LATENT_SCALE


def _flux1_tokens(images: np.ndarray) -> np.ndarray:
    return flux1_latents.pack(flux1_latents.to_latents(images)) * open_data.LATENT_SCALE


def _text(captions: open_data.Captions) -> dict:
    return {"vocab_size": len(captions.vocab), "dim": TEXT_DIM, "text_len": open_data.TEXT_LEN}


FAMILIES: dict[str, OpenLayout] = {
    "flux2": OpenLayout(
        name=variants.built_by(f"{__name__}:load_tiny_open_flux2").name,
        family="flux2",
        image_size=shapes_data.IMAGE_SIZE,
        architecture={
            "text_encoder": _text(open_data.NAMED_SHAPE),
            "transformer": {
                "patch_size": 1,
                "in_channels": shapes_data.LATENT_CHANNELS,
                "num_layers": 2,
                "num_single_layers": 4,
                "attention_head_dim": 32,
                "num_attention_heads": 4,
                "joint_attention_dim": TEXT_DIM,
                "timestep_guidance_channels": 256,
                "mlp_ratio": 3.0,
                "axes_dims_rope": [8, 8, 8, 8],
                "rope_theta": 2000,
                "guidance_embeds": False,
            },
        },  # fmt: skip
        to_tokens=_flux2_tokens,
    ),
    "flux1": OpenLayout(
        name=variants.built_by(f"{__name__}:load_tiny_open_flux1").name,
        family="flux1",
        image_size=flux1_latents.IMAGE_SIZE,
        architecture={
            "text_encoder": _text(open_data.ANY_SHAPE),
            "transformer": {
                "class": "mflux Transformer (FLUX.1)",
                "model_config": "dev",
                "heads": 1,
                "width": 128,
                "joint_blocks": 2,
                "single_blocks": 4,
            },
        },  # fmt: skip
        to_tokens=_flux1_tokens,
        # its captions leave the shape open: a FLUX.1 transformer this small draws every named shape as a blob
        # (results/cuda-nvidia-h200/flux1-layout-study), and an open shape is what its flow has to decide
        captions=open_data.ANY_SHAPE,
    ),
}


CAPTIONS = {"named-shape": open_data.NAMED_SHAPE, "any-shape": open_data.ANY_SHAPE}


def layout_with(family: str, captions: str | None = None) -> OpenLayout:
    """The family's layout under other captions (``CAPTIONS``; None: its own): their vocabulary sizes the text table."""
    layout = FAMILIES[family]
    if captions is None or CAPTIONS[captions] == layout.captions:
        return layout
    words = CAPTIONS[captions]
    architecture = {**layout.architecture, "text_encoder": _text(words)}
    return dataclasses.replace(layout, captions=words, architecture=architecture)


def build(family: str, seed: int = 0, architecture: dict | None = None) -> nn.Module:
    """The family's model (text stand-in + mflux transformer) with fresh weights drawn from ``seed``."""
    layout = FAMILIES[family]
    if family == "flux2":
        from teacache.models.shapes import TinyShapesModel

        return TinyShapesModel(architecture or layout.architecture)
    from teacache.models.flux1_pipeline import TinyFlux1Model

    return TinyFlux1Model(architecture or layout.architecture, seed=seed)


def flux2_text_ids(batch_size: int = 1) -> mx.array:
    from mflux.models.flux2.model.flux2_text_encoder.prompt_encoder import Flux2PromptEncoder

    return Flux2PromptEncoder.prepare_text_ids(mx.zeros((batch_size, open_data.TEXT_LEN, 1)))


def flux1_rotary(transformer) -> mx.array:
    """The RoPE table mflux's FLUX.1 pipeline builds at the nominal size, for TEXT_LEN caption tokens."""
    from mflux.models.flux.model.flux_transformer.transformer import Transformer

    txt_ids = Transformer._prepare_text_ids(seq_len=open_data.TEXT_LEN)
    img_ids = Transformer._prepare_latent_image_ids(height=flux1_latents.NOMINAL_SIZE, width=flux1_latents.NOMINAL_SIZE)
    return transformer.pos_embed(mx.concatenate((txt_ids, img_ids), axis=1))


def batched_velocity(model: nn.Module, family: str, batch: int) -> Callable:
    """``f(model, latents, token_ids, sigma, guidance) -> velocity`` for a training batch: exactly the
    transformer call the family's pipeline makes at step t with ``sigmas[t] = sigma``."""
    if family == "flux2":
        from teacache.models.shapes import image_ids

        img_ids, txt_ids = image_ids(1), flux2_text_ids(1)

        def velocity(model, latents, token_ids, sigma, guidance):
            return model(latents, token_ids, sigma * 1000.0, img_ids, txt_ids)

        return velocity
    model.set_batch_size(batch)
    rotary = flux1_rotary(model.transformer)

    def velocity(model, latents, token_ids, sigma, guidance):
        return model.velocity(latents, token_ids, sigma, guidance, rotary)

    return velocity


def sampling_record(family: str) -> dict:
    """The schedule the family's pipeline runs at the nominal size, 28 steps."""
    if family == "flux2":
        from teacache.models.train_shapes import sampling_record as flux2_record

        return flux2_record()
    from teacache.models.flux1_pipeline import sampling_record as flux1_record

    return flux1_record()


def _checked(family: str, weights_path: str | Path | None, manifest_path: str | Path | None) -> tuple[nn.Module, dict]:
    """The family's model with its committed (or given) weights, once the file matches its manifest."""
    from teacache._platform import use_float32_on_cpu
    from teacache.models._weights import load_checked_weights, read_checked_manifest

    use_float32_on_cpu()
    layout = FAMILIES[family]
    path = Path(weights_path) if weights_path is not None else layout.folder / layout.weights_name
    if manifest_path is None:
        beside = path.with_suffix(".json")
        manifest_path = beside if beside.exists() else layout.folder / layout.manifest_name
    retrain = f"python -m teacache.models.train_open --family {family}"
    captions = layout.captions
    manifest = read_checked_manifest(path, Path(manifest_path), captions.version, captions.vocab, retrain)
    model = build(family, architecture=manifest.get("architecture", layout.architecture))
    load_checked_weights(model, path, layout.name)
    return model, manifest


def trained_model(family: str) -> nn.Module:
    """The family's model with its committed weights, checked against its manifest, without a pipeline around it."""
    return _checked(family, None, None)[0]


def _tokenizer(layout: OpenLayout) -> Callable[[str], np.ndarray]:
    def tokenize(prompt: str) -> np.ndarray:
        return open_data.tokenize(prompt, layout.name, layout.captions)

    return tokenize


def load_tiny_open_flux2(weights_path: str | Path | None = None, manifest_path: str | Path | None = None):
    """``tiny-open-flux2`` as a pipeline driven like mflux's ``Flux2Klein`` (32x32, CFG when guidance > 1)."""
    from teacache.models.shapes import TinyShapesPipeline, unpatchify

    name = FAMILIES["flux2"].name

    class OpenFlux2Pipeline(TinyShapesPipeline):
        teacache_variant = name
        default_guidance = 2.0  # CFG against the empty caption, as the variant's generation settings say
        _tokenize = staticmethod(_tokenizer(FAMILIES["flux2"]))
        _text_ids = staticmethod(flux2_text_ids)

        @staticmethod
        def _pixels(latents: mx.array) -> mx.array:
            return unpatchify(latents / open_data.LATENT_SCALE).transpose(0, 3, 1, 2)

    model, manifest = _checked("flux2", weights_path, manifest_path)
    return OpenFlux2Pipeline(model, manifest=manifest)


def load_tiny_open_flux1(weights_path: str | Path | None = None, manifest_path: str | Path | None = None):
    """``tiny-open-flux1`` as mflux's ``Flux1`` (FLUX.1-dev config); generate at 256x256, the image is 64x64."""
    from teacache.models.flux1_pipeline import as_pipeline

    layout = FAMILIES["flux1"]
    model, manifest = _checked("flux1", weights_path, manifest_path)
    return as_pipeline(
        model, manifest, variant=layout.name, tokenizer=_tokenizer(layout), latent_scale=open_data.LATENT_SCALE
    )
