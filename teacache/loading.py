"""``load_model``: the one loader every command uses (embedded tiny models, mflux names, local paths)."""

from __future__ import annotations

from pathlib import Path

from teacache._compat import check_mflux_version
from teacache._platform import use_float32_on_cpu

EMBEDDED = ("tiny-shapes", "tiny-flux1", "tiny-flux2", "tiny-qwen-image", "tiny-z-image")
# embedded model name -> (module under teacache.models, builder function)
_EMBEDDED_BUILDERS = {
    "tiny-flux1": ("teacache.models.tiny_flux1", "build_tiny_flux1"),
    "tiny-flux2": ("teacache.models.tiny_flux2", "build_tiny_flux2"),
    "tiny-qwen-image": ("teacache.models.tiny_qwen", "build_tiny_qwen_image"),
    "tiny-z-image": ("teacache.models.tiny_zimage", "build_tiny_z_image"),
}

# Generation settings each model is calibrated and benchmarked with unless told otherwise.
MODEL_DEFAULTS = {
    "tiny-shapes": {"steps": 28, "width": 32, "height": 32, "guidance": 1.0},
    "tiny-flux1": {"steps": 20, "width": 128, "height": 128, "guidance": 3.5},
    "tiny-flux2": {"steps": 20, "width": 128, "height": 128, "guidance": 1.0},
    "tiny-qwen-image": {"steps": 10, "width": 128, "height": 128, "guidance": 4.0},
    "tiny-z-image": {"steps": 10, "width": 128, "height": 128, "guidance": 4.0},
    "qwen-image": {"steps": 50, "width": 1024, "height": 1024, "guidance": 4.0},
    "z-image": {"steps": 50, "width": 1024, "height": 1024, "guidance": 4.0},
    "dev": {"steps": 28, "width": 1024, "height": 1024, "guidance": 3.5},
    "krea-dev": {"steps": 28, "width": 1024, "height": 1024, "guidance": 4.5},
    "schnell": {"steps": 4, "width": 1024, "height": 1024, "guidance": 0.0},
}


def model_defaults(name: str) -> dict:
    return dict(MODEL_DEFAULTS.get(name, MODEL_DEFAULTS["dev"]))


_FLUX1_NAMES = ("dev", "schnell", "krea-dev", "flux2-klein-4b", "flux2-klein-9b", "qwen-image", "z-image")


def load_model(name_or_path: str, *, base_model: str | None = None, quantize: int | None = None, seed: int = 0):
    """Return an mflux pipeline.

    ``tiny-shapes`` (the embedded trained model), ``tiny-flux1`` (random weights from ``seed``), an mflux
    model name (``dev``, ``schnell``, ``krea-dev``; weights from the Hugging Face cache), or a local
    folder of mflux-format weights with ``base_model`` naming its architecture.
    """
    check_mflux_version()
    use_float32_on_cpu()
    if name_or_path in _EMBEDDED_BUILDERS:
        import importlib

        module, builder = _EMBEDDED_BUILDERS[name_or_path]
        return getattr(importlib.import_module(module), builder)(seed=seed)
    if name_or_path == "tiny-shapes":
        from teacache.models.shapes import load_tiny_shapes

        return load_tiny_shapes()
    from mflux.models.common.config.model_config import ModelConfig

    is_path = Path(name_or_path).expanduser().exists()
    if is_path and base_model is None:
        raise ValueError(
            f"base_model: {name_or_path} is a local folder; name its architecture ({', '.join(_FLUX1_NAMES)})"
        )
    try:
        config = ModelConfig.from_name(model_name=name_or_path, base_model=base_model)
    except Exception as exc:  # noqa: BLE001 - mflux raises several types for unknown names
        raise ValueError(
            f"model: unknown model {name_or_path!r}; expected one of {', '.join(EMBEDDED + _FLUX1_NAMES)} "
            f"or a local folder with base_model ({exc})"
        ) from None
    pipeline = _pipeline_class(config.model_name or "")
    if pipeline is None:
        raise ValueError(f"model: {name_or_path!r} ({config.model_name}) has no TeaCache integration")
    return pipeline(
        model_config=config,
        quantize=quantize,
        model_path=str(Path(name_or_path).expanduser()) if is_path else None,
    )


def _pipeline_class(model_name: str):
    """The mflux text-to-image pipeline class for a model repo name (None: no integration)."""
    if "FLUX.1" in model_name:
        from mflux.models.flux.variants.txt2img.flux import Flux1

        return Flux1
    if "FLUX.2-klein" in model_name and "kv" not in model_name.lower():
        from mflux.models.flux2.variants.txt2img.flux2_klein import Flux2Klein

        return Flux2Klein
    if model_name.startswith("Qwen/Qwen-Image") and "Edit" not in model_name and "2.1" not in model_name:
        from mflux.models.qwen.variants.txt2img.qwen_image import QwenImage

        return QwenImage
    if "Z-Image" in model_name and "Turbo" not in model_name:
        from mflux.models.z_image.variants.z_image import ZImage

        return ZImage
    return None
