"""``teacache-bench tolerances`` (``derive``) and ``gapcheck``: test tolerances from measured sweeps, the
generated module that holds them, and the broken wrappers they must catch."""
