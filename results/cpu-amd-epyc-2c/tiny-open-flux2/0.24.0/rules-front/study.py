"""TeaCache, MagCache and even schedules on tiny-open-flux2, each reusing or forecasting the residual, at equal
computed steps.

    .venv/bin/python results/cpu-amd-epyc-2c/tiny-open-flux2/0.24.0/rules-front/study.py

The sweep's 8 captions (tiny-open-sweep), seed 0, 28 steps at the model's own size and guidance. MagCache's
curve is calibrated from the campaign's traces (16 captions x 2 seeds; the sweep's captions are among them, as
they are for TeaCache's packaged fit). Per method and budget: computed steps, and SSIM / PSNR of the decoded
image against vanilla's. Writes points.csv, summary.md and front.png beside this script.
"""

import teacache  # noqa: F401, I001  (first: MLX's CPU BLAS preload)

# isort: split
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from bench.quality.metrics import image_metrics
from calib.run.prompts import load_prompts
from teacache import apply_teacache
from teacache.magcache import MagCacheConfig, apply_magcache, ratio_curve
from teacache.schedule import StaticSchedule, apply_schedule

HERE = Path(__file__).resolve().parent
TRACES = HERE.parent / "traces" / "traces.parquet"
STEPS = 28
SEED = 0
TEACACHE_THRESHOLDS = (0.1, 0.2, 0.3, 0.5, 0.8)
# MagCache settings: thresholds at K = 3 (sglang's default) and K = 8 (the toolkit's own cap for TeaCache)
MAGCACHE = [(t, k) for k in (3, 8) for t in (0.02, 0.05, 0.1, 0.2, 0.5)]


def image(model, prompt: str) -> np.ndarray:
    return np.asarray(model.generate_image(seed=SEED, prompt=prompt, num_inference_steps=STEPS).image)


def main() -> int:
    model = teacache.load_model("tiny-open-flux2")
    prompts = load_prompts("tiny-open-sweep")
    curve = ratio_curve(pd.read_parquet(TRACES))
    vanilla = {pid: image(model, text) for pid, text in prompts.items()}
    rows = []

    def measure(method: str, residual: str, setting: str, apply):
        for pid, text in prompts.items():
            with apply() as handle:
                out = image(model, text)
            rows.append({"method": method, "residual": residual, "setting": setting, "prompt_id": pid,
                         "computed": handle.stats.computed, **image_metrics(out, vanilla[pid])})  # fmt: skip
        print(
            method, residual, setting, "computed", np.mean([r["computed"] for r in rows[-len(prompts) :]]), flush=True
        )

    for forecast in (False, True):
        how = "forecast" if forecast else "reuse"
        for t in TEACACHE_THRESHOLDS:
            run = lambda t=t, f=forecast: apply_teacache(model, rel_l1_thresh=t, forecast=f)  # noqa: E731
            measure("teacache", how, f"{t:g}", run)
        for t, k in MAGCACHE:
            cfg = MagCacheConfig(threshold=t, ratios=curve, max_consecutive_skips=k)
            run = lambda cfg=cfg, f=forecast: apply_magcache(model, cfg, STEPS, forecast=f)  # noqa: E731
            measure("magcache", how, f"{t:g}/K{k}", run)
        for c in sorted({r["computed"] for r in rows if r["residual"] == "reuse"}):
            fixed = StaticSchedule.evenly(STEPS, c)
            measure("even", how, f"{c}", lambda fixed=fixed, f=forecast: apply_schedule(model, fixed, forecast=f))
    points = pd.DataFrame(rows)
    points.to_csv(HERE / "points.csv", index=False, float_format="%.6g")
    summary = (
        points.groupby(["method", "residual", "setting"], sort=False)
        .agg(computed=("computed", "mean"), ssim_mean=("ssim", "mean"),
             ssim_p5=("ssim", lambda s: s.quantile(0.05)), psnr_mean=("psnr", "mean"))
        .reset_index()
    )  # fmt: skip
    summary["ideal_speedup"] = STEPS / summary["computed"]
    lines = ["| method | residual | setting | computed of 28 | ideal speedup | SSIM mean | SSIM p5 | PSNR mean |",
             "|---|---|---|---:|---:|---:|---:|---:|"]  # fmt: skip
    for r in summary.itertuples():
        lines.append(f"| {r.method} | {r.residual} | {r.setting} | {r.computed:.2f} | {r.ideal_speedup:.2f}x | "
                     f"{r.ssim_mean:.4f} | {r.ssim_p5:.4f} | {r.psnr_mean:.2f} |")  # fmt: skip
    curve_line = ", ".join(f"{c:.3f}" for c in curve)
    (HERE / "summary.md").write_text(f"MagCache curve (median residual-magnitude ratio per step): {curve_line}\n\n"
                                     + "\n".join(lines) + "\n", encoding="utf-8")  # fmt: skip
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for method, marker in (("teacache", "o"), ("magcache", "s"), ("even", "^")):
        for residual, style in (("reuse", "-"), ("forecast", "--")):
            part = summary[(summary["method"] == method) & (summary["residual"] == residual)].sort_values("computed")
            ax.plot(part["computed"], part["ssim_mean"], style, marker=marker, label=f"{method}, {residual}")
    ax.set_xlabel("computed steps of 28 (mean over captions)")
    ax.set_ylabel("SSIM against vanilla (mean of 8 captions)")
    ax.set_title("tiny-open-flux2: rules and residuals at equal computed steps")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(HERE / "front.png", dpi=120)
    print((HERE / "summary.md").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
