"""calib: see the module docstrings of its commands."""

import teacache  # noqa: F401  (first: OpenBLAS is preloaded before MLX is imported)
