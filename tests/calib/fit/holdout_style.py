"""Trace tables shaped like another tool's Qwen-Image calibration: prompt_id, step, x_rel_l1, y_rel_l1 only.

7 prompts, 50 steps. x is wide only in the first 10 % of the schedule (0.1..0.6) and narrow mid-schedule
(about 0.04..0.07); the output's change rises with x and time but falls back at the top of the early
range (as several published fits do), so a free fit bends down there. A single x range over the whole
schedule admits mid-schedule x values four times anything recorded there.
``python tests/calib/fit/holdout_style.py OUT.csv`` writes one.
"""

from __future__ import annotations

import sys

import numpy as np
import pandas as pd

N_PROMPTS = 7
NUM_STEPS = 50


def holdout_style_frame(seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    rows = []
    for p in range(N_PROMPTS):
        shift, drift = abs(rng.normal(0, 0.004)), rng.normal(0, 0.01)
        for step in range(1, NUM_STEPS):
            u = step / (NUM_STEPS - 1)
            x = 0.047 + 0.54 * np.exp(-(step - 1) / 1.2) + 0.05 * u**4 + shift + rng.normal(0, 0.003)
            y = x * (1.1 - 0.9 * u) - 1.5 * max(0.0, x - 0.35) + 0.02 + (0.03 + drift) * u + rng.normal(0, 0.004)
            rows.append((f"p{p}", step, x, y))
    return pd.DataFrame(rows, columns=["prompt_id", "step", "x_rel_l1", "y_rel_l1"])


if __name__ == "__main__":
    holdout_style_frame().to_csv(sys.argv[1], index=False)
