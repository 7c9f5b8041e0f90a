"""Which mflux functions the adapters depend on: read off the adapters' source, plus what they reach through
attributes. The one list of them; ``code`` fingerprints it.

Three sources, all per family:
- the adapters' imports of mflux classes (``from mflux... import Transformer``): the class's ``__init__`` and
  ``__call__`` (the proxies re-walk the forward pass, the builders construct it), and every method of the
  class the adapter names as an attribute (``Transformer.compute_text_embeddings``,
  ``tr._apply_joint_transformer_block``);
- the family's pipeline in the registry (``teacache.variants``): ``generate_image`` and ``_predict``;
- ``READ_THROUGH``: the module classes the signal and the body call through attributes (``block.norm1``,
  ``tr.norm_out``), whose class the adapters' source cannot name.
A function is written ``module:Class.method`` (or ``module:function``).
"""

from __future__ import annotations

import ast

from teacache import variants
from teacache.io import project_root

ADAPTERS = project_root() / "teacache" / "adapters"
SHARED = "_proxy"  # what every adapter shares: its mflux functions belong to every family
ALL_FAMILIES = "*"
SPECIAL = ("__init__", "__call__")

_FLUX = "mflux.models.flux.model.flux_transformer"
_FLUX2 = "mflux.models.flux2.model.flux2_transformer"
_QWEN = "mflux.models.qwen.model.qwen_transformer"
_ZIMAGE = "mflux.models.z_image.model.z_image_transformer"
READ_THROUGH = {
    "flux1": (
        f"{_FLUX}.ada_layer_norm_zero:AdaLayerNormZero.__call__",  # block 0's norm1: the signal
        f"{_FLUX}.ada_layer_norm_continuous:AdaLayerNormContinuous.__init__",  # norm_out: the tail
        f"{_FLUX}.ada_layer_norm_continuous:AdaLayerNormContinuous.__call__",
        f"{_FLUX}.joint_transformer_block:JointTransformerBlock.__call__",  # the body
        f"{_FLUX}.single_transformer_block:SingleTransformerBlock.__call__",
    ),
    "flux2": (
        f"{_FLUX2}.modulation:Flux2Modulation.__call__",  # the signal's shift and scale
        f"{_FLUX2}.timestep_guidance_embeddings:Flux2TimestepGuidanceEmbeddings.__call__",
        f"{_FLUX2}.transformer_block:Flux2TransformerBlock.__call__",  # the body
        f"{_FLUX2}.single_transformer_block:Flux2SingleTransformerBlock.__call__",
        f"{_FLUX}.ada_layer_norm_continuous:AdaLayerNormContinuous.__init__",  # norm_out (bias=False)
        f"{_FLUX}.ada_layer_norm_continuous:AdaLayerNormContinuous.__call__",
    ),
    "qwen": (
        f"{_QWEN}.qwen_transformer_block:QwenTransformerBlock.__call__",  # the body
        f"{_FLUX}.ada_layer_norm_continuous:AdaLayerNormContinuous.__init__",  # norm_out: the tail
        f"{_FLUX}.ada_layer_norm_continuous:AdaLayerNormContinuous.__call__",
    ),
    "zimage": (
        f"{_ZIMAGE}.transformer_block:ZImageTransformerBlock.__call__",  # the signal's block and the body
        f"{_ZIMAGE}.final_layer:FinalLayer.__call__",  # the tail
        f"{_ZIMAGE}.timestep_embedder:TimestepEmbedder.__call__",
    ),
}


def _imports(tree: ast.Module) -> dict[str, str]:
    """Names bound by ``from mflux... import X`` anywhere in a module -> their module."""
    found = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("mflux"):
            for alias in node.names:
                found[alias.asname or alias.name] = node.module
    return found


def _is_guard(node: ast.AST) -> bool:
    """``getattr(x, "name", ...)`` or ``hasattr(x, "name")``."""
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("getattr", "hasattr")):
        return False
    return len(node.args) >= 2 and isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str)


def _attribute_names(tree: ast.Module) -> set[str]:
    """``x.name``, and ``getattr(x, "name", ...)`` / ``hasattr(x, "name")`` (a guard on what a release has)."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            names.add(node.attr)
        elif _is_guard(node):
            names.add(node.args[1].value)
    return names


def class_methods(source: str, class_name: str) -> set[str]:
    """The methods a class defines in its own body (none when the class is absent)."""
    for node in ast.parse(source).body:
        if isinstance(node, ast.ClassDef) and node.name == class_name:
            return {item.name for item in node.body if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef)}
    return set()


def adapter_functions(adapter_source: str, read_source) -> set[str]:
    """The mflux functions one adapter's source hooks, re-walks or reads.

    ``read_source(module)`` returns an mflux module's source (or None where it does not exist), so the
    same derivation runs against the installed mflux or against a wheel.
    """
    tree = ast.parse(adapter_source)
    used = _attribute_names(tree)
    found = set()
    for name, module in _imports(tree).items():
        source = read_source(module)
        methods = class_methods(source, name) if source else set()
        if not methods:  # a function or a constant, or a class this release does not define
            continue
        found |= {f"{module}:{name}.{method}" for method in methods if method in SPECIAL or method in used}
    return found


def pipeline_functions(family_name: str) -> set[str]:
    module, cls = variants.family(family_name).pipeline.split(":")
    return {f"{module}:{cls}.generate_image", f"{module}:{cls}._predict"}


def hooked_functions(read_source) -> dict[str, set[str]]:
    """Every family's functions, plus the shared ones under ``ALL_FAMILIES``."""
    result = {ALL_FAMILIES: adapter_functions((ADAPTERS / f"{SHARED}.py").read_text(encoding="utf-8"), read_source)}
    for fam in variants.families():
        source = (ADAPTERS / f"{fam.adapter}.py").read_text(encoding="utf-8")
        result[fam.name] = (
            adapter_functions(source, read_source) | pipeline_functions(fam.name) | set(READ_THROUGH.get(fam.name, ()))
        )
    return result


def families_of(function: str, hooked: dict[str, set[str]]) -> list[str]:
    """The families a function matters to (every family for the shared ones)."""
    if function in hooked.get(ALL_FAMILIES, set()):
        return [fam.name for fam in variants.families()]
    return sorted(name for name, functions in hooked.items() if name != ALL_FAMILIES and function in functions)


def classes_by_family() -> dict[str, set[str]]:
    """``module:Class`` of every class each family's adapter imports, reads through or runs as its pipeline;
    read off this package alone (no mflux source), so the same for every installed release."""

    def imported(adapter: str) -> set[str]:
        tree = ast.parse((ADAPTERS / f"{adapter}.py").read_text(encoding="utf-8"))
        return {f"{module}:{name}" for name, module in _imports(tree).items()}

    result = {ALL_FAMILIES: imported(SHARED)}
    for fam in variants.families():
        through = {f.rsplit(".", 1)[0] for f in READ_THROUGH.get(fam.name, ())}
        result[fam.name] = imported(fam.adapter) | through | {fam.pipeline}
    return result


def families_of_class(function: str, classes: dict[str, set[str]]) -> list[str]:
    """The families a function matters to, by its class (every family for the shared ones)."""
    owner = function.rsplit(".", 1)[0]
    if owner in classes.get(ALL_FAMILIES, set()):
        return [fam.name for fam in variants.families()]
    return sorted(name for name, owners in classes.items() if name != ALL_FAMILIES and owner in owners)
