"""The third session's figures from its raw step times: proxy / vanilla of neighbouring blocks, per call and both.

    python3 results/cuda-nvidia-h200/proxy-cost-flux1/pairs3.py      # reads session3/*.json beside it

A block's first step is left out; each block is in one pair (blocks 0-1, 2-3, ...); the 95 % intervals are
percentile bootstraps (5000 resamples, seed 0) over the pairs.
"""

import json
import statistics
from pathlib import Path

import numpy as np

HERE = Path(__file__).parent / "session3"


def pair_ratios(path: Path) -> list[float]:
    data = json.loads(path.read_text())
    size = data["_meta"]["block"]
    ratios = []
    for generation in data["raw_mixed"]:
        schedule, steps = generation["schedule"], generation["steps_s"]
        kept: dict[int, list[float]] = {}
        for i, seconds in enumerate(steps):
            if i > 0 and i % size:
                kept.setdefault(i // size, []).append(seconds)
        means = {block: statistics.fmean(values) for block, values in kept.items()}
        for block in sorted(means):
            if block % 2 == 0 and block + 1 in means:
                by_arm = {schedule[block * size]: means[block], schedule[(block + 1) * size]: means[block + 1]}
                ratios.append(by_arm["p"] / by_arm["v"])
    return ratios


def interval(values: np.ndarray, statistic) -> list[float]:
    rng = np.random.default_rng(0)
    draws = [statistic(rng.choice(values, values.size)) for _ in range(5000)]
    return [float(q) for q in np.percentile(draws, [2.5, 97.5])]


def main() -> None:
    everything = []
    for path in sorted(HERE.glob("steps-alternating*.json")):
        ratios = np.array(pair_ratios(path))
        everything += list(ratios)
        sem = ratios.std(ddof=1) / ratios.size**0.5
        print(f"{path.name}: {ratios.size} pairs, median {np.median(ratios) - 1:+.2%}, mean {ratios.mean() - 1:+.2%} "
              f"+- {sem:.2%}, p5-p95 {np.percentile(ratios, 5) - 1:+.1%} .. {np.percentile(ratios, 95) - 1:+.1%}")
    both = np.array(everything)
    median, mean = interval(both, np.median), interval(both, np.mean)
    print(f"both: {both.size} pairs, median {np.median(both) - 1:+.2%} [{median[0] - 1:+.2%}, {median[1] - 1:+.2%}], "
          f"mean {both.mean() - 1:+.2%} [{mean[0] - 1:+.2%}, {mean[1] - 1:+.2%}]")


if __name__ == "__main__":  # pairs4.py imports the two functions above
    main()
