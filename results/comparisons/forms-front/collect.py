"""The criteria folders side by side: per model, seed and computed-steps level, each candidate's median SSIM and
the paired difference (default selection minus the previous rule's pick), plus the per-prompt spread of the mean
difference over equal work. Reads only the folders' own files; writes summary.csv. Run from the project root.

The tree holds tiny-shapes' two folders; tiny-scenes' (a retired model) are at commit 0cd4016, with the
summary.csv that held both models' rows (``git show 0cd4016:results/comparisons/forms-front/summary.csv``)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from bench.studies import decision_check

HERE = Path(__file__).resolve().parent
FOLDERS = [(m, s, HERE / m / f) for m in ("tiny-shapes",) for s, f in ((1, "criteria"), (2, "criteria-seed2"))]


def main() -> None:
    rows = []
    for model, seed, folder in FOLDERS:
        plan = json.loads((folder / "plan.json").read_text())
        new, old = (c["label"] for c in plan["candidates"])
        points = pd.read_csv(folder / "points.csv")
        paired = pd.read_csv(folder / "paired.csv")
        runs = pd.concat(
            pd.read_parquet(folder / "sweeps" / label / "runs.parquet")
            .query("kind == 'teacache'")
            .assign(candidate=label)
            for label in (new, old)
        )
        grid = np.arange(int(runs["computed"].min()), int(runs["computed"].max()) + 1)
        curves = decision_check.interpolated(runs, grid)
        both = curves[new].notna() & curves[old].notna()
        per_prompt = [
            float(curves[new].loc[p][both.loc[p]].mean() - curves[old].loc[p][both.loc[p]].mean())
            for p in curves[new].index
            if both.loc[p].sum() >= 2
        ]
        for _, row in paired.iterrows():
            level = row["measure"].split(" ")[1] if row["measure"].startswith("at ") else "mean"
            ssim = {}
            if level != "mean":
                for label in (new, old):
                    at = points[(points["candidate"] == label) & (points["computed_median"] == int(level))]
                    ssim[label] = float(at["ssim_median"].iloc[0]) if len(at) else np.nan
            rows.append({
                "model": model, "seed": seed, "default": new, "before": old, "level": level,
                "ssim_default": ssim.get(new, np.nan), "ssim_before": ssim.get(old, np.nan),
                "n_prompts": row["n_prompts"], "median_difference": row["median_difference"],
                "ci_low": row["ci_low"], "ci_high": row["ci_high"], "outcome": row["outcome"],
                "per_prompt_min": min(per_prompt) if level == "mean" else np.nan,
                "per_prompt_max": max(per_prompt) if level == "mean" else np.nan,
            })  # fmt: skip
    pd.DataFrame(rows).to_csv(HERE / "summary.csv", index=False)


if __name__ == "__main__":
    main()
