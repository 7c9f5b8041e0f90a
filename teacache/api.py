"""``apply_teacache``: the one entry point that puts TeaCache on an mflux pipeline."""

from __future__ import annotations

from collections.abc import Sequence

from teacache import variants
from teacache._compat import check_mflux_version
from teacache._warnings import warn
from teacache.adapters import adapter_for
from teacache.core import RecipeMismatchWarning, StepController, is_applied
from teacache.errors import InputError, StateError
from teacache.gate import GateConfig, check_flag, warn_if_never_skips
from teacache.handle import TeaCacheHandle
from teacache.rescale import RescaleFunction, as_rescale
from teacache.safety import check_given


def apply_teacache(
    model,
    rel_l1_thresh: float | None = None,
    coefficients: RescaleFunction | Sequence[float] | None = None,
    *,
    config: GateConfig | None = None,
    skip_first_n_steps: int | None = None,
    skip_last_n_steps: int | None = None,
    max_consecutive_skips: int | None = None,
    calibrate: bool = False,
    allow_unsafe: bool = False,
    forecast: bool = False,
) -> TeaCacheHandle:
    """Apply TeaCache to an mflux pipeline; use the handle as a context manager or call ``restore()``.

    ``config``: a complete :class:`GateConfig` (the other gate keywords must then be left out), as the sweep
    builds it. Otherwise the keywords build one, defaults from the variant's spec: ``rel_l1_thresh``: skip while
    the accumulated rescaled signal stays below it; ``None`` takes the variant's default, ``0`` disables
    skipping (a fast path that creates no cache tensors). ``coefficients``: a :class:`RescaleFunction`, a
    published tuple (highest power first) or ``None`` for the variant's packaged calibration.
    ``skip_first_n_steps``: ``None`` takes the variant's; ``skip_last_n_steps`` and ``max_consecutive_skips``:
    ``None`` takes :class:`GateConfig`'s. ``calibrate=True`` never skips and records the traces ``teacache-calib
    record`` writes. ``forecast=True``: a skipped step extrapolates the cached residual to its own step from the
    last two computed ones (first order) instead of reusing the last. Given ``coefficients`` get the fit's safety
    check (:func:`teacache.safety.check_given`): positive nowhere on their range raises ``UnsafeRescaleError``
    unless ``allow_unsafe``; unsafe somewhere warns.
    """
    check_mflux_version()
    forecast = check_flag(forecast, "forecast")
    adapter = adapter_for(model)
    if is_applied(model) or adapter.is_applied(model):
        raise StateError("model: TeaCache is already applied to this pipeline; restore() the first handle")
    spec = variants.get(adapter.variant(model))
    given = {
        "rel_l1_thresh": rel_l1_thresh, "coefficients": coefficients, "skip_first_n_steps": skip_first_n_steps,
        "skip_last_n_steps": skip_last_n_steps, "max_consecutive_skips": max_consecutive_skips,
    }  # fmt: skip
    given = {k: v for k, v in given.items() if v is not None}
    if config is not None:
        if given:
            raise InputError(f"config: pass either config= or the gate keywords, not both (got {', '.join(given)})")
        gate_config, from_packaged = config, False
    else:
        uncalibrated = coefficients is None and spec.coefficients is None
        if uncalibrated and not calibrate:
            raise InputError(
                f"coefficients: variant {spec.name!r} has no packaged calibration; pass coefficients= "
                "(teacache-calib record / fit gives them)"
            )
        given.setdefault("rel_l1_thresh", 0.0 if calibrate else spec.default_threshold)
        if uncalibrated:  # recording never skips, so the rescale is never read: the identity stands in
            given["coefficients"] = (1.0, 0.0)
        packaged = spec.rescale() if coefficients is None and not uncalibrated else None
        given["rescale"] = as_rescale(given.pop("coefficients", None), packaged)
        given.setdefault("skip_first_n_steps", spec.skip_first_n_steps)
        gate_config = GateConfig(**given)  # its own defaults for what is not given
        if coefficients is not None and gate_config.enabled and not calibrate:
            check_given(gate_config.rescale, "coefficients", allow_unsafe)
        from_packaged = coefficients is None and not uncalibrated
    recipe = spec.recipe() if from_packaged else None
    if from_packaged:
        warn_if_past_numeric_change(spec.name)
    if recipe is not None and getattr(model, "lora_paths", None) and not calibrate:  # a recording reads no rescale
        recipe = {**recipe, "lora": "none"}
        scales = " ".join(f"{s:g}" for s in getattr(model, "lora_scales", None) or ())
        warn(
            f"the packaged {spec.name} coefficients were fitted without LoRA and this pipeline has "
            f"{len(model.lora_paths)}: LoRAs shift the signal; measure whether they still serve it with "
            f"`teacache-calib drift --model {spec.name} --save DIR`, then `--against DIR --lora-paths "
            f"{' '.join(map(str, model.lora_paths))} --lora-scales {scales}` (docs/refit-and-drift.md), or refit",
            RecipeMismatchWarning,
        )
    controller = StepController(gate_config, calibrate=calibrate, recipe=recipe, variant=spec.name, forecast=forecast)
    static_floor = gate_config.enabled and not calibrate and not gate_config.rescale.is_time_aware
    where = f" with the packaged {spec.name} rescale function" if from_packaged else " with the given coefficients"
    if static_floor and not warn_if_never_skips(gate_config, where=where):
        controller.mark_warned("floor")  # said once here; not again at every generation
    restore = adapter.install(model, controller)
    return TeaCacheHandle(model, adapter, controller, spec.name, restore)


def warn_if_past_numeric_change(variant: str) -> None:
    """The packaged coefficients describe the numbers of the mflux they were fitted on: say when the installed
    mflux, in the precision it runs now, changed this family's numbers since (or before) then."""
    from mflux.models.common.config.model_config import ModelConfig

    from teacache.coefficients import numeric_change_note

    note = numeric_change_note(variant, dtype=ModelConfig.precision)
    if note is not None:
        warn(note, RecipeMismatchWarning)
