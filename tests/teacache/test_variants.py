"""The variant registry: one spec per variant, names resolve one way, local folders resolve by base_model."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

import teacache
from teacache import loading, variants
from teacache.coefficients import load_packaged
from tests import ROOT

CODE_DIRS = ("teacache", "calib", "bench")


def _string_literals(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return {node.value for node in ast.walk(tree) if isinstance(node, ast.Constant) and isinstance(node.value, str)}


def test_every_name_resolves_to_exactly_one_spec():
    seen: dict[str, str] = {}
    for spec in variants.all_specs(include_refused=True):
        for name in (spec.name, *spec.load_names, *spec.mflux_names):
            assert name not in seen, f"{name!r} names both {seen.get(name)} and {spec.name}"
            seen[name] = spec.name
    for name, owner in seen.items():
        assert variants.find(name).name == owner


def test_specs_point_at_things_that_exist():
    for fam in variants.families():
        module, attr = fam.pipeline.split(":")
        assert hasattr(importlib.import_module(module), attr), fam.pipeline
        assert fam.random_builder is None or callable(variants.zoo(fam.random_builder))
        assert fam.name == importlib.import_module(f"teacache.adapters.{fam.adapter}").FAMILY
    for spec in variants.all_specs():
        variants.family(spec.family)
        assert spec.default_threshold >= 0 and spec.default_threshold_why
        if spec.coefficients:
            assert load_packaged(spec.name).coefficients
        if spec.embedded:  # what a spec names in the zoo, it reaches through the one seam
            assert callable(variants.zoo(spec.builder))
            assert spec.prompt_check is None or callable(variants.zoo(spec.prompt_check))
        else:
            assert spec.mflux_names, f"{spec.name}: a real variant needs the mflux name it matches"


def test_a_variant_name_is_spelled_in_at_most_two_code_files():
    """Its spec and, for an embedded model, its builder. Generated coefficient modules carry the name in their
    provenance (data, not code), and prompt sets have names of their own (``--prompts tiny-shapes``)."""
    from calib.run.prompts import SETS

    files = [p for d in CODE_DIRS for p in (ROOT / d).rglob("*.py") if "coefficients" not in p.parts]
    literals = {p: _string_literals(p) for p in files}
    literals[ROOT / "calib" / "run" / "prompts.py"] -= set(SETS)
    for spec in variants.all_specs(include_refused=True):
        where = [p.relative_to(ROOT).as_posix() for p, lits in literals.items() if spec.name in lits]
        assert len(where) <= 2, f"{spec.name!r} is spelled in {where}"


def test_adapters_keep_no_copies_of_registry_data():
    for fam in variants.families():
        adapter = importlib.import_module(f"teacache.adapters.{fam.adapter}")
        copies = [name for name in ("VARIANTS", "DEFAULT_THRESHOLD", "SKIP_FIRST_N_STEPS") if hasattr(adapter, name)]
        assert not copies, f"{fam.adapter} keeps {copies}: read teacache.variants instead"


def test_every_model_fact_of_the_full_size_models_comes_from_the_registry():
    from teacache.revisions import PINNED_REVISIONS

    assert variants.random_names() == tuple(f"random-{s.name}" for s in variants.all_specs() if s.mflux_config)
    assert "random-z-image-turbo" not in variants.random_names()  # the distilled model has no random stand-in
    assert {s.mflux_names[0]: s.revision for s in variants.all_specs() if s.revision} == PINNED_REVISIONS
    assert set(PINNED_REVISIONS) >= {"black-forest-labs/FLUX.1-dev", "black-forest-labs/FLUX.2-klein-4B"}
    for fam in variants.families():
        assert fam.transformer_config in ("model_config", "overrides", "")
        assert fam.block_keywords, fam.name


def test_unknown_and_refused_names_get_one_line_each():
    with pytest.raises(ValueError, match=r"^variant: unknown variant 'flux9'; supported: flux1-dev, "):
        variants.get("flux9")
    with pytest.raises(ValueError, match="^model: Z-Image-Turbo is distilled"):
        variants.get("Tongyi-MAI/Z-Image-Turbo")
    with pytest.raises(ValueError, match=r"^model: unknown model 'tiny-foo'; expected one of tiny-flux1, "):
        loading.resolve_spec("tiny-foo")


def test_variant_of_reads_the_pipeline_name_or_its_explicit_variant():
    def pipeline(name, explicit=None):
        return SimpleNamespace(model_config=SimpleNamespace(model_name=name), teacache_variant=explicit)

    assert variants.variant_of(pipeline("black-forest-labs/FLUX.1-Krea-dev")) == "flux1-krea-dev"
    assert variants.variant_of(pipeline("/models/my-dev", explicit="flux1-dev")) == "flux1-dev"
    with pytest.raises(ValueError, match="no TeaCache integration; supported FLUX.1 variants: flux1-dev"):
        variants.variant_of(pipeline("/models/my-dev"), "flux1")


def test_model_defaults_come_from_the_spec():
    assert loading.model_defaults("krea-dev") == {"steps": 28, "width": 1024, "height": 1024, "guidance": 4.5}
    assert loading.model_defaults("tiny-shapes")["width"] == 32


# ---- local folders -----------------------------------------------------------------------------------------


def _folder_with(tmp_path: Path, payload: bytes | None) -> Path:
    folder = tmp_path / "weights"
    (folder / "transformer").mkdir(parents=True)
    if payload is None:
        from safetensors.numpy import save_file

        save_file({"w": np.zeros((2, 2), np.float32)}, str(folder / "transformer" / "0.safetensors"))
    else:
        (folder / "transformer" / "0.safetensors").write_bytes(payload)
    return folder


def test_a_local_folder_loads_through_its_base_models_pipeline(tmp_path, monkeypatch):
    folder = _folder_with(tmp_path, None)
    built = {}

    class FakePipeline(dict):  # stands in for mflux's Flux2Klein: records what the loader passes
        def __init__(self, model_config, quantize, model_path):
            super().__init__()
            built.update(model_name=model_config.model_name, quantize=quantize, model_path=model_path)

    monkeypatch.setattr(variants, "attribute", lambda target: FakePipeline)
    model = teacache.load_model(str(folder), base_model="flux2-klein-base-4b", quantize=8)
    assert built == {"model_name": str(folder), "quantize": 8, "model_path": str(folder)}
    assert model.teacache_variant == "flux2-klein-base-4b"
    assert variants.variant_of(model) == "flux2-klein-base-4b"


def test_a_mflux_alias_works_as_base_model(tmp_path):
    assert loading.resolve_spec("/somewhere", base_model="dev").name == "flux1-dev"
    with pytest.raises(ValueError, match="^base_model: unknown architecture 'flux9'"):
        loading.resolve_spec("/somewhere", base_model="flux9")
    folder = _folder_with(tmp_path, None)
    with pytest.raises(loading.ModelFolderError, match="tiny-shapes is not an mflux pipeline"):
        teacache.load_model(str(folder), base_model="tiny-shapes")


def test_a_file_is_not_a_model_folder(tmp_path):
    file = tmp_path / "model.safetensors"
    file.write_bytes(b"x")
    with pytest.raises(ValueError, match="is a local file, not a folder of weights"):
        loading.resolve_spec(str(file))
    with pytest.raises(loading.ModelFolderError, match="is not a folder of mflux-format weights"):
        teacache.load_model(str(file), base_model="dev")


@pytest.mark.parametrize(
    ("payload", "message"),
    [(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json}xxxxxx", "is not a readable safetensors file"), (b"", "readable")],
)
def test_a_corrupt_safetensors_file_is_refused_before_mflux_builds_anything(tmp_path, monkeypatch, payload, message):
    folder = _folder_with(tmp_path, payload)
    monkeypatch.setattr(variants, "attribute", lambda target: pytest.fail("the pipeline must not be built"))
    with pytest.raises(loading.ModelFolderError, match=message):
        teacache.load_model(str(folder), base_model="dev")


def test_an_empty_folder_is_refused(tmp_path):
    with pytest.raises(loading.ModelFolderError, match="holds no .safetensors files"):
        teacache.load_model(str(tmp_path), base_model="z-image")


def _saved_tiny_flux2(folder: Path, bits: int | None, seed: int = 3):
    """A tiny FLUX.2 pipeline saved with mflux's own ModelSaver (optionally quantized first, as mflux does)."""
    from mflux.models.common.weights.saving.model_saver import ModelSaver
    from mflux.models.flux2.weights.flux2_weight_definition import Flux2KleinWeightDefinition
    from mlx import nn

    from teacache.models.tiny_flux2 import build_tiny_flux2

    source = build_tiny_flux2(seed=seed)
    if bits:
        nn.quantize(source.transformer, bits=bits, class_predicate=lambda _, m: hasattr(m, "to_quantized"))
    source.bits = bits
    ModelSaver.save_model(source, bits, str(folder), Flux2KleinWeightDefinition)
    return source


def _same_parameters(a, b) -> bool:
    import mlx.core as mx
    from mlx.utils import tree_flatten

    pa, pb = dict(tree_flatten(a.parameters())), dict(tree_flatten(b.parameters()))
    return set(pa) == set(pb) and all(mx.array_equal(pa[k], pb[k]).item() for k in pa)


@pytest.mark.parametrize("bits", [None, 8])
def test_an_mflux_saved_folder_round_trips_exactly(tmp_path, bits):
    source = _saved_tiny_flux2(tmp_path / "saved", bits)
    loaded = teacache.load_model(str(tmp_path / "saved"), base_model="tiny-flux2", seed=9)  # seed 9: other weights
    assert loaded.bits == bits
    assert _same_parameters(source.transformer, loaded.transformer)
    assert variants.variant_of(loaded) == "tiny-flux2"


def test_a_folder_of_another_variant_is_refused_naming_a_tensor(tmp_path):
    _saved_tiny_flux2(tmp_path / "saved", None)
    with pytest.raises(loading.ModelFolderError, match=r"does not hold tiny-flux1 weights \(\d+ differ\): "):
        teacache.load_model(str(tmp_path / "saved"), base_model="tiny-flux1")
