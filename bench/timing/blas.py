"""``teacache-bench blas``: what the OpenBLAS preload buys on MLX's CPU backend.

Each setting runs in a fresh process (the preload must happen before MLX is first imported) and
measures float32 matmul throughput and tiny-flux1's per-step time after a warm-up.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

from calib.run.arguments import CommandParser, check_at_least
from teacache import variants
from teacache.errors import InputError

MIN_STEPS = 2  # the median is taken over the steps after the first (which includes the loop's set-up)
SIZE_MULTIPLE, MAX_SIZE = 16, 4096  # FLUX latents are 1/8 the pixels, packed 2x2

# the embedded FLUX.1 pipeline: its random weights time a real mflux step loop at any size
PROBE_MODEL = next(s.name for s in variants.all_specs() if s.embedded and s.family == "flux1")

_PROBE = r"""
import json, os, statistics, time
import teacache
from teacache import _platform
import mlx.core as mx
n = 1024
a = mx.random.normal((n, n)); b = mx.random.normal((n, n)); mx.eval(a, b)
mx.eval(a @ b)
t = time.perf_counter(); reps = 5
for _ in range(reps): mx.eval(a @ b)
gflops = 2 * n**3 * reps / (time.perf_counter() - t) / 1e9
model = teacache.load_model(os.environ["PROBE_MODEL"])
times = []
class Clock:
    def call_before_loop(self, **kw): self.t = time.perf_counter()
    def call_in_loop(self, t, **kw):
        now = time.perf_counter(); times.append(now - self.t); self.t = now
model.callbacks.register(Clock())
steps, size = int(os.environ["PROBE_STEPS"]), int(os.environ["PROBE_SIZE"])
for _ in range(2):
    times.clear()
    model.generate_image(seed=0, prompt="probe", num_inference_steps=steps, height=size, width=size, guidance=3.5)
print(json.dumps({"blas": _platform.PRELOADED_BLAS, "gflops": gflops,
                  "step_ms": 1000 * statistics.median(times[1:]), "dtype": str(mx.float32)}))
"""


def setup_arg_parser() -> argparse.ArgumentParser:
    parser = CommandParser(prog="teacache-bench blas", description=__doc__)
    parser.add_argument("--steps", type=int, default=6, help="denoising steps per probe")
    parser.add_argument("--size", type=int, default=256, help="image side in pixels")
    return parser


def measure(preload: bool, steps: int, size: int) -> dict:
    env = dict(os.environ, PROBE_STEPS=str(steps), PROBE_SIZE=str(size), PROBE_MODEL=PROBE_MODEL)
    env.pop("TEACACHE_NO_BLAS_PRELOAD", None)
    if not preload:
        env["TEACACHE_NO_BLAS_PRELOAD"] = "1"
    out = (
        subprocess.run([sys.executable, "-c", _PROBE], env=env, capture_output=True, text=True, check=True)
        .stdout.strip()
        .splitlines()[-1]
    )
    return json.loads(out)


def check_args(args: argparse.Namespace) -> None:
    """Refuse, before the probes start, what they would only fail on inside their subprocess."""
    check_at_least(args.steps, MIN_STEPS, "--steps", " (the median step time leaves out the first step)")
    if not (SIZE_MULTIPLE <= args.size <= MAX_SIZE and args.size % SIZE_MULTIPLE == 0):
        raise InputError(
            f"--size: expected a multiple of {SIZE_MULTIPLE} from {SIZE_MULTIPLE} to {MAX_SIZE} pixels, got {args.size}"
        )


def main(argv: list[str] | None = None) -> int:
    args = setup_arg_parser().parse_args(argv)
    check_args(args)
    with_blas = measure(True, args.steps, args.size)
    without = measure(False, args.steps, args.size)
    if with_blas["blas"] is None:
        print("OpenBLAS preload not active on this platform (only Linux with opencv-python's OpenBLAS)")
    print(f"tiny-flux1 {args.size}x{args.size}, float32, median step after warm-up:")
    print(f"  reference BLAS : {without['step_ms']:8.1f} ms/step   sgemm {without['gflops']:7.1f} GFLOP/s")
    print(f"  OpenBLAS       : {with_blas['step_ms']:8.1f} ms/step   sgemm {with_blas['gflops']:7.1f} GFLOP/s")
    print(f"  speedup        : {without['step_ms'] / with_blas['step_ms']:8.1f}x per step")
    return 0


if __name__ == "__main__":
    sys.exit(main())
