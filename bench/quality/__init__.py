"""How close a run's result is to its vanilla pair (``metrics``) and to its prompt (``adherence``)."""
