"""Two synthetic hardware's campaign folders: what compare-hardware and the trace reader's tests read."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from teacache.io import FORMAT_VERSION, write_json, write_parquet, write_text

STEPS = 10

PROMPTS = ({"id": "p0", "text": "a red fox"}, {"id": "p1", "text": "a lighthouse"})

SEEDS = (0, 1)
FIT_CV_R2 = {"cpu-test-2c": 0.9, "cuda-test-gpu": 0.8}

# hardware -> backend, device, seconds per vanilla loop, thresholds with their skipped steps and SSIM
HARDWARE = {
    "cpu-test-2c": ("cpu", "Test CPU", 0.5, {0.0: ([], 1.0), 0.1: ([2, 4], 0.99), 0.2: ([2, 4, 6], 0.97)}),
    "cuda-test-gpu": ("cuda", "Test GPU", 0.05, {0.0: ([], 1.0), 0.1: ([2, 4], 0.98), 0.3: ([2, 4, 6, 8], 0.9)}),
}

ODD_PAIR = ("p1", 1)  # on the GPU this pair skips [2, 5] at 0.1: 3 of 4 schedules match the CPU's

TOLERANCES = {
    "cpu-test-2c": {
        "SETTINGS": {"steps": 10, "threshold": 0.1, "rescale": {"coefficients": [1.0, 0.0]}},
        "PROXY_NOOP": "bit-exact",
        "SSIM_FLOOR": 0.9,
        "SKIP_BAND": (2, 2),
    },
    "cuda-test-gpu": {
        "SETTINGS": {"steps": 10, "threshold": 0.1, "rescale": {"coefficients": [2.0, 0.5]}},
        "PROXY_NOOP_MIN_COSINE": 0.999,
        "SSIM_FLOOR": 0.85,
        "SKIP_BAND": (2, 3),
    },
}


def _row(prompt: dict, seed: int, kind: str, threshold, steps: list[int], ssim: float, wall: float) -> dict:
    k = len(steps)
    speedup = 1.0 if kind == "vanilla" else STEPS / (STEPS - k) * 0.9
    return {
        "format_version": FORMAT_VERSION, "run_id": f"{prompt['id']}-s{seed}-{kind}-{threshold}",
        "pair_id": f"{prompt['id']}-s{seed}", "kind": kind, "variant": "tiny-shapes", "model": "tiny-shapes",
        "prompt_id": prompt["id"], "prompt": prompt["text"], "seed": seed, "threshold": threshold,
        "num_steps": STEPS, "computed": STEPS - k, "skipped": k, "skipped_steps": json.dumps(steps),
        "longest_skip_streak": 1,
        "predicted_skipped": float(k), "wall_s": [wall / speedup] * 2, "wall_s_median": wall / speedup,
        "speedup": speedup, "ideal_speedup": STEPS / (STEPS - k), "max_abs": 1.0 - ssim, "mean_abs": 1.0 - ssim,
        "max_rel": 1.0 - ssim, "cosine": 1.0 - (1.0 - ssim) / 10, "ssim": ssim,
        "psnr": float("inf") if ssim == 1.0 else 40.0 * ssim, "adherence": float("nan"), "image_path": None,
    }  # fmt: skip


def make_campaign(root: Path, hardware: str, variant: str = "tiny-shapes") -> Path:
    backend, device, wall, plan = HARDWARE[hardware]
    folder = root / hardware / variant / "0.24.0"
    rows = []
    for prompt in PROMPTS:
        for seed in SEEDS:
            rows.append(_row(prompt, seed, "vanilla", float("nan"), [], 1.0, wall))
            for t, (steps, ssim) in plan.items():
                odd = hardware.startswith("cuda") and t == 0.1 and (prompt["id"], seed) == ODD_PAIR
                rows.append(_row(prompt, seed, "teacache", t, [2, 5] if odd else steps, ssim, wall))
    runs = pd.DataFrame(rows)
    runs["variant"] = runs["model"] = variant
    write_parquet(folder / "sweep" / "runs.parquet", runs)
    write_json(folder / "sweep" / "provenance.json", {
        "format_version": FORMAT_VERSION, "variant": variant, "model": variant, "backend": backend,
        "device_name": device, "os": "Linux test", "date_utc": "2026-01-01T00:00:00Z",
        "git": {"commit": "abc", "dirty": False}, "versions": {"mlx": "0.32.2", "mflux": "0.24.0"},
        "steps": STEPS, "resolution": "32x32", "guidance": 1.0, "prompts": list(PROMPTS), "seeds": list(SEEDS),
        "repeats": 2, "default_threshold": 0.1,
    })  # fmt: skip
    selected = {
        "label": "poly1-free", "form": "poly", "coefficients": [1.0, 0.1], "time_coefficients": [],
        "x_range": [0.01, 0.3], "r2": FIT_CV_R2[hardware] + 0.01, "cv_r2": FIT_CV_R2[hardware], "rmse": 0.003,
        "n_pairs": 32, "n_prompts": 2, "selected": True,
    }  # fmt: skip
    write_json(folder / "fit" / "fit.json", {
        "format_version": FORMAT_VERSION, "kind": "teacache-calib fit", "variant": variant, "selected": selected,
        "candidates": [selected], "options": {"min_step": 1},
    })  # fmt: skip
    prefix = variant.upper().replace("-", "_")
    lines = [f"HARDWARE = {hardware!r}", "STATUS = 'calibrated'"]
    lines += [f"{prefix}_{name} = {value!r}" for name, value in TOLERANCES[hardware].items()]
    write_text(folder / "tolerances.py", "\n".join(lines) + "\n")
    return folder
