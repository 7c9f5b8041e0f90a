"""Fit each of mlx-teacache's nine real trace sets twice (the default candidates and rule; the candidates and rule
before mono+step) and write one CSV row per set: the two selections, the monotone ceiling, the time of a fit."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
import time
from pathlib import Path

SETS = (
    ("flux1-krea", "_calibration_flux1_krea_dev.json"),
    ("flux2-klein-9b", "_calibration_flux2_klein_9b.json"),
    ("flux2-klein-base-4b", "_calibration_flux2_klein_base_4b.json"),
    ("qwen-image-A", "_calibration_qwen.json#A"),
    ("qwen-image-B", "_calibration_qwen.json#B"),
    ("qwen-image-2512-A", "_calibration_qwen_2512.json#A"),
    ("qwen-image-2512-B", "_calibration_qwen_2512.json#B"),
    ("z-image-A", "_calibration_z_image.json#A"),
    ("z-image-B", "_calibration_z_image.json#B"),
)
BEFORE = ("--no-splines", "--se", "best")  # the candidates and the rule fits chose with before mono+step


def fit(traces: str, out: Path, *extra: str) -> tuple[dict, float]:
    start = time.perf_counter()
    subprocess.run(
        ["teacache-calib", "fit", traces, "--out", str(out), "--no-plots", *extra],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    return json.loads((out / "fit.json").read_text()), time.perf_counter() - start


def main(scripts: Path, work: Path, csv_path: Path) -> None:
    rows = []
    for name, file in SETS:
        new, seconds = fit(str(scripts / file), work / name / "default")
        old, _ = fit(str(scripts / file), work / name / "before", *BEFORE)
        sel, before, ceiling = new["selected"], old["selected"], new["ceiling"]
        rows.append(
            {
                "set": name,
                "file": file,
                "n_pairs": new["data"]["n_pairs"],
                "n_prompts": new["data"]["n_prompts"],
                "ceiling_cv_r2": f"{ceiling['cv_r2']:.4f}",
                "ceiling_bins": ceiling["bins"],
                "selected": sel["label"],
                "selected_params": sel["n_params"],
                "selected_cv_r2": f"{sel['cv_r2']:.4f}",
                "selected_safe": sel["safety"]["safe"],
                "below_ceiling": f"{ceiling['distance']:.4f}",
                "before": before["label"],
                "before_cv_r2": f"{before['cv_r2']:.4f}",
                "before_below_ceiling": f"{ceiling['cv_r2'] - before['cv_r2']:.4f}",
                "fit_seconds": f"{seconds:.1f}",
            }
        )
        print(name, rows[-1]["selected"], rows[-1]["selected_cv_r2"], rows[-1]["ceiling_cv_r2"], rows[-1]["fit_seconds"])
    with csv_path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3]))
