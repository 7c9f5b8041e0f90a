"""One timed generation in a fresh process: timings that no earlier run in the same process can move.

Several runs in one process share MLX's compiled-function cache, its allocator and whatever a
wrapper leaves behind; a leak there shows up as a speedup that is not real. :func:`run_isolated`
starts ``python -m bench.sweep.isolate JOB`` (JOB as JSON), which loads the model, warms up with the same
arm (compile and JIT are not timed, as in the sweep), times the generation and prints one JSON line.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time

import mlx.core as mx
import numpy as np

from bench.sweep.baselines import Arm, run_arm
from calib.run.command import command
from teacache import load_model
from teacache.errors import InputError
from teacache.io import project_root

_ROOT = project_root()  # the folder holding bench/, calib/, teacache/
RESULT_PREFIX = "isolate-result: "


def job(
    model: str,
    arm,
    prompt: str,
    seed: int,
    steps: int,
    width: int,
    height: int,
    guidance: float,
    *,
    base_model: str | None = None,
    quantize: int | None = None,
    warmups: int = 1,
    repeats: int = 1,
    lora_paths: list[str] | None = None,
    lora_scales: list[float] | None = None,
) -> dict:
    """The JSON-ready description of one isolated timing (``arm``: a :class:`bench.sweep.baselines.Arm`)."""
    if warmups < 0 or repeats < 1:
        raise ValueError(f"isolate: expected warmups >= 0 and repeats >= 1, got {warmups} and {repeats}")
    return {
        "model": model, "base_model": base_model, "quantize": quantize, "arm": arm.to_dict(),
        "prompt": prompt, "seed": seed, "steps": steps, "width": width, "height": height, "guidance": guidance,
        "warmups": warmups, "repeats": repeats,
        **({"lora_paths": lora_paths, "lora_scales": lora_scales} if lora_paths else {}),
    }  # fmt: skip


def run_isolated(spec: dict, timeout_s: float | None = None, python: str = sys.executable) -> dict:
    """Run ``spec`` (from :func:`job`) in a fresh process; return its result.

    The result: ``loop_s`` and ``total_s`` (one per repeat), ``steps_run``, ``computed``,
    ``skipped_steps``, ``latents_sha256`` of the last repeat, the child's ``pid`` and ``process_s``
    (the child's whole life, model load included, as seen from here).
    """
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(_ROOT), env.get("PYTHONPATH", "")) if p)
    start = time.perf_counter()
    proc = subprocess.run(
        [python, "-m", "bench.sweep.isolate", json.dumps(spec)],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        env=env,
        cwd=_ROOT,
    )
    elapsed = time.perf_counter() - start
    lines = [line for line in proc.stdout.splitlines() if line.startswith(RESULT_PREFIX)]
    if proc.returncode != 0 or not lines:
        tail = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-5:])
        raise RuntimeError(f"isolated run failed (exit {proc.returncode}): {tail}")
    result = json.loads(lines[-1][len(RESULT_PREFIX) :])
    result["process_s"] = elapsed
    return result


def _run(spec: dict) -> dict:

    loras = {"lora_paths": spec.get("lora_paths"), "lora_scales": spec.get("lora_scales")}
    model = load_model(spec["model"], base_model=spec.get("base_model"), quantize=spec.get("quantize"), **loras)
    arm = Arm.from_dict(spec["arm"])
    args = (spec["prompt"], spec["seed"], spec["steps"], spec["width"], spec["height"], spec["guidance"])
    for _ in range(spec["warmups"]):
        run_arm(model, arm, *args)
    loop_s, total_s = [], []
    result = None
    for _ in range(spec["repeats"]):
        result = run_arm(model, arm, *args)
        loop_s.append(result.generation.loop_s)
        total_s.append(result.generation.total_s)
    latents = np.array(result.generation.latents.astype(mx.float32))
    return {
        "loop_s": loop_s,
        "total_s": total_s,
        "steps_run": result.steps_run,
        "computed": result.computed,
        "skipped_steps": result.skipped_steps,
        "latents_sha256": hashlib.sha256(latents.tobytes()).hexdigest(),
        "pid": os.getpid(),
    }


@command("bench.sweep.isolate")
def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: python -m bench.sweep.isolate JOB_JSON (bench.sweep.isolate.job builds it)", file=sys.stderr)
        return 2
    try:
        spec = json.loads(argv[0])
    except json.JSONDecodeError as exc:
        raise InputError(f"JOB_JSON is not JSON: {exc}") from exc
    print(RESULT_PREFIX + json.dumps(_run(spec)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
