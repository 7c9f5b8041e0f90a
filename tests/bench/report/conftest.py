"""A synthetic sweep folder with known numbers: what the report's and the notebook's tests read."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd

from teacache.io import FORMAT_VERSION, write_json, write_parquet

THRESHOLDS = (0.1, 0.2, 0.3, 0.5)

PROMPTS = (
    {"id": "p0", "text": "a red fox"},
    {"id": "p1", "text": "a lighthouse"},
    {"id": "p2", "text": "a bowl"},
)

SEEDS = (1, 2)

STEPS = 20

# Per threshold: (skipped steps, ssim centre). At a floor of 0.95 the highest threshold fails (p5 < 0.95),
# so the recommendation must be 0.3, not the fastest one.
PLAN = {0.1: (1, 0.995), 0.2: (3, 0.985), 0.3: (5, 0.965), 0.5: (8, 0.91)}


def make_sweep(folder: Path, seed: int = 0) -> Path:
    """Write runs.parquet, decisions.parquet and provenance.json per the sweep contract."""
    rng = np.random.default_rng(seed)
    runs, decisions = [], []
    for prompt in PROMPTS:
        for s in SEEDS:
            pair = f"{prompt['id']}-s{s}"
            vanilla_wall = [10.0 + rng.normal(0, 0.05) for _ in range(3)]
            base = {
                "format_version": FORMAT_VERSION,
                "pair_id": pair,
                "variant": "flux1-dev",
                "model": "black-forest-labs/FLUX.1-dev",
                "prompt_id": prompt["id"],
                "prompt": prompt["text"],
                "seed": s,
                "num_steps": STEPS,
                "image_path": None,
            }
            runs.append(
                {
                    **base,
                    "run_id": f"{pair}-vanilla",
                    "kind": "vanilla",
                    "threshold": math.nan,
                    "computed": STEPS,
                    "skipped": 0,
                    "skipped_steps": "[]",
                    "longest_skip_streak": 0,
                    "predicted_skipped": math.nan,
                    "wall_s": vanilla_wall,
                    "wall_s_median": float(np.median(vanilla_wall)),
                    "speedup": 1.0,
                    "ideal_speedup": 1.0,
                    "max_abs": 0.0,
                    "mean_abs": 0.0,
                    "max_rel": 0.0,
                    "cosine": 1.0,
                    "ssim": 1.0,
                    "psnr": math.inf,
                    "adherence": 0.8 + 0.1 * rng.random(),
                }
            )
            for t in THRESHOLDS:
                k0, ssim_c = PLAN[t]
                k = int(k0 + rng.integers(0, 2))
                skipped = sorted(int(v) for v in np.linspace(2, STEPS - 3, k).round())
                wall = [
                    float(np.median(vanilla_wall)) * (STEPS - k + 1.5) / STEPS + rng.normal(0, 0.05) for _ in range(3)
                ]
                run_id = f"{pair}-t{t:g}"
                runs.append(
                    {
                        **base,
                        "run_id": run_id,
                        "kind": "teacache",
                        "threshold": t,
                        "computed": STEPS - k,
                        "skipped": k,
                        "skipped_steps": json.dumps(skipped),
                        "longest_skip_streak": 1,
                        "predicted_skipped": math.nan if prompt["id"] == "p2" else float(k + (s == 2)),
                        "wall_s": wall,
                        "wall_s_median": float(np.median(wall)),
                        "speedup": float(np.median(vanilla_wall) / np.median(wall)),
                        "ideal_speedup": STEPS / (STEPS - k),
                        "max_abs": 0.05 * k + rng.random() * 0.01,
                        "mean_abs": 0.005 * k + rng.random() * 0.001,
                        "max_rel": 0.5 * k + rng.random(),
                        "cosine": 1.0 - 0.001 * k - rng.random() * 1e-4,
                        "ssim": min(1.0, ssim_c + rng.normal(0, 0.01)),  # SSIM is at most 1
                        "psnr": 45.0 - 2.0 * k + rng.normal(0, 0.5),
                        "adherence": 0.8 - 0.01 * k + 0.05 * rng.random(),
                    }
                )
                acc = 0.0
                for step in range(STEPS):
                    x = math.nan if step == 0 else 0.05 + 0.1 * math.exp(-step / 5) + rng.random() * 0.01
                    compute = step not in skipped
                    rescaled = math.nan if step == 0 else x * 2
                    acc = 0.0 if compute else acc + (rescaled if not math.isnan(rescaled) else 0.0)
                    decisions.append(
                        {
                            "run_id": run_id,
                            "step": step,
                            "num_steps": STEPS,
                            "sigma": 1.0 - step / STEPS,
                            "x": x,
                            "rescaled": rescaled,
                            "accumulated": acc,
                            "compute": compute,
                            "reason": "compute" if compute else "skip",
                        }
                    )
    folder.mkdir(parents=True, exist_ok=True)
    write_parquet(folder / "runs.parquet", pd.DataFrame(runs))
    write_parquet(folder / "decisions.parquet", pd.DataFrame(decisions))
    write_json(
        folder / "provenance.json",
        {
            "format_version": FORMAT_VERSION,
            "date_utc": "2026-01-02T03:04:05Z",
            "command": "teacache-bench sweep --variant flux1-dev",
            "git": {"commit": "0" * 40, "dirty": False},
            "versions": {"mlx": "0.32.2", "mflux": "0.24.0", "numpy": "2.0", "python": "3.11.7"},
            "backend": "cpu",
            "device_name": "Synthetic CPU",
            "os": "Linux 6.0 x86_64",
            "model": "black-forest-labs/FLUX.1-dev",
            "variant": "flux1-dev",
            "steps": STEPS,
            "thresholds": list(THRESHOLDS),
            "prompts": list(PROMPTS),
            "seeds": list(SEEDS),
            "repeats": 3,
            "max_rel_eps": 1e-6,
            "ssim": {"data_range": 255, "channel_axis": -1, "note": "RGB uint8, per-channel mean"},
            "rescale": {
                "form": "poly",
                "coefficients": [1.0, 0.0],
                "time_coefficients": [],
                "x_range": [0, 1],
            },
            "rescale_floor": 0.18,
            "default_threshold": 0.2,
        },
    )
    return folder
