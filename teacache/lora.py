"""LoRA files for ``load_model``: checked before anything loads, applied by mflux's own LoRA loader, and named by
their SHA-256 and scale wherever results are kept.

A LoRA changes the model, so a calibration of the model without it may not hold: the files' identity goes into a
folder's fingerprint and provenance like the weights'. A file that cannot serve the model (missing, not
safetensors, another family's, other shapes) is refused in one line before any generation: mflux's own loader
finds some of these only part way through a load, and one (shapes) only at the first matrix product.
The keys are read through mflux's LoRA mapping of the family (the one its pipeline's constructor applies), so
a file fits here exactly when mflux would apply it. Nothing here imports mflux at module level.
"""

from __future__ import annotations

import contextlib
import math
import numbers
import os
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from safetensors import safe_open

from teacache import variants
from teacache.errors import InputError, one_line
from teacache.io import file_sha256

PATHS_ARG, SCALES_ARG = "lora_paths", "lora_scales"  # the commands say --lora-paths / --lora-scales
SUFFIX = ".safetensors"  # mflux reads a LoRA with mx.load, which picks the format by this suffix
SHA_SHOWN = 12  # hex digits of a file's SHA-256 a message shows


class LoraError(InputError):
    """A LoRA file or scale that cannot serve the model: the message names the argument and what was expected."""


@dataclass(frozen=True)
class Loras:
    """LoRA files with their scales, checked readable (:meth:`of`), and their SHA-256: what a result names."""

    paths: tuple[Path, ...] = ()
    scales: tuple[float, ...] = ()
    sha256: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.paths)

    @classmethod
    def of(
        cls,
        paths: Sequence[str | os.PathLike] | None = None,
        scales: Sequence[float] | None = None,
        paths_arg: str = PATHS_ARG,
        scales_arg: str = SCALES_ARG,
    ) -> Loras:
        """Files that exist and read as safetensors, one finite scale each (1.0 where none is given)."""
        paths = _as_list(paths, paths_arg)
        scales = _as_list(scales, scales_arg)
        if not paths:
            if scales:
                raise LoraError(f"{scales_arg}: given without LoRA files; name the files they scale")
            return cls()
        if scales and len(scales) != len(paths):
            raise LoraError(
                f"{scales_arg}: {len(scales)} scale(s) for {len(paths)} LoRA file(s); expected one per file (or "
                "none: 1.0 each)"
            )
        checked = tuple(check_file(p, paths_arg) for p in paths)
        values = tuple(_scale(s, scales_arg) for s in scales) if scales else (1.0,) * len(paths)
        return cls(checked, values, tuple(file_sha256(p) for p in checked))

    def identity(self) -> list[dict]:
        """What a fingerprint compares: each file's SHA-256 and scale, in order (not where the file lies)."""
        return [{"sha256": h, "scale": s} for h, s in zip(self.sha256, self.scales, strict=True)]

    def provenance(self) -> list[dict]:
        """What provenance records: each file's path, SHA-256 and scale."""
        return [{"path": str(p), **i} for p, i in zip(self.paths, self.identity(), strict=True)]

    def recorded(self) -> dict:
        """Provenance's ``loras`` field: there only with LoRAs, so a provenance made without any is as before."""
        return {"loras": self.provenance()} if self else {}

    def describe(self) -> str:
        """One line: ``style.safetensors (sha256 0123456789ab, scale 1)`` for each file."""
        return describe(self.provenance())

    def kwargs(self) -> dict:
        """The keywords of ``load_model`` (and of mflux's constructors) that load these files."""
        return {"lora_paths": [str(p) for p in self.paths], "lora_scales": list(self.scales)} if self else {}

    def check_fit(self, transformer, family: str, model: str, arg: str = PATHS_ARG) -> None:
        """Each file applies to ``transformer`` (``model`` of ``family``) as mflux would apply it; LoraError else."""
        for path in self.paths:
            problem = misfit(path, transformer, family, model, arg)
            if problem is not None:
                raise LoraError(f"{arg}: {path} does not fit {model}: {problem}")

    def apply(self, model, family: str, model_name: str, arg: str = PATHS_ARG) -> None:
        """Apply the files to a pipeline this project built (an embedded or random-weight model) with mflux's own
        loader and its family's mapping, baked into the weights as mflux's constructors do by default."""
        from mflux.models.common.lora.mapping.lora_loader import LoRALoader  # heavy (mflux): when applied

        self.check_fit(model.transformer, family, model_name, arg)
        try:  # mflux's loader prints its progress: to stderr, beside ours, so stdout keeps a command's results
            with contextlib.redirect_stdout(sys.stderr):
                model.lora_paths, model.lora_scales = LoRALoader.load_and_apply_lora(
                    lora_mapping=mapping_of(family).get_mapping(),
                    transformer=model.transformer,
                    lora_paths=self.kwargs()["lora_paths"],
                    lora_scales=list(self.scales),
                )
        except (ValueError, FileNotFoundError, RuntimeError) as exc:  # what mflux's loader raises for a bad file
            raise LoraError(f"{arg}: mflux could not apply it to {model_name} ({one_line(exc)})") from None


def describe(loras: Sequence[dict]) -> str:
    """LoRAs as provenance records them (:meth:`Loras.provenance`), in one line."""
    said = []
    for lora in loras:
        name = Path(str(lora.get("path") or "?")).name
        scale = lora.get("scale")
        scale = f"{scale:g}" if isinstance(scale, numbers.Real) else str(scale)
        said.append(f"{name} (sha256 {str(lora.get('sha256'))[:SHA_SHOWN]}, scale {scale})")
    return ", ".join(said)


def _as_list(values, arg: str) -> list:
    if values is None:
        return []
    if isinstance(values, str | bytes | os.PathLike) or not isinstance(values, Sequence):
        raise LoraError(f"{arg}: expected a list, got {type(values).__name__}")
    return list(values)


def check_file(path: str | os.PathLike, arg: str = PATHS_ARG) -> Path:
    """A readable ``.safetensors`` file (its header parses), else one line naming ``arg``."""
    if not isinstance(path, str | os.PathLike) or not str(path).strip():
        raise LoraError(f"{arg}: expected paths of LoRA {SUFFIX} files, got {path!r}")
    file = Path(path).expanduser()
    if not file.exists():
        raise LoraError(f"{arg}: {file} does not exist; expected a LoRA {SUFFIX} file")
    if not file.is_file():
        raise LoraError(f"{arg}: {file} is not a file; expected a LoRA {SUFFIX} file")
    if file.suffix != SUFFIX:
        raise LoraError(f"{arg}: {file} is not a {SUFFIX} file; expected a LoRA in mflux's format (safetensors)")
    exc = header_error(file)
    if exc is not None:
        raise LoraError(
            f"{arg}: {file} is not a readable safetensors file ({type(exc).__name__}: {one_line(exc)}); expected "
            "a LoRA in mflux's format"
        )
    return file


def header_error(file: Path) -> Exception | None:
    """What reading ``file``'s safetensors header raised, None when it parses: LoRA and model files are refused
    before mflux reads them."""
    try:
        with safe_open(str(file), framework="numpy") as handle:
            handle.keys()
    except Exception as exc:  # noqa: BLE001 - safetensors raises several types for a bad header
        return exc
    return None


def _scale(value, arg: str) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value):
        raise LoraError(f"{arg}: expected finite numbers, got {value!r}")
    return float(value)


# ------------------------------------------------------------------------------------------ the fit


def mapping_of(family: str):
    """mflux's LoRA mapping of a family (the registry's ``Family.lora_mapping``)."""
    return variants.attribute(variants.family(family).lora_mapping)  # heavy (mflux): imported when asked for


def _normal(text: str) -> str:
    """A key or pattern with every number (and ``{block}``) as ``#``: a key can match only patterns of its form."""
    return re.sub(r"\d+", "#", text.replace("{block}", "0"))


@cache
def _index(family: str) -> dict[str, list]:
    """mflux's pattern matches of a family's mapping, by normal form (mflux also takes a bare ``.weight`` one)."""
    from mflux.models.common.lora.mapping.lora_loader import LoRALoader  # heavy (mflux): when a LoRA is checked

    index: dict[str, list] = {}
    for match in LoRALoader._build_pattern_mappings(mapping_of(family).get_mapping()):
        forms = {_normal(match.source_pattern), _normal(match.source_pattern.removesuffix(".weight"))}
        for form in forms:
            index.setdefault(form, []).append(match)
    return index


def matched(keys, family: str) -> dict[str, list[tuple]]:
    """Key -> [(target layer, matrix name, pattern match)] as mflux's loader pairs them (keys that match none left
    out)."""
    from mflux.models.common.lora.mapping.lora_loader import LoRALoader  # heavy (mflux): when a LoRA is checked

    found: dict[str, list[tuple]] = {}
    index = _index(family)
    for key in keys:
        for match in index.get(_normal(key), ()):
            block = LoRALoader._match_pattern(key, match.source_pattern)
            if block is None:
                continue
            target = match.target_path.format(block=block) if "{block}" in match.target_path else match.target_path
            found.setdefault(key, []).append((target, match.matrix_name, match))
    return found


def misfit(path: Path, transformer, family: str, model: str, arg: str = PATHS_ARG) -> str | None:
    """Why the LoRA at ``path`` cannot serve ``transformer``, in a clause; None when it fits."""
    import mlx.core as mx

    try:
        weights = mx.load(str(path))
    except (ValueError, RuntimeError, OSError) as exc:
        raise LoraError(f"{arg}: {path} cannot be read as safetensors ({one_line(exc)})") from None
    pairs = matched(weights, family)
    label = variants.family(family).label
    others = _other_family(set(weights) - set(pairs), family)
    if others:
        name, keys = others
        return (
            f"{len(keys)} of its keys name layers of mflux's {name} LoRA mapping, not {label}'s (e.g. {keys[0]}); "
            f"expected a LoRA for {label}"
        )
    if not pairs:
        endings = sorted({".".join(k.split(".")[-2:]) for k in weights})[:4]
        return (
            f"none of its {len(weights)} keys names a layer of mflux's {label} LoRA mapping (key endings: "
            f"{', '.join(endings) or 'none'}); expected a LoRA for {label}"
        )
    return _shape_misfit(weights, pairs, transformer, model)


def _other_family(keys: set[str], family: str) -> tuple[str, list[str]] | None:
    """The other family whose mapping names most of ``keys`` (the keys this family's mapping does not)."""
    best = None
    for other in variants.families():
        if other.name == family or not keys:
            continue
        hits = sorted(matched(keys, other.name))
        if hits and (best is None or len(hits) > len(best[1])):
            best = (other.label, hits)
    return best


def _shape_misfit(weights: dict, pairs: dict[str, list[tuple]], transformer, model: str) -> str | None:
    """The first layer the LoRA's matrices do not fit (after mflux's transform and transpose), or None."""
    from mflux.models.common.lora.mapping.lora_loader import LoRALoader  # heavy (mflux): when a LoRA is checked

    layers: dict[str, dict] = {}
    for key, targets in pairs.items():
        for target, name, match in targets:
            value = match.transform(weights[key]) if match.transform is not None else weights[key]
            layers.setdefault(target, {})[name] = (value.T if match.transpose else value, key)
    for target, data in sorted(layers.items()):
        try:
            module = LoRALoader._get_target_module(transformer, target)
        except (AttributeError, IndexError, KeyError):
            return f"it names layer {target}, which {model} does not have"
        if not ({"lora_A", "lora_B"} & set(data)):
            continue  # LoKr and direct patches: mflux checks their shapes as it applies them
        if not {"lora_A", "lora_B"} <= set(data):
            have = next(iter({"lora_A", "lora_B"} & set(data)))
            return f"layer {target} has only {data[have][1]} (a LoRA layer needs both its down and up matrices)"
        weight = getattr(module, "weight", None)
        if weight is None or weight.ndim != 2:
            return f"it names layer {target}, which is not a linear layer in {model}"
        out_dims, in_dims = weight.shape
        if hasattr(module, "bits"):  # a quantized layer packs 32 // bits inputs per stored value
            in_dims *= 32 // module.bits
        down, up = data["lora_A"][0], data["lora_B"][0]  # (in, rank) and (rank, out) once transposed
        square = down.ndim == up.ndim == 2 and down.shape[1] == up.shape[0]
        if not (square and down.shape[0] == in_dims and up.shape[1] == out_dims):
            return (
                f"layer {target} maps {in_dims} -> {out_dims} features in {model}; the LoRA's down and up matrices "
                f"give {tuple(down.shape)} and {tuple(up.shape)} (expected ({in_dims}, r) and (r, {out_dims}))"
            )
    return None
