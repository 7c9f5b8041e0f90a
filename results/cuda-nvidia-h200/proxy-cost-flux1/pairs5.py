"""The fifth session's step-alternating figures (the cache evaluated with the step), beside the fourth's.

    python3 results/cuda-nvidia-h200/proxy-cost-flux1/pairs5.py      # reads session5/forced-carry.json

Same rules as pairs3.py (whose pair_ratios and interval this uses): a block's first step left out, each block
in one pair, 95 % percentile bootstraps (5000 resamples, seed 0) over the pairs.
"""

from pathlib import Path

import numpy as np
from pairs3 import interval, pair_ratios

HERE = Path(__file__).parent
for path in (HERE / "session5" / "forced-carry.json", *sorted((HERE / "session4").glob("forced*.json"))):
    ratios = np.array(pair_ratios(path))
    median, mean = interval(ratios, np.median), interval(ratios, np.mean)
    print(f"{path.parent.name}/{path.name}: {ratios.size} pairs, median {np.median(ratios) - 1:+.2%} "
          f"[{median[0] - 1:+.2%}, {median[1] - 1:+.2%}], mean {ratios.mean() - 1:+.2%} "
          f"[{mean[0] - 1:+.2%}, {mean[1] - 1:+.2%}]")
