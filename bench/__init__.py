"""bench: see the module docstrings of its commands."""

import teacache  # noqa: F401  (first: OpenBLAS is preloaded before MLX is imported)
from teacache._platform import quiet_transformers

quiet_transformers()  # the commands start here, before anything imports mflux
