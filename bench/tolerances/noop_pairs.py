"""Pairs of no-op runs: which arms a pair compares, the differences of final latents, and the check against bounds.

A no-op measurement runs vanilla and the proxy with every step computed (``proxy-all``) several times in one
process and compares every run's final latents with every other's: max-abs and relative RMS (the RMS of the
difference over the RMS of the second run's latents), as ``quantized-noop/measure.py`` writes them. Where
vanilla is not reproducible from run to run (quantized kernels on CUDA), the oracle is that every proxy /
vanilla pair stays within measured bounds, with vanilla / vanilla beside it to say how far vanilla moves
from itself. Pure numbers: the GPU test and the derivation share this, and it is tested on small arrays.
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

RUN_NAME = re.compile(r"^(vanilla|proxy-all)-(warm|\d+)$")  # measure.py's names: vanilla-warm, proxy-all-0, ...
PROXY_VANILLA, VANILLA_VANILLA, PROXY_PROXY = "proxy/vanilla", "vanilla/vanilla", "proxy/proxy"


def arm(run: str) -> str:
    """``vanilla`` or ``proxy`` for a run name of measure.py's form; ValueError for any other name."""
    match = RUN_NAME.match(run)
    if match is None:
        raise ValueError(f"expected a run named vanilla-N, vanilla-warm, proxy-all-N or proxy-all-warm, got {run!r}")
    return "vanilla" if match.group(1) == "vanilla" else "proxy"


@dataclass(frozen=True)
class Pair:
    """Two runs' final latents compared: ``b`` is the reference of the relative RMS."""

    a: str
    b: str
    equal: bool
    max_abs: float
    rel_rms: float

    @property
    def kind(self) -> str:
        """proxy/vanilla, vanilla/vanilla or proxy/proxy, whichever order the runs are in."""
        first, second = arm(self.a), arm(self.b)
        return PROXY_VANILLA if first != second else f"{first}/{first}"


def differences(latents: Mapping[str, np.ndarray]) -> list[Pair]:
    """Every run against every later one (in the mapping's order), as measure.py compares them."""
    pairs = []
    for (name_a, a), (name_b, b) in itertools.combinations(latents.items(), 2):
        a64, b64 = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
        d = (a64 - b64).reshape(-1)
        ref = float(np.sqrt(np.mean(b64 * b64)))
        rms = float(np.sqrt(np.mean(d * d)))
        rel = rms / ref if ref > 0 else (0.0 if rms == 0 else math.inf)
        pairs.append(Pair(name_a, name_b, bool(np.array_equal(a, b)), float(np.max(np.abs(d))), rel))
    return pairs


def of_kind(pairs: Sequence[Pair], kind: str) -> list[Pair]:
    return [p for p in pairs if p.kind == kind]


def distribution(label: str, pairs: Sequence[Pair], key: str) -> str:
    """One line: n, min, median and max of ``key`` (max_abs or rel_rms) over ``pairs``, and how many differ."""
    if not pairs:
        return f"{label}: none"
    values = np.asarray([getattr(p, key) for p in pairs], dtype=float)
    unequal = sum(not p.equal for p in pairs)
    return (
        f"{label} n {values.size}: min {values.min():.6g}, median {np.median(values):.6g}, max {values.max():.6g}"
        f" ({unequal} of {values.size} not equal)"
    )


@dataclass(frozen=True)
class Verdict:
    """Whether every proxy / vanilla pair is within both bounds; the message names those that are not and gives
    the proxy / vanilla and vanilla / vanilla figures of the runs checked."""

    failures: tuple[str, ...]
    message: str

    @property
    def ok(self) -> bool:
        return not self.failures


def check(pairs: Sequence[Pair], max_abs: float, rel_rms: float) -> Verdict:
    """Every proxy / vanilla pair's max-abs and relative RMS against the bounds (at most, inclusive)."""
    proxy_vanilla = of_kind(pairs, PROXY_VANILLA)
    if not proxy_vanilla:
        raise ValueError("check: expected at least one proxy/vanilla pair")
    failures = []
    for p in proxy_vanilla:
        beyond = [f"max-abs {p.max_abs:.6g} > {max_abs:.6g}"] if not p.max_abs <= max_abs else []
        beyond += [f"relative RMS {p.rel_rms:.6g} > {rel_rms:.6g}"] if not p.rel_rms <= rel_rms else []
        if beyond:
            failures.append(f"{p.a} / {p.b}: {', '.join(beyond)}")
    vanilla = of_kind(pairs, VANILLA_VANILLA)
    figures = [distribution(kind, group, key) + f" ({name})" for kind, group in
               ((PROXY_VANILLA, proxy_vanilla), (VANILLA_VANILLA, vanilla))
               for key, name in (("max_abs", "max-abs"), ("rel_rms", "relative RMS"))]  # fmt: skip
    n = len(proxy_vanilla)
    head = f"{len(failures)} of {n} proxy/vanilla pairs beyond the bounds" if failures else f"all {n} within the bounds"
    message = f"{head} (max-abs {max_abs:.6g}, relative RMS {rel_rms:.6g}); " + "; ".join([*failures, *figures])
    return Verdict(tuple(failures), message)
