"""``teacache-bench report`` (``command``) and ``decision-check``: statistics, fronts, plots and Markdown from
a sweep folder. The Markdown templates of every written report live in ``templates/``."""
