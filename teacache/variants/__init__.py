"""The variant registry: every fact about a model variant in one ``VariantSpec``, found by name.

A ``Family`` also records the mflux releases that changed its numbers (``NumericChange``), so a packaged
calibration can say whether the installed mflux still runs the numeric path it was fitted on.

Each family module in this package (``flux1``, ``flux2``, ``qwen``, ``zimage``) declares its ``FAMILY``
and ``SPECS``; the registry gathers them, the way mlx-lm finds an architecture by module. Nothing here
imports mflux, so commands can validate a model name in milliseconds, before anything loads.
Adding a variant of a known family is adding one ``VariantSpec`` to that family's module.

The embedded models live in the zoo (``teacache.models``); the core reaches them only through :func:`zoo`,
which imports what a spec names there (``builder``, ``prompt_check``, a family's ``random_builder``).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from functools import cache

from teacache._compat import parse_release
from teacache.errors import InputError
from teacache.gate import DEFAULT_SKIP_FIRST

FAMILY_MODULES = ("flux1", "flux2", "qwen", "zimage")
ZOO = "teacache.models"  # the embedded models' subpackage: specs name its functions by "module:function"
RANDOM_PREFIX = "random-"  # random-<variant>: the variant's full-size architecture with random weights


@dataclass(frozen=True)
class Generation:
    """The generation settings a variant is calibrated and benchmarked with unless told otherwise."""

    steps: int
    width: int
    height: int
    guidance: float

    def as_dict(self) -> dict:
        return {"steps": self.steps, "width": self.width, "height": self.height, "guidance": self.guidance}


@dataclass(frozen=True)
class CampaignSizes:
    """What ``teacache-bench campaign`` runs for an embedded model: the prompt sets, seeds, thresholds and repeats
    of its stages, sized to fit minutes on 2 CPU cores (a random-weight model: a few prompts, seconds per run)."""

    record_prompts: str
    record_seeds: str
    sweep_prompts: str
    sweep_seeds: str
    thresholds: str
    repeats: int


ALL_DTYPES = ("float32", "bfloat16", "float16")


@dataclass(frozen=True)
class NumericChange:
    """An mflux release after which a family's outputs differ for the same weights, inputs and dtype.

    Traces recorded on either side of it differ, so coefficients fitted before it describe another model.
    ``dtypes``: the compute dtypes whose numbers moved (a cast that is a no-op in float32 moves bfloat16 only).
    """

    release: str
    what: str
    dtypes: tuple[str, ...] = ALL_DTYPES


@dataclass(frozen=True)
class Family:
    """What a family shares: its adapter, mflux's text-to-image pipeline class, a readable label, and the mflux
    releases that changed its numbers (``numeric_changes``, oldest first)."""

    name: str
    label: str
    adapter: str  # module under teacache.adapters
    pipeline: str  # "module:Class" of mflux's txt2img pipeline
    weights: str  # "module:Class" of mflux's weight definition (how a saved folder is laid out)
    transformer: str  # "module:Class" of mflux's transformer
    lora_mapping: str  # "module:Class" of mflux's LoRA mapping (what its pipeline's constructor applies LoRAs by)
    random_builder: str | None = None  # zoo "module:function" building a full-size random-weight model
    # How the transformer's constructor takes a ModelConfig: "model_config" (as model_config=), "overrides"
    # (its transformer_overrides as keywords), or "" (the constructor's defaults are the released config).
    transformer_config: str = ""
    block_keywords: tuple[str, ...] = ()  # the constructor's block counts (a smoke test builds fewer blocks)
    numeric_changes: tuple[NumericChange, ...] = ()


@dataclass(frozen=True)
class VariantSpec:
    """One variant: how it is named, gated, calibrated, generated and (for embedded models) built.

    ``default_threshold_why`` and ``skip_first_why`` say where those numbers come from.
    """

    name: str
    family: str
    default_threshold: float
    default_threshold_why: str
    generation: Generation
    mflux_names: tuple[str, ...] = ()  # Hugging Face repo names mflux gives ``model_config.model_name``
    revision: str | None = None  # the pinned Hugging Face commit of mflux_names[0] (the drift tests check it)
    mflux_config: str | None = None  # mflux ``ModelConfig`` factory of its transformer: has a random-<name> model
    load_names: tuple[str, ...] = ()  # names ``load_model`` accepts besides ``name`` (mflux aliases)
    skip_first_n_steps: int = DEFAULT_SKIP_FIRST
    skip_first_why: str = ""
    coefficients: str | None = None  # module under teacache.coefficients; None: no packaged calibration
    prompt_set: str = "default"
    campaign_sizes: CampaignSizes | None = None  # what ``teacache-bench campaign`` runs (the embedded models)
    builder: str | None = None  # "module:function(seed)" in the zoo, for an embedded model (read by zoo())
    refuse_why: str = ""  # set on a name mflux knows but TeaCache refuses (e.g. a distilled model)
    trained: bool = False  # an embedded model with trained weights (it draws its prompts), not weights from a seed
    is_default_model: bool = False  # what the commands use when no --model is given
    drift_subject: bool = False  # the family's model whose calibrated gate bare `drift` judges a release by
    only_its_size: bool = False  # generates at its own width x height only (checked before it loads)
    image_side: int | None = None  # the decoded image's side where it is not width x height (no VAE: tiny-open-flux1)
    prompt_check: str | None = None  # zoo "module:function(text)": ValueError for a prompt it cannot draw

    @property
    def embedded(self) -> bool:
        return self.builder is not None

    @property
    def supported(self) -> bool:
        return not self.refuse_why

    def rescale(self):
        """The packaged rescale function (``teacache.coefficients``)."""
        return _by_name("teacache.coefficients").load_packaged(self.name)

    def recipe(self) -> dict:
        """The generation settings the packaged coefficients were fitted on ({} when unknown)."""
        return _by_name("teacache.coefficients").load_recipe(self.name)


def random_weights(
    name: str, family: str, builder: str, steps: int, guidance: float, thresholds: str, threshold: float = 0.3,
    why: str = "random weights: a plumbing value",
) -> VariantSpec:  # fmt: skip
    """An embedded random-weight model's spec: 128x128, the fast prompts, a campaign of seconds per run, and its
    packaged coefficients in the module named like it (``tiny-z-image``: ``teacache.coefficients.tiny_z_image``)."""
    return VariantSpec(
        name=name, family=family, default_threshold=threshold, default_threshold_why=why,
        generation=Generation(steps=steps, width=128, height=128, guidance=guidance),
        coefficients=name.replace("-", "_"), prompt_set="fast",
        campaign_sizes=CampaignSizes("fast", "0,1", "fast", "0,1,2", thresholds, 2), builder=builder,
    )  # fmt: skip


def _by_name(module: str):
    """A package that reads this registry, looked up when called: the registry imports none of them."""
    return importlib.import_module(module)


def attribute(target: str):
    """The object a ``"module:name"`` field of the registry names, imported when asked for."""
    module, name = target.split(":")
    return getattr(_by_name(module), name)


def zoo(target: str):
    """The zoo function a spec names, imported when asked for: the one door from the core into the zoo, so
    the gate, adapters and API import and run without ``teacache.models`` (and its mflux models) loaded."""
    if not target.startswith(ZOO + "."):
        raise ValueError(f"zoo: {target!r} names no module:function under {ZOO}")
    return attribute(target)


def random_builder(family_name: str):
    """The zoo function building ``family_name``'s full-size random-weight pipeline (its ``random_builder``)."""
    return zoo(family(family_name).random_builder)


@cache
def _families() -> tuple[tuple[Family, tuple[VariantSpec, ...]], ...]:
    found = []
    for name in FAMILY_MODULES:
        module = importlib.import_module(f"teacache.variants.{name}")
        found.append((module.FAMILY, tuple(module.SPECS)))
    return tuple(found)


def families() -> tuple[Family, ...]:
    return tuple(family for family, _ in _families())


def family(name: str) -> Family:
    for fam in families():
        if fam.name == name:
            return fam
    raise InputError(f"family: unknown family {name!r}; known: {', '.join(f.name for f in families())}")


def all_specs(include_refused: bool = False) -> tuple[VariantSpec, ...]:
    specs = tuple(spec for _, specs in _families() for spec in specs)
    return specs if include_refused else tuple(s for s in specs if s.supported)


def names() -> tuple[str, ...]:
    return tuple(spec.name for spec in all_specs())


def embedded_names() -> tuple[str, ...]:
    return tuple(spec.name for spec in all_specs() if spec.embedded)


def packaged_variants() -> tuple[str, ...]:
    return tuple(sorted(spec.name for spec in all_specs() if spec.coefficients))


def get(name: str) -> VariantSpec:
    """The spec of a variant name (``flux1-dev``) or of a name ``load_model`` accepts (``dev``)."""
    found = find(name)
    if found is None:
        raise InputError(f"variant: unknown variant {name!r}; supported: {', '.join(names())}")
    if not found.supported:
        raise InputError(_refusal(found))
    return found


def find(name: str) -> VariantSpec | None:
    """Like :func:`get`, but ``None`` for an unknown name; refused specs are returned (check ``supported``)."""
    for spec in all_specs(include_refused=True):
        if name == spec.name or name in spec.load_names or name in spec.mflux_names:
            return spec
    return None


def built_by(builder: str) -> VariantSpec:
    """The spec of the embedded model that zoo function ``builder`` ("module:function") builds: how the zoo
    asks its models' specs for their names."""
    return next(spec for spec in all_specs(include_refused=True) if spec.builder == builder)


def for_mflux_name(model_name: str | None) -> VariantSpec | None:
    for spec in all_specs(include_refused=True):
        if model_name in spec.mflux_names:
            return spec
    return None


def variant_of(model, family_name: str | None = None) -> str:
    """The variant of an mflux pipeline: ``teacache_variant`` when it carries one, else its mflux model name.

    ``family_name`` (an adapter's ``FAMILY``) scopes the error message when the name is unknown.
    """
    explicit = getattr(model, "teacache_variant", None)
    if explicit:
        return get(explicit).name
    model_name = getattr(getattr(model, "model_config", None), "model_name", None)
    spec = for_mflux_name(model_name)
    if spec is not None and not spec.supported:
        raise InputError(_refusal(spec))
    if spec is None:
        if family_name is None:
            family_name = _by_name("teacache.adapters").adapter_for(model).FAMILY
        fam = family(family_name)
        raise InputError(
            f"model: a {fam.label} pipeline for {model_name!r}, which has no TeaCache integration; supported "
            f"{fam.label} variants: {', '.join(family_variants(fam.name))} (a local folder of weights: "
            "load_model(path, base_model=<variant>))"
        )
    return spec.name


def family_variants(family_name: str) -> tuple[str, ...]:
    return tuple(s.name for s in all_specs() if s.family == family_name)


def random_specs() -> tuple[VariantSpec, ...]:
    """The variants with a full-size random-weight model (``random-<name>``), in registry order."""
    return tuple(spec for spec in all_specs() if spec.mflux_config is not None)


def random_names() -> tuple[str, ...]:
    """``random-<variant>`` for every variant with a full-size random-weight model."""
    return tuple(RANDOM_PREFIX + spec.name for spec in random_specs())


def parse_random_name(name: str) -> str:
    """``random-flux1-dev`` (or ``flux1-dev``) -> ``flux1-dev``; a ValueError naming the choices otherwise."""
    variant = name.removeprefix(RANDOM_PREFIX)
    if variant not in {spec.name for spec in random_specs()}:
        raise InputError(f"model: unknown full-size random model {name!r}; expected one of {', '.join(random_names())}")
    return variant


def pinned_revisions() -> dict[str, str]:
    """Hugging Face repo -> the pinned commit, for every variant that pins one."""
    return {spec.mflux_names[0]: spec.revision for spec in all_specs() if spec.revision}


def refusal_reason(spec: VariantSpec) -> str:
    """Why a refused spec is refused, with its family's supported variants (the line after ``model:``)."""
    fam = family(spec.family)
    return f"{spec.refuse_why}; supported {fam.label} variants: {', '.join(family_variants(fam.name))}"


def _refusal(spec: VariantSpec) -> str:
    return f"model: {refusal_reason(spec)}"


def dtype_name(dtype) -> str:
    """'bfloat16' from ``mx.bfloat16``, 'mlx.core.bfloat16' (as provenance files store it) or 'bfloat16'."""
    return str(dtype).rsplit(".", 1)[-1]


def numeric_changes_since(
    family_or_variant: str, fitted_on_release: str, installed_release: str, dtype=None
) -> tuple[NumericChange, ...]:
    """The family's numeric changes between two mflux releases: after ``fitted_on_release`` up to and including
    ``installed_release`` (or the other way round when the installed release is the older one).

    ``dtype`` (``mx.bfloat16``, "bfloat16"; None: any) keeps the changes that move that compute dtype's numbers.
    A family or a variant name; empty when nothing between the two releases changed this family's numbers.
    """
    spec = find(family_or_variant)
    fam = family(spec.family if spec is not None else family_or_variant)
    low, high = sorted((parse_release(fitted_on_release), parse_release(installed_release)))
    wanted = None if dtype is None else dtype_name(dtype)
    return tuple(
        change
        for change in fam.numeric_changes
        if low < parse_release(change.release) <= high and (wanted is None or wanted in change.dtypes)
    )


def default_model() -> str:
    """The model every command uses when none is named (the embedded trained one)."""
    return next(spec.name for spec in all_specs() if spec.is_default_model)


def load_names() -> tuple[str, ...]:
    """Every name ``load_model`` and the commands' ``--model`` accept, embedded models first."""
    embedded = [s.name for s in all_specs() if s.embedded]
    real = [n for s in all_specs() if not s.embedded for n in (s.load_names or (s.name,))]
    return tuple(embedded + real)
