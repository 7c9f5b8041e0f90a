"""How close a run's result is to its vanilla pair (``metrics``) and to its prompt (``adherence`` for
tiny-shapes, ``open_adherence`` for the open models; ``scorers`` says which reads a variant's images)."""
