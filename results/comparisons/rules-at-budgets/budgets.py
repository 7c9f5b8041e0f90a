"""The ten-second table: per open model, at 1.5x, 2x and 3x ideal speedup, the best caching method and its SSIM.

    .venv/bin/python results/comparisons/rules-at-budgets/budgets.py

Reads only committed points (the model's rules-front/points.csv; on tiny-open-flux2 also fbcache-front/points.csv
and budget-search/held_out.csv, the same captions, seed 0 and vanilla images) and writes budgets.md beside this
script. A method is a rule and its residual (TeaCache reuse, MagCache forecast, ...); its measured points are its
settings, each at the mean over the 8 captions of SSIM against vanilla and of the steps' worth of work (28 / the
caption's ideal speedup: the computed steps for the rules and the searched schedules, N for N Euler steps, the
computed steps plus block 0 of each skipped step for First-Block Cache). Where two settings land on the same work,
the better SSIM stands for it. At a budget of B x, the work is 28 / B steps; a method's SSIM there is interpolated
linearly in work between its two measured points on either side (its own value where one lands on it); a method
whose points do not reach both sides of the budget has none there (no extrapolation).

Intervals: the same interpolation caption by caption (the weights of the means' work), its mean over the captions
bootstrapped (95 %, 5000 resamples, seed 0); for the best method against the runner-up, their paired difference
over the same resampled captions, so an interval holding 0 reads as a tie.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
CAMPAIGNS = ROOT / "results" / "cpu-amd-epyc-2c"
STEPS = 28
BUDGETS = (1.5, 2.0, 3.0)
RESAMPLES, SEED = 5000, 0
MODELS = ("tiny-open-flux1", "tiny-open-flux2")
RULES = {"teacache": "TeaCache", "magcache": "MagCache", "even": "even schedule", "fbcache": "First-Block Cache",
         "fewer-steps": "fewer Euler steps", "searched": "searched schedule"}  # fmt: skip


def inputs(model: str) -> list[Path]:
    """The committed files the model's row is made from (those that exist)."""
    base = CAMPAIGNS / model / "0.24.0"
    paths = [base / "rules-front" / "points.csv", base / "fbcache-front" / "points.csv",
             base / "budget-search" / "held_out.csv"]  # fmt: skip
    return [p for p in paths if p.is_file()]


def per_caption(path: Path) -> pd.DataFrame:
    """One row per method, setting and caption: method, setting, prompt_id, work, ssim."""
    frame = pd.read_csv(path, keep_default_na=False, dtype=str)
    if path.parent.name == "budget-search":  # the hill climb's schedules, held out; the even ones are in rules-front
        frame = frame[frame["schedule"] == "searched"]
        return pd.DataFrame({"method": "searched " + frame["residual"], "setting": frame["budget"],
                             "prompt_id": frame["prompt_id"], "work": frame["budget"].astype(float),
                             "ssim": frame["ssim"].astype(float)})  # fmt: skip
    if path.parent.name == "fbcache-front":
        method = "fbcache " + frame["residual"]
        setting = frame["threshold"]
    else:
        method = (frame["method"] + " " + frame["residual"]).str.replace(" none", "", regex=False)
        setting = frame["setting"]
    ideal = (
        frame["ideal_speedup"].astype(float) if "ideal_speedup" in frame else STEPS / frame["computed"].astype(float)
    )
    return pd.DataFrame({"method": method, "setting": setting, "prompt_id": frame["prompt_id"],
                         "work": STEPS / ideal, "ssim": frame["ssim"].astype(float)})  # fmt: skip


def fronts(model: str) -> tuple[dict[str, pd.DataFrame], pd.DataFrame]:
    """Per method its measured points, by work ascending: work, ssim (means over captions), setting; and the
    per-caption SSIM of every method and setting (rows (method, setting), a column per caption)."""
    rows = pd.concat([per_caption(p) for p in inputs(model)], ignore_index=True)
    means = rows.groupby(["method", "setting"], sort=False).agg(work=("work", "mean"), ssim=("ssim", "mean"))
    means = means.reset_index().round({"work": 9})
    out = {}
    for method, part in means.groupby("method", sort=False):
        best = part.sort_values(["work", "ssim"], ascending=[True, False]).drop_duplicates("work")
        out[method] = best.reset_index(drop=True)
    return out, rows.pivot_table(index=["method", "setting"], columns="prompt_id", values="ssim")


def at_budget(front: pd.DataFrame, budget: float) -> tuple[float, str, list[tuple[str, float]]] | None:
    """The SSIM at ``budget``, how it was had (the setting, or the two bracketing it) and the settings' weights
    that make it; None where not reached."""
    work = STEPS / budget
    w, s = front["work"].to_numpy(), front["ssim"].to_numpy()
    exact = np.isclose(w, work, atol=1e-6)
    if exact.any():
        i = int(np.flatnonzero(exact)[0])
        return float(s[i]), f"{front['setting'][i]}", [(front["setting"][i], 1.0)]
    below, above = np.flatnonzero(w < work), np.flatnonzero(w > work)
    if not len(below) or not len(above):
        return None
    lo, hi = int(below[-1]), int(above[0])
    t = (work - w[lo]) / (w[hi] - w[lo])
    ssim = s[lo] + (s[hi] - s[lo]) * t
    return float(ssim), f"{front['setting'][lo]}..{front['setting'][hi]}", [
        (front["setting"][lo], 1.0 - t),
        (front["setting"][hi], t),
    ]


def captions_at(per_caption_ssim: pd.DataFrame, method: str, weights: list[tuple[str, float]]) -> np.ndarray:
    """The budget's interpolation caption by caption (captions in column order)."""
    return sum(weight * per_caption_ssim.loc[(method, setting)].to_numpy() for setting, weight in weights)


def interval(values: np.ndarray) -> tuple[float, float]:
    """95 % bootstrap interval of the mean over captions (the same resamples for every call)."""
    picks = np.random.default_rng(SEED).integers(0, len(values), size=(RESAMPLES, len(values)))
    low, high = np.percentile(values[picks].mean(axis=1), [2.5, 97.5])
    return float(low), float(high)


def name(method: str) -> str:
    rule, _, residual = method.partition(" ")
    return RULES[rule] + (f", {residual}" if residual else "")


def table(model: str) -> list[str]:
    curves, per_caption_ssim = fronts(model)
    lines = [f"**{model}**", "",
             "| ideal speedup | steps' work of 28 | best method (setting) | its SSIM [95 %] | runner-up (SSIM) | "
             "best minus runner-up [95 %] | best TeaCache (SSIM) | no setting on both sides |",
             "|---:|---:|---|---|---|---|---|---|"]  # fmt: skip
    for budget in BUDGETS:
        scored = []
        for method, front in curves.items():
            got = at_budget(front, budget)
            if got is not None:
                scored.append((got[0], method, got[1], captions_at(per_caption_ssim, method, got[2])))
        scored.sort(key=lambda t: -t[0])  # stable: a tie keeps the order the methods were measured in
        (ssim, method, how, values), (ssim2, method2, how2, values2) = scored[0], scored[1]
        low, high = interval(values)
        d_low, d_high = interval(values - values2)
        teacache = [t for t in scored if t[1].startswith("teacache ")]
        tc = (
            f"{name(teacache[0][1])} ({teacache[0][2]}): {teacache[0][0]:.4f}"
            if teacache
            else "no setting on both sides"
        )
        missed = "; ".join(name(m) for m in curves if m not in {t[1] for t in scored}) or "-"
        lines.append(f"| {budget:g}x | {STEPS / budget:.2f} | {name(method)} ({how}) | {ssim:.4f} [{low:.4f}, "
                     f"{high:.4f}] | {name(method2)} ({how2}): {ssim2:.4f} | {ssim - ssim2:+.4f} [{d_low:+.4f}, "
                     f"{d_high:+.4f}] | {tc} | {missed} |")  # fmt: skip
    measured = "; ".join(name(m) for m in curves)
    return [*lines, "", f"Methods measured: {measured}.", ""]


def render() -> str:
    sources = "; ".join(str(p.relative_to(ROOT)) for m in MODELS for p in inputs(m))
    head = [
        "# At 1.5x, 2x and 3x ideal speedup: the best caching method and its SSIM, per open model",
        "",
        "`.venv/bin/python results/comparisons/rules-at-budgets/budgets.py` (from the project root; made from "
        f"{sources}). 8 captions, seed 0, 28 steps, SSIM of the decoded image against vanilla's, mean over the "
        "captions; CPU (2-core AMD EPYC), MLX 0.32.2, mflux 0.24.0; ideal speedups, no wall-clock time.",
        "",
        "A budget of B x is 28 / B steps' worth of work (computed steps; First-Block Cache adds block 0 of every "
        "skipped step). Each method's SSIM there is **interpolated linearly in work** between its two measured "
        "settings on either side (the setting in brackets: `a..b`; one setting where it lands on the budget); a "
        "method with no setting on one side is left out at that budget. Searched schedule: the budget search's "
        "fixed schedules (hill-climbed on three other captions, scored on these 8), tiny-open-flux2 only.",
        "",
    ]
    body = [line for m in MODELS for line in table(m)]
    return "\n".join(head + body).rstrip("\n") + "\n"


def main() -> int:
    (HERE / "budgets.md").write_text(render(), encoding="utf-8")
    print((HERE / "budgets.md").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
