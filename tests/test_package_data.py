"""An installed (non-editable) copy ships every embedded weights file and manifest its loaders read: each one under
teacache/models/weights/ is matched by a package-data pattern of pyproject.toml."""

from __future__ import annotations

import tomllib
from pathlib import Path

from teacache.models import open_models, train_lora

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "teacache"
WEIGHTS = PACKAGE / "models" / "weights"
READ = (".safetensors", ".json")  # what the loaders open: weights (and LoRA) files and the manifests beside them


def _shipped() -> set[Path]:
    """The files of the teacache package that its package-data patterns match (setuptools globs them the same way)."""
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    patterns = pyproject["tool"]["setuptools"]["package-data"]["teacache"]
    return {path.resolve() for pattern in patterns for path in PACKAGE.glob(pattern) if path.is_file()}


def test_every_weights_file_and_manifest_is_package_data():
    read = {p.resolve() for p in WEIGHTS.rglob("*") if p.is_file() and p.suffix in READ}
    assert read, WEIGHTS
    missing = sorted(str(p.relative_to(ROOT)) for p in read - _shipped())
    assert not missing, f"not in pyproject.toml's package-data: {missing}"


def test_the_loaders_default_files_are_among_them():
    shipped = _shipped()
    for layout in open_models.FAMILIES.values():
        assert {layout.folder / layout.weights_name, layout.folder / layout.manifest_name} <= shipped, layout.name
    loras = {p.resolve() for folder in train_lora.LORAS_DIRS.values() for p in folder.glob("*/*.safetensors")}
    assert loras and loras <= shipped
