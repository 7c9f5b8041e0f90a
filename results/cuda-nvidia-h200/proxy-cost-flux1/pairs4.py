"""The fourth session's figures from its raw step times: per arm (forced, gated), per call and pooled.

    python3 results/cuda-nvidia-h200/proxy-cost-flux1/pairs4.py      # reads session4/*.json beside it

Same rules as pairs3.py (whose pair_ratios and interval this uses): a block's first step left out, each block
in one pair, 95 % percentile bootstraps (5000 resamples, seed 0) over the pairs.
"""

import json
from pathlib import Path

import numpy as np
from pairs3 import interval, pair_ratios

HERE = Path(__file__).parent / "session4"

pooled: dict[str, list[float]] = {}
for path in sorted(HERE.glob("*.json")):
    arm = json.loads(path.read_text())["_meta"]["arm"]
    ratios = np.array(pair_ratios(path))
    pooled.setdefault(arm, []).extend(ratios)
    sem = ratios.std(ddof=1) / ratios.size**0.5
    print(f"{path.name} ({arm}): {ratios.size} pairs, median {np.median(ratios) - 1:+.2%}, "
          f"mean {ratios.mean() - 1:+.2%} +- {sem:.2%}")
for arm, values in pooled.items():
    both = np.array(values)
    median, mean = interval(both, np.median), interval(both, np.mean)
    print(f"{arm}: {both.size} pairs, median {np.median(both) - 1:+.2%} [{median[0] - 1:+.2%}, {median[1] - 1:+.2%}], "
          f"mean {both.mean() - 1:+.2%} [{mean[0] - 1:+.2%}, {mean[1] - 1:+.2%}]")
