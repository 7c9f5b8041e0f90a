"""Which mflux generate command each family is, and how it loads and runs a model, as mflux's own ``main`` does.

The parser is mflux's ``build_parser()`` of that command, so every flag it has passes through unchanged. Loading
follows each command's ``main()`` (the same pipeline class and keyword arguments); embedded models load through
:func:`teacache.loading.load_model`. mflux is imported only when a command runs.
"""

from __future__ import annotations

import importlib
import inspect
from argparse import Namespace
from dataclasses import dataclass


@dataclass(frozen=True)
class MfluxCommand:
    """One mflux generate command: its module (``build_parser``), console script and latent creator."""

    module: str
    script: str
    latent_creator: str  # "module:Class", for mflux's stepwise image callbacks

    def build_parser(self):
        return importlib.import_module(self.module).build_parser()


COMMANDS = {
    "flux1": MfluxCommand(
        "mflux.models.flux.cli.flux_generate",
        "mflux-generate",
        "mflux.models.flux.latent_creator.flux_latent_creator:FluxLatentCreator",
    ),
    "flux2": MfluxCommand(
        "mflux.models.flux2.cli.flux2_generate",
        "mflux-generate-flux2",
        "mflux.models.flux2.latent_creator.flux2_latent_creator:Flux2LatentCreator",
    ),
    "qwen": MfluxCommand(
        "mflux.models.qwen.cli.qwen_image_generate",
        "mflux-generate-qwen",
        "mflux.models.qwen.latent_creator.qwen_latent_creator:QwenLatentCreator",
    ),
    "zimage": MfluxCommand(
        "mflux.models.z_image.cli.z_image_generate",
        "mflux-generate-z-image",
        "mflux.models.z_image.latent_creator:ZImageLatentCreator",
    ),
}


def _attribute(target: str):
    module, name = target.split(":")
    return getattr(importlib.import_module(module), name)


def load_released(family: str, args: Namespace):
    """A released model the way the family's mflux command loads it (its pipeline class and keywords)."""
    from mflux.cli.parser.parsers import lora_init_kwargs_from_args
    from mflux.models.common.config.model_config import ModelConfig

    lora = lora_init_kwargs_from_args(args)
    if family == "qwen":
        from mflux.models.qwen.cli.qwen_image_generate import QwenImageCommand

        return QwenImageCommand.load(args)
    if family == "zimage":
        from mflux.models.z_image.cli.z_image_generate import ZImageCommand

        return ZImageCommand.load(args)
    config = ModelConfig.from_name(model_name=args.model, base_model=args.base_model)
    if family == "flux1":
        from mflux.models.flux.variants.txt2img.flux import Flux1

        return Flux1(model_config=config, quantize=args.quantize, model_path=args.model_path, **lora)
    from mflux.models.common.compute_precision import ComputePrecision
    from mflux.models.common.vae.vae_decode_options import VAEDecodeOptions
    from mflux.models.flux2.variants.txt2img.flux2_klein import Flux2Klein

    model = Flux2Klein(
        model_config=config,
        quantize=args.quantize,
        model_path=args.model_path,
        compute_precision=ComputePrecision.dtype_for(args.compute_precision),
        small_text_encoder=args.small_text_encoder,
        small_decoder=args.small_decoder,
        **lora,
    )
    VAEDecodeOptions.apply(args, model)
    return model


def register_mflux_callbacks(family: str, args: Namespace, model):
    """mflux's own callbacks (battery saver, stepwise images, memory saver), as its command registers them."""
    from mflux.callbacks.callback_manager import CallbackManager

    return CallbackManager.register_callbacks(
        args=args, model=model, latent_creator=_attribute(COMMANDS[family].latent_creator)
    )


def generate_kwargs(family: str, args: Namespace, seed: int, prompt: str, width: int, height: int) -> dict:
    """The keywords the family's mflux command passes to ``generate_image``."""
    from mflux.utils.prompt_util import PromptUtil

    kwargs = {
        "seed": seed,
        "prompt": prompt,
        "width": width,
        "height": height,
        "guidance": args.guidance,
        "scheduler": "flow_match_euler_discrete" if family == "flux2" else args.scheduler,
        "image_path": getattr(args, "image_path", None),
        "num_inference_steps": args.steps,
        "image_strength": getattr(args, "image_strength", None),
        "pid_decode": getattr(args, "pid_decode", False),
        "pid_degrade_sigma": getattr(args, "pid_degrade_sigma", 0.0),
    }
    if family != "flux2":
        kwargs["negative_prompt"] = PromptUtil.read_negative_prompt(args)
    return kwargs


def accepted(function, kwargs: dict) -> dict:
    """The keywords ``function`` takes (an embedded pipeline takes fewer than mflux's; the rest are refused
    earlier when they were given)."""
    names = inspect.signature(function).parameters
    return {k: v for k, v in kwargs.items() if k in names}
