"""The GPU lane's guard: a test here runs only where MLX's default device is a GPU with the memory it needs."""

from __future__ import annotations

import pytest

# Full-size FLUX.1-dev peaks at 36 GiB in bfloat16 and 33 GiB at 4 bits on the H200
# (results/cuda-nvidia-h200/fullsize/RUN.md); a quantized build holds the bfloat16 weights first.
MIN_GPU_GIB = 48


def gpu_skip_reason(min_gib: float = MIN_GPU_GIB) -> str | None:
    """Why a full-size GPU test cannot run here; None where it can."""
    import mlx.core as mx

    device = mx.default_device()
    if device.type != mx.gpu:
        return f"needs a GPU (MLX's CUDA build on an NVIDIA GPU, or Apple silicon); MLX's default device is {device}"
    info = mx.device_info()
    total = info.get("total_memory") or info.get("memory_size") or 0
    if total < min_gib * 2**30:
        name = info.get("device_name") or str(device)
        return f"needs {min_gib} GiB of GPU memory for full-size FLUX.1-dev; {name} has {total / 2**30:.0f} GiB"
    return None


@pytest.fixture(scope="session")
def full_size_gpu() -> None:
    reason = gpu_skip_reason()
    if reason is not None:
        pytest.skip(reason)
