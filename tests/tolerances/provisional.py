"""Tolerances for hardware without a module of its own: every constant measured elsewhere, labelled provisional.

No number lives here: at import each variant's constants are read from the generated module in this folder
that measured it (``bench.tolerances.module.provisional_sources``), so they follow every re-derivation there.
Derive this hardware's own with ``teacache-bench tolerances``
(docs/tolerances.md: Re-derive tolerances on new hardware).
"""

from bench.tolerances.module import provisional_constants, provisional_sources

HARDWARE = None  # measured on no hardware of its own
STATUS = "provisional"
VARIANTS = ()
PROVISIONAL_FROM = provisional_sources()
globals().update(provisional_constants(PROVISIONAL_FROM))
