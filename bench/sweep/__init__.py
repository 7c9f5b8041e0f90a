"""``teacache-bench sweep`` (``command``) and ``replay``: the measured runs, their arms, and the sweep
folder's tables."""
