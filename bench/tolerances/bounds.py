"""The margin rule every derived bound uses (``bench.tolerances.derive``'s docstring says why), and the number of
pairs a calibrated constant needs: shared by the sweeps' constants and the quantized no-op's."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

CALIBRATED_MIN_PAIRS = 8  # fewer measured (prompt, seed) pairs than this: the constants are provisional
MARGIN = "margin: one median-to-worst spread beyond the worst run (see the module docstring)"


def stats(values: Iterable[float]) -> dict:
    """n, min, p1, median and max of the measured values: what a constant's comment shows."""
    v = np.asarray(list(values), dtype=float)
    return {"n": int(v.size), "min": float(v.min()), "p1": float(np.percentile(v, 1)),
            "median": float(np.median(v)), "max": float(v.max())}  # fmt: skip


def lower_bound(values: Iterable[float]) -> tuple[float, dict]:
    """A floor one median-to-worst spread below the lowest value, and the values' stats."""
    s = stats(values)
    return s["min"] - (s["median"] - s["min"]), s


def upper_bound(values: Iterable[float]) -> tuple[float, dict]:
    """A ceiling one median-to-worst spread above the highest value, and the values' stats."""
    s = stats(values)
    return s["max"] + (s["max"] - s["median"]), s
