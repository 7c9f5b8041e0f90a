"""What TeaCache costs and gains in time: ``fullsize`` (real-size models), ``overhead`` (the wrapper when it
skips nothing) and ``blas`` (the OpenBLAS preload)."""
