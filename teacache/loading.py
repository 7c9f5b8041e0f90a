"""``load_model``: the one loader every command uses (embedded models, mflux names, local folders).

Which names exist, which mflux pipeline each family uses and how an embedded model is built all come
from the variant registry (``teacache.variants``); this module only resolves and loads. An embedded model
is built by the zoo function its spec names, through ``variants.zoo`` (nothing here imports the zoo).
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Sequence
from pathlib import Path

import mlx.core as mx
from mlx import nn
from mlx.utils import tree_flatten

from teacache import variants
from teacache._compat import check_mflux_version
from teacache._platform import use_float32_on_cpu
from teacache.errors import InputError, InputTypeError, TeaCacheError
from teacache.lora import Loras, header_error


class ModelFolderError(TeaCacheError, ValueError):
    """A local model folder that cannot be what it claims to be (missing, empty or corrupt weights)."""


def model_defaults(name_or_path: str, base_model: str | None = None) -> dict:
    """Generation defaults (steps, width, height, guidance) of what ``load_model`` would load."""
    return resolve_spec(name_or_path, base_model).generation.as_dict()


RANDOM_PREFIX = variants.RANDOM_PREFIX
FULL_TRANSFORMER = variants.ZOO + ".fullsize:full_transformer"  # a released variant's transformer, weights lazy


def resolve_spec(name_or_path: str, base_model: str | None = None) -> variants.VariantSpec:
    """The variant a ``load_model`` call will give, without loading anything (for early validation)."""
    if name_or_path.startswith(RANDOM_PREFIX) and base_model is None:
        return variants.get(variants.parse_random_name(name_or_path))
    path = Path(name_or_path).expanduser()
    if base_model is not None:
        spec = variants.find(base_model)
        if spec is None:
            raise InputError(
                f"base_model: unknown architecture {base_model!r}; expected one of {', '.join(variants.load_names())}"
            )
        if not spec.supported:
            variants.get(base_model)  # raises with the reason
        return spec
    spec = variants.find(name_or_path)
    if spec is not None:
        return variants.get(name_or_path)
    if path.exists():
        kind = "folder" if path.is_dir() else "file, not a folder of weights"
        raise InputError(
            f"base_model: {name_or_path} is a local {kind}; name its architecture with base_model "
            f"({', '.join(n for n in variants.load_names() if not variants.get(n).embedded)})"
        )
    raise InputError(
        f"model: unknown model {name_or_path!r}; expected one of {', '.join(variants.load_names())} "
        "or a local folder with base_model"
    )


def check_model_folder(path: Path) -> None:
    """Refuse a folder whose safetensors files are missing or unreadable, before mflux builds anything."""
    if not path.is_dir():
        raise ModelFolderError(f"model: {path} is not a folder of mflux-format weights")
    files = sorted(path.rglob("*.safetensors"))
    if not files:
        raise ModelFolderError(f"model: {path} holds no .safetensors files")
    for file in files:
        exc = header_error(file)
        if exc is not None:
            raise ModelFolderError(
                f"model: {file} is not a readable safetensors file ({type(exc).__name__}: {exc}); re-save or "
                "re-download it"
            )


def check_released_folder(path: Path, spec: variants.VariantSpec) -> None:
    """A local folder of a released model holds every component mflux loads (its saved layout: one subfolder of
    safetensors per component), each readable; refused before mflux builds anything."""
    check_model_folder(path)
    weights = variants.attribute(variants.family(spec.family).weights)
    for component in weights.get_components():
        sub = path / component.hf_subdir
        if not any(sub.glob("*.safetensors")):
            raise ModelFolderError(
                f"model: {path} has no {component.hf_subdir}/*.safetensors ({spec.name}'s {component.name}); "
                "expected a folder mflux-save wrote"
            )


def check_cached(name: str, spec: variants.VariantSpec, base_model: str | None = None) -> None:
    """With the Hugging Face Hub offline (HF_HUB_OFFLINE), a released model's weights must be in the cache
    already: say where it looked, before anything loads. Online, mflux downloads what is missing."""
    from huggingface_hub import constants

    if not constants.HF_HUB_OFFLINE:
        return
    from mflux.models.common.config.model_config import ModelConfig

    repo = ModelConfig.from_name(model_name=name, base_model=base_model).model_name
    if "/" not in repo:
        return
    snapshots = Path(constants.HF_HUB_CACHE) / f"models--{repo.replace('/', '--')}" / "snapshots"
    if not (snapshots.is_dir() and any(snapshots.iterdir())):
        raise ModelFolderError(
            f"model: {name}: the weights of {repo} are not in the Hugging Face cache ({constants.HF_HUB_CACHE}) "
            "and HF_HUB_OFFLINE is set; download them online first, or point HF_HOME at a cache that has them"
        )


def load_model(
    name_or_path: str,
    *,
    base_model: str | None = None,
    quantize: int | None = None,
    seed: int = 0,
    lora_paths: Sequence[str | os.PathLike] | None = None,
    lora_scales: Sequence[float] | None = None,
):
    """Return an mflux pipeline.

    An embedded model (``tiny-open-flux2``, the trained default; random-weight ``tiny-flux1`` etc. from
    ``seed``), an mflux model name (``dev``, ``flux1-dev``, ``flux2-klein-4b``, ``qwen-image``, ...; weights
    from the Hugging Face cache), a local folder of mflux-format weights with ``base_model`` naming its
    architecture (a variant or mflux name), or ``random-<variant>``: the variant's full-size transformer with
    weights drawn from ``seed`` (nothing downloaded; for time and memory, its images mean nothing). The
    pipeline carries ``teacache_variant``.

    ``lora_paths`` (local ``.safetensors`` files) with ``lora_scales`` (default 1.0 each) are loaded by mflux's
    own LoRA code: passed to its pipeline's constructor, or for a model built here applied with the loader and
    mapping that constructor uses. A file that does not fit the model is refused (``LoraError``) before it loads.
    """
    if not isinstance(name_or_path, str | os.PathLike):
        raise InputTypeError(
            f"model: expected a name or a folder path (str or os.PathLike), got {type(name_or_path).__name__}"
        )
    name_or_path = os.fspath(name_or_path)
    check_mflux_version()
    spec = resolve_spec(name_or_path, base_model)
    loras = Loras.of(lora_paths, lora_scales)
    if name_or_path.startswith(RANDOM_PREFIX) and base_model is None:
        use_float32_on_cpu()
        builder = variants.random_builder(spec.family)
        return _with_loras(builder(spec.name, seed=seed, quantize=quantize), spec, loras)
    path = Path(name_or_path).expanduser()
    is_folder = base_model is not None
    if is_folder:
        check_model_folder(path)
    elif not spec.embedded:
        check_cached(name_or_path, spec)
    use_float32_on_cpu()
    if spec.embedded:
        build = _embedded_builder(spec, seed)
        if is_folder:
            return _with_loras(_load_transformer_folder(build, spec, path, quantize), spec, loras)
        return _with_loras(_quantized(build(), spec, quantize), spec, loras)
    # heavy (mflux): loaded only when this runs
    from mflux.models.common.config.model_config import ModelConfig

    if loras:  # mflux's constructor would find a misfit only part way through its load, or not at all (shapes)
        loras.check_fit(architecture(spec, seed), spec.family, spec.name)
    config = ModelConfig.from_name(
        model_name=str(path) if is_folder else spec.mflux_names[0],
        base_model=spec.mflux_names[0] if is_folder else None,
    )
    pipeline = variants.attribute(variants.family(spec.family).pipeline)
    model_path = str(path) if is_folder else None
    model = pipeline(model_config=config, quantize=quantize, model_path=model_path, **loras.kwargs())
    model.teacache_variant = spec.name
    return model


def check_loras(
    name_or_path: str,
    base_model: str | None = None,
    lora_paths: Sequence[str | os.PathLike] | None = None,
    lora_scales: Sequence[float] | None = None,
) -> Loras:
    """The LoRAs ``load_model`` would load, checked against the model's architecture (its transformer's layers,
    built without its weights where it is not embedded): a command refuses a misfit before it writes anything."""
    loras = Loras.of(lora_paths, lora_scales)
    if loras:
        spec = resolve_spec(name_or_path, base_model)
        use_float32_on_cpu()
        loras.check_fit(architecture(spec), spec.family, spec.name)
    return loras


def architecture(spec: variants.VariantSpec, seed: int = 0) -> nn.Module:
    """The transformer a LoRA is applied to: an embedded model's as built, else mflux's class at the variant's
    config with its initial weights left lazy (nothing evaluated, nothing downloaded)."""
    if spec.embedded:
        return _embedded_builder(spec, seed)().transformer
    return variants.zoo(FULL_TRANSFORMER)(spec.name)


def _embedded_builder(spec: variants.VariantSpec, seed: int):
    builder = variants.zoo(spec.builder)
    takes_seed = "seed" in inspect.signature(builder).parameters
    return (lambda: builder(seed=seed)) if takes_seed else builder


def _with_loras(model, spec: variants.VariantSpec, loras: Loras):
    """A pipeline built here with the LoRAs applied as mflux's constructors apply them (after quantization)."""
    if loras:
        loras.apply(model, spec.family, spec.name)
    return model


def _quantized(model, spec: variants.VariantSpec, quantize: int | None):
    """An embedded model quantized on request as mflux quantizes a checkpoint stored unquantized (its family's
    predicate and group size); a layer too narrow for the group size is said in one line about --quantize."""
    if quantize is None:
        return model
    try:
        quantize_like_mflux(model.transformer, quantize, variants.attribute(variants.family(spec.family).weights))
    except ValueError as exc:
        raise InputError(f"--quantize: {spec.name} cannot be quantized to {quantize} bits ({exc})") from None
    return model


def quantize_like_mflux(transformer: nn.Module, bits: int, weight_definition) -> None:
    """Quantize the way mflux does on load: its per-family predicate and group size (64 unless the family says)."""
    # heavy (mflux): loaded only when this runs
    from mflux.models.common.weights.loading.weight_applier import WeightApplier

    WeightApplier._quantize({"transformer": transformer}, bits, {}, weight_definition)
    mx.eval(transformer.parameters())


def _load_transformer_folder(build, spec: variants.VariantSpec, path: Path, quantize: int | None):
    """An embedded pipeline with its transformer read from an mflux-saved folder (``ModelSaver`` layout).

    mflux's ``model.update(strict=False)`` never checks shapes, so every tensor is compared with a freshly
    built architecture first: weights saved from another variant or size are refused with the first mismatch.
    """
    # heavy (mflux): loaded only when this runs
    from mflux.models.common.weights.loading.weight_applier import WeightApplier
    from mflux.models.common.weights.loading.weight_loader import WeightLoader

    model = build()
    fam = variants.family(spec.family)
    if not isinstance(model, variants.attribute(fam.pipeline)):
        raise ModelFolderError(f"base_model: {spec.name} is not an mflux pipeline; it cannot load a folder")
    component = next(c for c in variants.attribute(fam.weights).get_components() if c.name == "transformer")
    if not (path / component.hf_subdir).is_dir():
        raise ModelFolderError(f"model: {path} has no {component.hf_subdir}/ folder (mflux's saved layout)")
    weights = WeightLoader.load_single_local(component=component, root_path=path)
    stored = weights.components["transformer"]
    stored_bits = weights.meta_data.quantization_level
    reference = build().transformer
    if stored_bits:  # quantize the reference the way mflux will quantize the model before loading
        predicate = WeightApplier._stored_layer_predicate(stored, lambda _, m: hasattr(m, "to_quantized"))
        nn.quantize(reference, class_predicate=predicate, bits=stored_bits)
    expected = {k: tuple(v.shape) for k, v in tree_flatten(reference.parameters())}
    found = {k: tuple(v.shape) for k, v in tree_flatten(stored)}
    problems = [f"{k} is missing from the folder" for k in sorted(set(expected) - set(found))]
    problems += [f"{k} is not part of {spec.name}" for k in sorted(set(found) - set(expected))]
    problems += [
        f"{k} has shape {found[k]} in the folder, {expected[k]} in {spec.name}"
        for k in sorted(set(found) & set(expected))
        if found[k] != expected[k]
    ]
    if problems:
        raise ModelFolderError(
            f"model: {path} does not hold {spec.name} weights ({len(problems)} differ): {problems[0]}"
        )
    model.bits = WeightApplier.apply_and_quantize_single(weights, model.transformer, component, quantize)
    return model
