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
