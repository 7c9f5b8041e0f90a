"""Adapter tests: one tiny pipeline per family (conftest), the same settings everywhere."""

IDENTITY = (1.0, 0.0)  # the rescale function that passes the raw signal through
STEPS = 10
# each family's embedded model -> the conftest fixture that holds it
FAMILY_FIXTURES = {
    "tiny-flux1": "flux1",
    "tiny-flux2": "klein",
    "tiny-qwen-image": "qwen_image",
    "tiny-z-image": "z_image",
}


def untouched(model, original) -> bool:
    """The pipeline as mflux built it: its transformer, no predict of ours, no controller in its callbacks."""
    from teacache.core import is_applied

    return model.transformer is original and "_predict" not in vars(model) and not is_applied(model)


def measured_settings(tolerances, variant: str) -> dict:
    """The settings a trained model's tolerances were measured at; a module without them fails the test."""
    import pytest

    from bench.tolerances.derive import prefix

    name = f"{prefix(variant)}_SETTINGS"
    if not hasattr(tolerances, name):
        why = f"the tolerance module {tolerances.__name__} has no {name}"
        pytest.fail(f"{why}: re-derive it (docs/tolerances.md: Re-derive tolerances on new hardware)")
    return getattr(tolerances, name)


def measured_gate(settings: dict) -> dict:
    """apply_teacache's gate keywords at the measured settings."""
    from teacache.rescale import RescaleFunction

    return {
        "rel_l1_thresh": settings["threshold"],
        "coefficients": RescaleFunction.from_dict(settings["rescale"]),
        "skip_first_n_steps": settings["skip_first_n_steps"],
    }
