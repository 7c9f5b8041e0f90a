"""``load_model``: the one loader every command uses (embedded models, mflux names, local folders).

Which names exist, which mflux pipeline each family uses and how an embedded model is built all come
from the variant registry (``teacache.variants``); this module only resolves and loads.
"""

from __future__ import annotations

import importlib
import inspect
from pathlib import Path

from teacache import variants
from teacache._compat import check_mflux_version
from teacache._platform import use_float32_on_cpu


class ModelFolderError(ValueError):
    """A local model folder that cannot be what it claims to be (missing, empty or corrupt weights)."""


def model_defaults(name_or_path: str, base_model: str | None = None) -> dict:
    """Generation defaults (steps, width, height, guidance) of what ``load_model`` would load."""
    return resolve_spec(name_or_path, base_model).generation.as_dict()


def resolve_spec(name_or_path: str, base_model: str | None = None) -> variants.VariantSpec:
    """The variant a ``load_model`` call will give, without loading anything (for early validation)."""
    path = Path(name_or_path).expanduser()
    if base_model is not None:
        spec = variants.find(base_model)
        if spec is None or spec.embedded:
            real = [n for n in variants.load_names() if not variants.get(n).embedded]
            raise ValueError(f"base_model: unknown architecture {base_model!r}; expected one of {', '.join(real)}")
        if not spec.supported:
            variants.get(base_model)  # raises with the reason
        return spec
    spec = variants.find(name_or_path)
    if spec is not None:
        return variants.get(name_or_path)
    if path.exists():
        kind = "folder" if path.is_dir() else "file, not a folder of weights"
        raise ValueError(
            f"base_model: {name_or_path} is a local {kind}; name its architecture with base_model "
            f"({', '.join(n for n in variants.load_names() if not variants.get(n).embedded)})"
        )
    raise ValueError(
        f"model: unknown model {name_or_path!r}; expected one of {', '.join(variants.load_names())} "
        "or a local folder with base_model"
    )


def check_model_folder(path: Path) -> None:
    """Refuse a folder whose safetensors files are missing or unreadable, before mflux builds anything."""
    from safetensors import safe_open

    if not path.is_dir():
        raise ModelFolderError(f"model: {path} is not a folder of mflux-format weights")
    files = sorted(path.rglob("*.safetensors"))
    if not files:
        raise ModelFolderError(f"model: {path} holds no .safetensors files")
    for file in files:
        try:
            with safe_open(str(file), framework="numpy") as handle:
                handle.keys()
        except Exception as exc:  # noqa: BLE001 - safetensors raises several types for a bad header
            raise ModelFolderError(
                f"model: {file} is not a readable safetensors file ({type(exc).__name__}: {exc}); re-save or "
                "re-download it"
            ) from None


def load_model(name_or_path: str, *, base_model: str | None = None, quantize: int | None = None, seed: int = 0):
    """Return an mflux pipeline.

    An embedded model (``tiny-shapes``, the trained default; random-weight ``tiny-flux1`` etc. from
    ``seed``), an mflux model name (``dev``, ``flux1-dev``, ``flux2-klein-4b``, ``qwen-image``, ...; weights
    from the Hugging Face cache), or a local folder of mflux-format weights with ``base_model`` naming its
    architecture (a variant or mflux name). The pipeline carries ``teacache_variant``.
    """
    check_mflux_version()
    spec = resolve_spec(name_or_path, base_model)
    path = Path(name_or_path).expanduser()
    is_folder = base_model is not None
    if is_folder:
        check_model_folder(path)
    use_float32_on_cpu()
    if spec.embedded and not is_folder:
        build = _attribute(spec.builder)
        return build(seed=seed) if "seed" in inspect.signature(build).parameters else build()
    from mflux.models.common.config.model_config import ModelConfig

    config = ModelConfig.from_name(
        model_name=str(path) if is_folder else spec.mflux_names[0],
        base_model=spec.mflux_names[0] if is_folder else None,
    )
    pipeline = _attribute(variants.family(spec.family).pipeline)
    model = pipeline(model_config=config, quantize=quantize, model_path=str(path) if is_folder else None)
    model.teacache_variant = spec.name
    return model


def _attribute(target: str):
    module, name = target.split(":")
    return getattr(importlib.import_module(module), name)
