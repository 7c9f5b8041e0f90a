"""Loading a trained embedded model's weights: the file must be the one its manifest describes."""

from __future__ import annotations

import json
from pathlib import Path

import mlx.core as mx
from mlx import nn
from mlx.utils import tree_flatten

from teacache.errors import TeaCacheError
from teacache.io import file_sha256


class WeightsError(TeaCacheError, ValueError):
    """The weights file is not the one its manifest describes, or does not fit the architecture."""


def parameter_count(model: nn.Module) -> int:
    return sum(v.size for _, v in tree_flatten(model.parameters()))


def read_checked_manifest(
    weights_path: Path, manifest_path: Path, recipe_version: int, vocab: tuple[str, ...], retrain: str
) -> dict:
    """The manifest, once the file's SHA-256 and the data recipe it was trained on match this code."""
    if not weights_path.exists():
        raise FileNotFoundError(f"weights file {weights_path} does not exist (train it: {retrain})")
    manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    expected = manifest["weights"]["sha256"]
    actual = file_sha256(weights_path)
    if actual != expected:
        raise WeightsError(
            f"weights file {weights_path} does not match its manifest (sha256 {actual}, manifest {manifest_path} "
            f"says {expected}): the file is corrupted, truncated or from another training run"
        )
    trained_recipe = manifest.get("data_recipe", {})
    if trained_recipe.get("version") != recipe_version or trained_recipe.get("vocab") != list(vocab):
        trained = f"{trained_recipe.get('name', '?')} v{trained_recipe.get('version')}"
        raise WeightsError(
            f"weights file {weights_path} was trained on data recipe {trained} with another vocabulary or rendering "
            f"than this code's (recipe v{recipe_version}, {len(vocab)} words): retrain the model ({retrain})"
        )
    return manifest


def load_checked_weights(model: nn.Module, path: Path, model_name: str) -> None:
    """Load ``path`` into ``model`` strictly; any unreadable file or mismatched tensor is a WeightsError."""
    try:
        weights = mx.load(str(path))
    except Exception as exc:  # noqa: BLE001 - mlx raises RuntimeError/ValueError for unreadable files
        raise WeightsError(f"weights file {path} is not a readable safetensors file: {exc}") from exc
    expected = dict(tree_flatten(model.parameters()))
    for name in sorted(set(expected) | set(weights)):
        if name not in weights:
            problem = f"tensor {name!r} is missing (expected shape {tuple(expected[name].shape)})"
        elif name not in expected:
            problem = f"unexpected tensor {name!r} with shape {tuple(weights[name].shape)}"
        elif tuple(weights[name].shape) != tuple(expected[name].shape):
            got, want = tuple(weights[name].shape), tuple(expected[name].shape)
            problem = f"tensor {name!r} has shape {got}, expected {want}"
        else:
            continue
        raise WeightsError(f"weights file {path} does not fit the {model_name} architecture: first mismatch: {problem}")
    try:
        model.load_weights(list(weights.items()), strict=True)
    except ValueError as exc:
        raise WeightsError(f"weights file {path} does not fit the {model_name} architecture: {exc}") from exc
    mx.eval(model.parameters())
    model.eval()
