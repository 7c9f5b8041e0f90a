"""``teacache-bench step-cost``'s figures, derived from raw step times alone (``--summarize DIR`` rebuilds them).

Step against neighbouring step: in each mixed generation the arms alternate in blocks of ``block`` steps; a
block's first step is left out (it may carry the other side's arrays, released late, or a first compile);
blocks 0-1, 2-3, ... form the pairs, each block in one pair, and a pair's ratio is the mean of its arm block's
steps over the mean of its vanilla block's. Per record and arm: the median and mean ratio with 95 % percentile
bootstrap intervals over the pairs (:data:`RESAMPLES` resamples, seed :data:`SEED`), the standard error of
the mean and the 5th and 95th percentiles. Records of one folder and arm are also pooled, in path order.

Whole runs: each arm's loop time over that of the vanilla run of the same repeat, and the allocator's peak.
Memory per phase (where recorded): each arm's peak in the loop and in the decode, and what it holds after the
loop, above vanilla's of the same repeat and less the arm's cache.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd

from bench.timing.step_cost_records import ARM, MIXED, PROG, REFERENCE, WHOLE, Generation, Source, read_sources
from bench.timing.step_cost_switch import ARM_STEP, VANILLA_STEP
from teacache.io import write_text

RESAMPLES = 5000
SEED = 0
SUMMARY_MD, SUMMARY_CSV = "summary.md", "summary.csv"
HEADER = f"<!-- {PROG} --summarize: derived from the raw records named below; that command rebuilds it -->"
PAIR_COLUMNS = (
    "group", "record", "arm", "generations", "pairs", "median_pct", "median_lo_pct", "median_hi_pct", "mean_pct",
    "mean_lo_pct", "mean_hi_pct", "sem_pct", "p5_pct", "p95_pct", "bit_exact", "compared",
)  # fmt: skip


def pair_ratios(schedule: str, seconds: tuple[float, ...] | list[float], block: int) -> list[float]:
    """The arm / vanilla ratio of each pair of neighbouring blocks of one mixed generation."""
    kept: dict[int, list[float]] = {}
    for i, value in enumerate(seconds):
        if i % block:  # a block's first step left out (step 0 with it)
            kept.setdefault(i // block, []).append(value)
    means = {b: statistics.fmean(values) for b, values in kept.items()}
    ratios = []
    for b in sorted(means):
        if b % 2 == 0 and b + 1 in means:
            sides = {schedule[b * block]: means[b], schedule[(b + 1) * block]: means[b + 1]}
            if len(sides) == 2:  # one block of each side
                ratios.append(sides[ARM_STEP] / sides[VANILLA_STEP])
    return ratios


def interval(values: np.ndarray, statistic: Callable) -> tuple[float, float]:
    """95 % percentile bootstrap interval of ``statistic`` over ``values`` (RESAMPLES draws, seed SEED)."""
    rng = np.random.default_rng(SEED)
    draws = statistic(values[rng.integers(0, values.size, (RESAMPLES, values.size))], axis=1)
    low, high = np.percentile(draws, [2.5, 97.5])
    return float(low), float(high)


def pair_figures(ratios: list[float]) -> dict:
    """Median, mean (each with its interval), s.e. and p5/p95 of pair ratios, in percent against 1."""
    values = np.asarray(ratios, dtype=float)
    pct = lambda r: 100 * (r - 1)  # noqa: E731
    median_ci, mean_ci = interval(values, np.median), interval(values, np.mean)
    sem = 100 * values.std(ddof=1) / values.size**0.5 if values.size > 1 else float("nan")
    return {
        "pairs": int(values.size), "median_pct": pct(float(np.median(values))), "median_lo_pct": pct(median_ci[0]),
        "median_hi_pct": pct(median_ci[1]), "mean_pct": pct(float(values.mean())), "mean_lo_pct": pct(mean_ci[0]),
        "mean_hi_pct": pct(mean_ci[1]), "sem_pct": sem, "p5_pct": pct(float(np.percentile(values, 5))),
        "p95_pct": pct(float(np.percentile(values, 95))),
    }  # fmt: skip


def _mixed(source: Source, arm: str) -> list[Generation]:
    return [g for g in source.generations if g.kind == MIXED and g.arm == arm]


def _arms(source: Source, kind: str) -> list[str]:
    return list(dict.fromkeys(g.arm for g in source.generations if g.kind == kind and g.role == ARM))


def _row(group: str, record: str, generations: list[Generation]) -> dict | None:
    ratios = [r for g in generations for r in pair_ratios(g.schedule, g.seconds, g.block)]
    if not ratios:
        return None
    compared = [g.max_abs for g in generations if g.max_abs is not None]
    return {
        "group": group, "record": record, "arm": generations[0].arm, "generations": len(generations),
        **pair_figures(ratios), "bit_exact": sum(m == 0 for m in compared), "compared": len(compared),
    }  # fmt: skip


def pair_rows(sources: list[Source]) -> pd.DataFrame:
    """One row per record and arm, then one per folder and arm that holds several records of it (pooled)."""
    rows, pools = [], {}
    for source in sources:
        for arm in _arms(source, MIXED):
            row = _row(source.group, source.name, _mixed(source, arm))
            if row is not None:
                rows.append(row)
                pools.setdefault((source.group, arm), []).append(source)
    for (group, arm), members in pools.items():
        if len(members) > 1:
            names = ", ".join(Path(s.name).name for s in members)
            prefix = "" if group == "." else f"{group}/"
            rows.append(_row(group, f"{prefix}pooled: {names}", [g for s in members for g in _mixed(s, arm)]))
    return pd.DataFrame(rows, columns=list(PAIR_COLUMNS))


def _whole(source: Source) -> tuple[dict[int, Generation], dict[str, list[Generation]]]:
    reference = {g.index: g for g in source.generations if g.kind == WHOLE and g.role == REFERENCE}
    arms: dict[str, list[Generation]] = {}
    for g in source.generations:
        if g.kind == WHOLE and g.role == ARM:
            arms.setdefault(g.arm, []).append(g)
    return reference, arms


def whole_rows(sources: list[Source]) -> list[dict]:
    """Per record and arm: the loop time over vanilla's of the same repeat, the peaks, the exactness."""
    rows = []
    for source in sources:
        reference, arms = _whole(source)
        for arm, runs in arms.items():
            runs = [r for r in runs if r.index in reference and r.loop_s is not None]
            if not runs:
                continue
            ratios = [r.loop_s / reference[r.index].loop_s for r in runs]
            peaks = [(reference[r.index].peak_gib, r.peak_gib) for r in runs]
            compared = [r.max_abs for r in runs if r.max_abs is not None]
            rows.append({"record": source.name, "arm": arm, "ratios": ratios, "peaks": peaks,
                         "vanilla_s": [reference[r.index].loop_s for r in runs],
                         "bit_exact": sum(m == 0 for m in compared), "compared": len(compared)})  # fmt: skip
    return rows


def phase_rows(sources: list[Source]) -> list[dict]:
    """Per record, arm and repeat: loop peak, decode peak and memory held after the loop, each above vanilla's of
    the same repeat, less the arm's cache."""
    rows = []
    for source in sources:
        reference, arms = _whole(source)
        for arm, runs in arms.items():
            for run in runs:
                base = reference.get(run.index)
                if run.phases is None or base is None or base.phases is None:
                    continue
                p, v = run.phases, base.phases
                rows.append({
                    "record": source.name, "arm": arm, "repeat": run.index + 1, "cache": p.cache,
                    "loop": p.loop_peak - v.loop_peak - p.cache, "decode": p.decode_peak - v.decode_peak - p.cache,
                    "held": p.held_after_loop - v.held_after_loop - p.cache, "max_abs": run.max_abs,
                })  # fmt: skip
    return rows


# ------------------------------------------------------------------------------------------------- the text


def _pct(value: float) -> str:
    return f"{value:+.2f} %"


def _sem(value: float) -> str:
    return "-" if math.isnan(value) else f"{value:.2f} %"  # one pair has no spread


def _exact(bit_exact: int, compared: int) -> str:
    return f"{bit_exact}/{compared}" if compared else "-"


def _pairs_table(pairs: pd.DataFrame) -> list[str]:
    lines = [
        "| record | arm | generations | pairs | median | 95 % interval | mean | 95 % interval | s.e. | p5 .. p95 | "
        "bit-exact |",
        "|---|---|---:|---:|---:|---|---:|---|---:|---|---|",
    ]
    for r in pairs.to_dict("records"):
        lines.append(
            f"| {r['record']} | {r['arm']} | {r['generations']} | {r['pairs']} | {_pct(r['median_pct'])} | "
            f"[{r['median_lo_pct']:+.2f}, {r['median_hi_pct']:+.2f}] | {_pct(r['mean_pct'])} | "
            f"[{r['mean_lo_pct']:+.2f}, {r['mean_hi_pct']:+.2f}] | {_sem(r['sem_pct'])} | "
            f"{r['p5_pct']:+.2f} .. {r['p95_pct']:+.2f} % | {_exact(r['bit_exact'], r['compared'])} |"
        )
    return lines


def _gib(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def _whole_table(rows: list[dict]) -> list[str]:
    lines = [
        "| record | arm | repeats | vanilla loop s | arm / vanilla loop time | median | peak GiB, vanilla / arm | "
        "bit-exact |",
        "|---|---|---:|---|---|---:|---|---|",
    ]
    for r in rows:
        ratios = ", ".join(_pct(100 * (x - 1)) for x in r["ratios"])
        vanilla = ", ".join(f"{s:.3f}" for s in r["vanilla_s"])
        known = any(p is not None for pair in r["peaks"] for p in pair)
        peaks = ", ".join(f"{_gib(v)} / {_gib(a)}" for v, a in r["peaks"]) if known else "-"
        median = _pct(100 * (statistics.median(r["ratios"]) - 1))
        lines.append(
            f"| {r['record']} | {r['arm']} | {len(r['ratios'])} | {vanilla} | {ratios} | {median} | {peaks} | "
            f"{_exact(r['bit_exact'], r['compared'])} |"
        )
    return lines


def _phase_table(rows: list[dict]) -> list[str]:
    lines = [
        "| record | arm | repeat | loop peak | decode peak | held after the loop | cache | max-abs vs vanilla |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        max_abs = "-" if r["max_abs"] is None else f"{r['max_abs']:g}"
        lines.append(
            f"| {r['record']} | {r['arm']} | {r['repeat']} | {r['loop']:+,d} B | {r['decode']:+,d} B | "
            f"{r['held']:+,d} B | {r['cache']:,d} B | {max_abs} |"
        )
    return lines


def render(sources: list[Source], skipped: list[tuple[str, str]]) -> tuple[str, pd.DataFrame]:
    """(summary.md's text, summary.csv's rows) of the records found under one folder."""
    pairs = pair_rows(sources)
    lines = [HEADER, "", "# Step against neighbouring step", ""]
    lines += [
        "Arm / vanilla per step, neighbouring blocks of one generation (a block's first step left out; 95 % "
        f"bootstrap intervals, {RESAMPLES} resamples, seed {SEED}; bit-exact: generations whose final latents "
        "equal vanilla's, of those compared).",
        "",
        *(_pairs_table(pairs) if len(pairs) else ["No mixed generations."]),
    ]
    whole = whole_rows(sources)
    if whole:
        lines += ["", "## Whole runs", "", "Each against the vanilla run of the same repeat.", ""]
        lines += _whole_table(whole)
    phases = phase_rows(sources)
    if phases:
        lines += ["", "## Memory per phase", "", "Above vanilla's of the same repeat, less the arm's cache.", ""]
        lines += _phase_table(phases)
    lines += ["", "## Records", ""] + [f"- `{s.name}`" for s in sources]
    if skipped:
        lines += ["", "Not read:", ""] + [f"- `{name}`: {why}" for name, why in skipped]
    return "\n".join(lines) + "\n", pairs


def csv_text(pairs: pd.DataFrame) -> str:
    return pairs.to_csv(index=False, float_format="%.6g")


def write_summary(root: Path) -> tuple[str, pd.DataFrame]:
    """Rebuild ``root``'s summary.md and summary.csv from the records under it (atomically each)."""
    sources, skipped = read_sources(root)
    text, pairs = render(sources, skipped)
    write_text(root / SUMMARY_MD, text)
    write_text(root / SUMMARY_CSV, csv_text(pairs))
    return text, pairs
