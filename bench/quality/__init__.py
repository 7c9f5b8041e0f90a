"""How close a run's result is to its vanilla pair (``metrics``) and to its prompt (``adherence`` for
tiny-shapes, ``scene_adherence`` for tiny-scenes; ``scorers`` says which reads a variant's images)."""
