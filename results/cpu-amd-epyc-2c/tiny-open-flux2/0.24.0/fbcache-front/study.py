"""First-Block Cache on tiny-open-flux2 at four thresholds, reusing or forecasting the remaining blocks' residual.

    .venv/bin/python results/cpu-amd-epyc-2c/tiny-open-flux2/0.24.0/fbcache-front/study.py

The same captions, seed, steps and vanilla images as ../rules-front (the sweep's 8 captions, seed 0, 28 steps at the
model's own size and guidance). Per threshold and residual: computed steps, the ideal bound with block 0 computed
at every step (teacache.fbcache.ideal_speedup), and SSIM / PSNR of the decoded image against vanilla's. Writes
points.csv and summary.md beside this script; ``--summarize`` rebuilds summary.md from points.csv alone.
"""

import teacache  # noqa: F401, I001  (first: MLX's CPU BLAS preload)

# isort: split
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from bench.quality.metrics import image_metrics
from calib.run.prompts import load_prompts
from teacache.fbcache import apply_fbcache

HERE = Path(__file__).resolve().parent
STEPS = 28
SEED = 0
THRESHOLDS = (0.04, 0.08, 0.15, 0.3)  # 0.08: ParaAttention's default for FLUX


def image(model, prompt: str) -> np.ndarray:
    return np.asarray(model.generate_image(seed=SEED, prompt=prompt, num_inference_steps=STEPS).image)


def main() -> int:
    model = teacache.load_model("tiny-open-flux2")
    prompts = load_prompts("tiny-open-sweep")
    vanilla = {pid: image(model, text) for pid, text in prompts.items()}
    rows = []
    for forecast in (False, True):
        for t in THRESHOLDS:
            for pid, text in prompts.items():
                with apply_fbcache(model, threshold=t, forecast=forecast) as handle:
                    out = image(model, text)
                stats = handle.stats
                rows.append({"residual": "forecast" if forecast else "reuse", "threshold": t, "prompt_id": pid,
                             "computed": stats.computed, "skipped_steps": " ".join(map(str, stats.skipped_steps)),
                             "num_blocks": handle.num_blocks, "ideal_speedup": handle.ideal_speedup,
                             **image_metrics(out, vanilla[pid])})  # fmt: skip
            print(forecast, t, np.mean([r["computed"] for r in rows[-len(prompts) :]]), flush=True)
    pd.DataFrame(rows).to_csv(HERE / "points.csv", index=False, float_format="%.6g")
    return summarize()


def summarize() -> int:
    """summary.md from points.csv (the raw rows): means over the captions; the bound is each caption's
    ``handle.ideal_speedup`` (teacache.fbcache.ideal_speedup), averaged."""
    points = pd.read_csv(HERE / "points.csv")
    summary = (
        points.groupby(["residual", "threshold"], sort=False)
        .agg(computed=("computed", "mean"), ideal=("ideal_speedup", "mean"), ssim_mean=("ssim", "mean"),
             ssim_p5=("ssim", lambda s: s.quantile(0.05)), psnr_mean=("psnr", "mean"), blocks=("num_blocks", "first"))
        .reset_index()
    )  # fmt: skip
    lines = ["| residual | threshold | computed of 28 (mean) | ideal, block 0 counted | N / computed | SSIM mean | "
             "SSIM p5 | PSNR mean |", "|---|---:|---:|---:|---:|---:|---:|---:|"]  # fmt: skip
    for r in summary.itertuples():
        quality = f"{r.ssim_mean:.4f} | {r.ssim_p5:.4f} | {r.psnr_mean:.2f}"
        lines.append(f"| {r.residual} | {r.threshold:g} | {r.computed:.2f} | {r.ideal:.2f}x | "
                     f"{STEPS / r.computed:.2f}x | {quality} |")  # fmt: skip
    note = f"Blocks (B): {int(summary['blocks'].iloc[0])}; ideal with block 0 counted: N / (N - k (1 - 1/B)).\n\n"
    (HERE / "summary.md").write_text(note + "\n".join(lines) + "\n", encoding="utf-8")
    print((HERE / "summary.md").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(summarize() if sys.argv[1:] == ["--summarize"] else main())
