"""The zoo: the embedded models (random-weight ``tiny-*``; the trained ``tiny-open-flux2`` and ``tiny-open-flux1``,
whose captions leave the picture open, and ``tiny-shapes``, whose captions fix it; full-size
``random-<variant>``), their data, training scripts, weights loading and their vocabularies.

The seam: the core (gate, rescale, adapters, variants, api, loading) imports nothing from here. A variant
spec names what it needs by ``"teacache.models.<module>:<function>"`` in three fields: ``VariantSpec.builder``
(the pipeline, from a seed), ``VariantSpec.prompt_check`` (a prompt the model cannot draw raises ValueError)
and ``Family.random_builder`` (the full-size random-weight pipeline); ``teacache.variants.zoo`` is the one
function that imports them, when a model is built or a prompt checked. Modules here may import the core.
"""
