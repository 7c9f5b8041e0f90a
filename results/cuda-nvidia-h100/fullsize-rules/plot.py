"""Each rule's measured speedup as a share of its ideal bound, per family: speedup.png beside this script.

    .venv/bin/python results/cuda-nvidia-h100/fullsize-rules/plot.py

Reads only summary.csv. One panel per family: skipped steps of 20 against realized / ideal speedup (the median of
the repeats over the rule's own bound, bars their range), each rule in its colour. The bound is N / (N - k) for
TeaCache and MagCache and N / (N - k (1 - 1/B)) for First-Block Cache (block 0 of each skipped step still
computed). What a point lacks below 1 is what the rule's own work on a skipped step, and the step's fixed costs,
take from the bound; at 0 skipped it is the cost of computing every step through the rule.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

HERE = Path(__file__).resolve().parent
RULES = {"teacache": ("TeaCache", "tab:blue", "o"), "magcache": ("MagCache", "tab:orange", "s"),
         "fbcache": ("First-Block Cache", "tab:green", "^")}  # fmt: skip
ARMS = {"proxy-all": "teacache", "gate": "teacache", "magcache-all": "magcache", "magcache": "magcache",
        "fbcache-all": "fbcache", "fbcache": "fbcache"}  # fmt: skip
FAMILIES = {"random-flux2-klein-base-4b": "FLUX.2 Klein base 4B", "random-z-image": "Z-Image",
            "random-flux1-dev": "FLUX.1-dev", "random-qwen-image": "Qwen-Image"}  # fmt: skip


def figure(summary: pd.DataFrame) -> Figure:
    summary = summary.assign(rule=summary["arm"].map(ARMS))
    fig = Figure(figsize=(10, 7), layout="constrained")
    axes = fig.subplots(2, 2, sharex=True, sharey=True)
    for ax, (model, title) in zip(axes.flat, FAMILIES.items(), strict=True):
        rows = summary[summary["model"] == model]
        ax.axhline(1.0, color="0.4", lw=1)
        for offset, (rule, (label, colour, marker)) in zip((-0.15, 0.0, 0.15), RULES.items(), strict=True):
            part = rows[rows["rule"] == rule]
            ratio = part["ratio_to_ideal"]
            err = np.vstack([ratio - part["speedup_min"] / part["ideal"], part["speedup_max"] / part["ideal"] - ratio])
            ax.errorbar(part["skipped"] + offset, ratio, yerr=err, fmt=marker, color=colour, label=label, ms=6)
        ax.set_title(f"{title} ({rows['params_b'].iloc[0]:.1f} B, {rows['vanilla_ms_per_step'].iloc[0]:.0f} ms/step)")
        ax.set_xlabel(f"steps skipped of {int(rows['steps'].iloc[0])}")
        ax.set_ylabel("speedup / ideal")
        ax.grid(alpha=0.3)
    axes.flat[0].legend(loc="lower left", fontsize=8)
    fig.suptitle("Each rule at full size: the share of its ideal speedup turned into time (one H100, 1024x1024, bf16)")
    return fig


def main() -> int:
    fig = figure(pd.read_csv(HERE / "summary.csv"))
    fig.savefig(HERE / "speedup.png", dpi=110)
    print(HERE / "speedup.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
