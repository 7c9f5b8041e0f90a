"""TeaCache, MagCache and even schedules on one open model, each reusing or forecasting the residual, at equal
computed steps; on tiny-open-flux1 First-Block Cache and fewer Euler steps beside them.

    .venv/bin/python results/cpu-amd-epyc-2c/tiny-open-flux2/0.24.0/rules-front/study.py
    .venv/bin/python results/cpu-amd-epyc-2c/tiny-open-flux2/0.24.0/rules-front/study.py --model tiny-open-flux1
    .venv/bin/python results/cpu-amd-epyc-2c/tiny-open-flux2/0.24.0/rules-front/study.py [--model M] --summarize

The model's sweep captions (8), seed 0, 28 steps at the model's own size and guidance; the outputs go to
``results/cpu-amd-epyc-2c/<model>/0.24.0/rules-front/``. MagCache's curve is calibrated from the campaign's traces
(16 captions x 2 seeds; the sweep's captions are among them, as they are for TeaCache's packaged fit). Per method
and budget: computed steps, and SSIM / PSNR of the decoded image against vanilla's. Writes points.csv, summary.md
and front.png; ``--summarize`` rebuilds summary.md from points.csv and the traces alone.

tiny-open-flux1's front adds First-Block Cache (``teacache.fbcache.apply_fbcache``, reuse and forecast) and fewer
Euler steps (``num_inference_steps=N``, same seed, against the 28-step vanilla; ideal speedup 28 / N). Its
points.csv then carries each row's ideal speedup (``ideal_speedup``: 28 / computed for the rules, 28 / N for fewer
steps, ``handle.ideal_speedup`` for First-Block Cache, whose block 0 runs at every step); the summary's ideal is
28 over the mean steps' worth of work (28 / ideal per caption), which is 28 / mean computed for the rules.
"""

import teacache  # noqa: F401, I001  (first: MLX's CPU BLAS preload)

# isort: split
import argparse
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from calib.run.prompts import load_prompts

RESULTS = Path(__file__).resolve().parents[3]  # results/cpu-amd-epyc-2c
VERSION = "0.24.0"
STEPS = 28
SEED = 0
# MagCache settings: thresholds at K = 3 (sglang's default) and K = 8 (the toolkit's own cap for TeaCache)
MAGCACHE = [(t, k) for k in (3, 8) for t in (0.02, 0.05, 0.1, 0.2, 0.5)]


@dataclass(frozen=True)
class Subject:
    prompts: str
    teacache: tuple[float, ...]
    generate: dict = field(default_factory=dict)  # beyond seed, prompt and steps (the pipeline's defaults otherwise)
    fbcache: tuple[float, ...] = ()  # First-Block Cache thresholds; none: not in this front
    fewer_steps: bool = False  # N Euler steps at every even schedule's N


SUBJECTS = {
    "tiny-open-flux2": Subject("tiny-open-sweep", (0.1, 0.2, 0.3, 0.5, 0.8)),
    "tiny-open-flux1": Subject(
        "tiny-open-any-sweep",
        (0.05, 0.1, 0.2, 0.3, 0.5, 0.8),  # its campaign's thresholds
        {"width": 256, "height": 256, "guidance": 5.0},
        fbcache=(0.08, 0.15, 0.3, 0.5),  # 0.08: ParaAttention's default for FLUX
        fewer_steps=True,
    ),
}
LABELS = {"teacache": "TeaCache", "magcache": "MagCache", "even": "even", "fbcache": "FBCache",
          "fewer-steps": "fewer steps"}  # fmt: skip


def folder(model: str) -> Path:
    return RESULTS / model / VERSION / "rules-front"


def image(model, subject: Subject, prompt: str, steps: int = STEPS) -> np.ndarray:
    return np.asarray(
        model.generate_image(seed=SEED, prompt=prompt, num_inference_steps=steps, **subject.generate).image
    )


def measure_all(name: str) -> pd.DataFrame:
    from bench.quality.metrics import image_metrics
    from teacache import apply_teacache
    from teacache.fbcache import apply_fbcache
    from teacache.magcache import MagCacheConfig, apply_magcache
    from teacache.schedule import StaticSchedule, apply_schedule

    subject = SUBJECTS[name]
    model = teacache.load_model(name)
    prompts = load_prompts(subject.prompts)
    curve = magcache_curve(name)
    vanilla = {pid: image(model, subject, text) for pid, text in prompts.items()}
    rows = []

    def record(method, residual, setting, pid, computed, ideal, out):
        rows.append({"method": method, "residual": residual, "setting": setting, "prompt_id": pid,
                     "computed": computed, **image_metrics(out, vanilla[pid]), "ideal_speedup": ideal})  # fmt: skip

    def measure(method: str, residual: str, setting: str, apply):
        for pid, text in prompts.items():
            with apply() as handle:
                out = image(model, subject, text)
            ideal = handle.ideal_speedup if method == "fbcache" else STEPS / handle.stats.computed
            record(method, residual, setting, pid, handle.stats.computed, ideal, out)
        print(
            method, residual, setting, "computed", np.mean([r["computed"] for r in rows[-len(prompts) :]]), flush=True
        )

    for forecast in (False, True):
        how = "forecast" if forecast else "reuse"
        for t in subject.teacache:
            run = lambda t=t, f=forecast: apply_teacache(model, rel_l1_thresh=t, forecast=f)  # noqa: E731
            measure("teacache", how, f"{t:g}", run)
        for t, k in MAGCACHE:
            cfg = MagCacheConfig(threshold=t, ratios=curve, max_consecutive_skips=k)
            run = lambda cfg=cfg, f=forecast: apply_magcache(model, cfg, STEPS, forecast=f)  # noqa: E731
            measure("magcache", how, f"{t:g}/K{k}", run)
        counts = sorted({r["computed"] for r in rows if r["residual"] == "reuse"})
        for c in counts:
            fixed = StaticSchedule.evenly(STEPS, c)
            measure("even", how, f"{c}", lambda fixed=fixed, f=forecast: apply_schedule(model, fixed, forecast=f))
    for forecast in (False, True):
        for t in subject.fbcache:
            run = lambda t=t, f=forecast: apply_fbcache(model, threshold=t, forecast=f)  # noqa: E731
            measure("fbcache", "forecast" if forecast else "reuse", f"{t:g}", run)
    if subject.fewer_steps:
        for n in counts:
            for pid, text in prompts.items():
                record("fewer-steps", "none", f"{n}", pid, n, STEPS / n, image(model, subject, text, steps=n))
            print("fewer-steps", n, flush=True)
    points = pd.DataFrame(rows)
    return points if subject.fbcache else points.drop(columns="ideal_speedup")


def magcache_curve(name: str) -> tuple[float, ...]:
    from teacache.magcache import ratio_curve

    return ratio_curve(pd.read_parquet(RESULTS / name / VERSION / "traces" / "traces.parquet"))


def summary_frame(points: pd.DataFrame) -> pd.DataFrame:
    """Means over the captions per method, residual and setting, in the order of points.csv."""
    points = points.assign(work=STEPS / points["ideal_speedup"] if "ideal_speedup" in points else points["computed"])
    summary = (
        points.groupby(["method", "residual", "setting"], sort=False)
        .agg(computed=("computed", "mean"), work=("work", "mean"), ssim_mean=("ssim", "mean"),
             ssim_p5=("ssim", lambda s: s.quantile(0.05)), psnr_mean=("psnr", "mean"))
        .reset_index()
    )  # fmt: skip
    summary["ideal_speedup"] = STEPS / summary["work"]
    return summary


def summary_text(name: str, points: pd.DataFrame | None = None) -> str:
    """summary.md: the MagCache curve, then one line per method, residual and setting."""
    if points is None:
        points = pd.read_csv(folder(name) / "points.csv", keep_default_na=False, dtype={"setting": str})
        points[["ssim", "psnr"]] = points[["ssim", "psnr"]].astype(float)
    summary = summary_frame(points)
    lines = ["| method | residual | setting | computed of 28 | ideal speedup | SSIM mean | SSIM p5 | PSNR mean |",
             "|---|---|---|---:|---:|---:|---:|---:|"]  # fmt: skip
    for r in summary.itertuples():
        lines.append(f"| {r.method} | {r.residual} | {r.setting} | {r.computed:.2f} | {r.ideal_speedup:.2f}x | "
                     f"{r.ssim_mean:.4f} | {r.ssim_p5:.4f} | {r.psnr_mean:.2f} |")  # fmt: skip
    curve_line = ", ".join(f"{c:.3f}" for c in magcache_curve(name))
    return f"MagCache curve (median residual-magnitude ratio per step): {curve_line}\n\n" + "\n".join(lines) + "\n"


def draw(name: str, summary: pd.DataFrame) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    wide = SUBJECTS[name].fbcache or SUBJECTS[name].fewer_steps
    fig, ax = plt.subplots(figsize=(7.2, 4.8) if wide else (6.4, 4.2))
    styles = [("teacache", "o"), ("magcache", "s"), ("even", "^"), ("fbcache", "D"), ("fewer-steps", "x")]
    for method, marker in styles:
        for residual, style in (("reuse", "-"), ("forecast", "--"), ("none", ":")):
            part = summary[(summary["method"] == method) & (summary["residual"] == residual)].sort_values("work")
            if len(part):
                label = f"{method}, {residual}" if residual != "none" else method
                ax.plot(part["work" if wide else "computed"], part["ssim_mean"], style, marker=marker, label=label)
    if wide:
        ax.set_xlabel("steps' worth of work of 28 (28 / ideal speedup; FBCache counts block 0 of skipped steps)")
    else:
        ax.set_xlabel("computed steps of 28 (mean over captions)")
    ax.set_ylabel("SSIM against vanilla (mean of 8 captions)")
    ax.set_title(f"{name}: " + ("methods at equal work" if wide else "rules and residuals at equal computed steps"))
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small" if wide else None)
    fig.tight_layout()
    fig.savefig(folder(name) / "front.png", dpi=120)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", choices=sorted(SUBJECTS), default="tiny-open-flux2")
    parser.add_argument("--summarize", action="store_true", help="rebuild summary.md from points.csv and the traces")
    args = parser.parse_args(argv)
    out = folder(args.model)
    if args.summarize:
        (out / "summary.md").write_text(summary_text(args.model), encoding="utf-8")
    else:
        out.mkdir(parents=True, exist_ok=True)
        points = measure_all(args.model)
        points.to_csv(out / "points.csv", index=False, float_format="%.6g")
        (out / "summary.md").write_text(summary_text(args.model), encoding="utf-8")  # from points.csv as written
        draw(args.model, summary_frame(points))
    print((out / "summary.md").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
