"""``teacache-bench report`` (``command``), ``decision-check``, ``criteria`` and ``across-models``: statistics,
fronts, plots and Markdown from sweep folders. The Markdown templates of every written report live in
``templates/``."""
