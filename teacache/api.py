"""``apply_teacache``: the one entry point that puts TeaCache on an mflux pipeline."""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence

from teacache._compat import check_mflux_version
from teacache.adapters import adapter_for
from teacache.coefficients import PACKAGED_MODULES, load_packaged, load_recipe
from teacache.core import RecipeMismatchWarning, StepController, TeaCacheHandle, is_applied
from teacache.gate import GateConfig, warn_if_never_skips
from teacache.rescale import RescaleFunction, as_rescale


def apply_teacache(
    model,
    rel_l1_thresh: float | None = None,
    coefficients: RescaleFunction | Sequence[float] | None = None,
    *,
    skip_first_n_steps: int | None = None,
    skip_last_n_steps: int = 1,
    max_consecutive_skips: int = 8,
    calibrate: bool = False,
) -> TeaCacheHandle:
    """Apply TeaCache to an mflux pipeline; use the handle as a context manager or call ``restore()``.

    ``rel_l1_thresh`` and ``skip_first_n_steps`` default to the variant's settings (``None``).
    ``rel_l1_thresh``: skip while the accumulated rescaled signal stays below it; ``None`` takes the
    variant's default, ``0`` disables skipping (a fast path that creates no cache tensors).
    ``coefficients``: a :class:`RescaleFunction`, a published tuple (highest power first) or ``None``
    for the variant's packaged calibration. ``calibrate=True`` never skips and records the traces
    ``teacache-calib record`` writes.
    """
    check_mflux_version()
    adapter = adapter_for(model)
    if is_applied(model) or adapter.is_applied(model):
        raise RuntimeError("model: TeaCache is already applied to this pipeline; restore() the first handle")
    variant = adapter.variant(model)
    if rel_l1_thresh is None:
        rel_l1_thresh = 0.0 if calibrate else variant_default(adapter, "DEFAULT_THRESHOLD", variant)
    elif isinstance(rel_l1_thresh, bool) or not isinstance(rel_l1_thresh, int | float) or math.isnan(rel_l1_thresh):
        raise ValueError(f"rel_l1_thresh: expected a number >= 0 or None, got {rel_l1_thresh!r}")
    default = load_packaged(variant) if variant in PACKAGED_MODULES else None
    if coefficients is None and default is None:
        raise ValueError(
            f"coefficients: variant {variant!r} has no packaged calibration; pass coefficients= "
            "(teacache-calib record / fit gives them)"
        )
    gate_config = GateConfig(
        rel_l1_thresh=float(rel_l1_thresh),
        rescale=as_rescale(coefficients, default),
        skip_first_n_steps=(
            variant_default(adapter, "SKIP_FIRST_N_STEPS", variant)
            if skip_first_n_steps is None
            else skip_first_n_steps
        ),
        skip_last_n_steps=skip_last_n_steps,
        max_consecutive_skips=max_consecutive_skips,
    )
    recipe = load_recipe(variant) if coefficients is None and default is not None else None
    if recipe is not None and getattr(model, "lora_paths", None):
        recipe = {**recipe, "lora": "none"}
        warnings.warn(
            f"the packaged {variant} coefficients were fitted without LoRA and this pipeline has "
            f"{len(model.lora_paths)}: LoRAs shift the signal; measure with teacache-bench sweep or refit",
            RecipeMismatchWarning,
            stacklevel=2,
        )
    controller = StepController(gate_config, calibrate=calibrate, recipe=recipe)
    static_floor = gate_config.enabled and not calibrate and not gate_config.rescale.is_time_aware
    if static_floor and not warn_if_never_skips(gate_config, where=f" with the {variant} rescale function"):
        controller.mark_warned("floor")  # said once here; not again at every generation
    restore = adapter.install(model, controller)
    return TeaCacheHandle(model, adapter, controller, variant, restore)


def variant_default(adapter, table: str, variant: str):
    """A per-variant setting of an adapter (``DEFAULT_THRESHOLD``, ``SKIP_FIRST_N_STEPS``), "*" as fallback."""
    values = getattr(adapter, table)
    return values.get(variant, values["*"])
