"""compare.md and speedup_vs_threshold.png drawn from compare-hardware's result, in memory.

compare.md is ``bench/report/templates/compare.md.j2`` filled from the result dict (``bench.compare.compute``).
"""

from __future__ import annotations

import numpy as np

from bench.report import markdown

PROVENANCE_FIELDS = (
    ("backend", "backend"),
    ("device_name", "device"),
    ("os", "OS"),
    ("mlx", "mlx"),
    ("mflux", "mflux"),
    ("python", "python"),
    ("numpy", "numpy"),
    ("date_utc", "sweep date (UTC)"),
    ("git_commit", "git commit"),
    ("steps", "steps"),
    ("resolution", "resolution"),
    ("guidance", "guidance"),
    ("sweep_prompts_x_seeds", "sweep prompts x seeds"),
    ("sweep_pairs_measured", "sweep pairs measured"),
    ("stages", "campaign stages present"),
    ("repeats", "timed repeats"),
    ("default_threshold", "variant default threshold"),
)


def speed_rows(v: dict) -> list[tuple[float, list[str]]]:
    """The speedup table of one variant: every threshold either side swept, A's and B's cells ('-' where unswept)."""
    by_t: dict[float, dict] = {}
    for side in ("a", "b"):
        for r in v["speedups"][side]:
            by_t.setdefault(round(r["threshold"], 12), {})[side] = r
    rows = []
    for t in sorted(by_t):
        cells: list[str] = []
        for side in ("a", "b"):
            r = by_t[t].get(side)
            if r is None:
                cells += ["-", "-", "-"]
            else:
                ratio = markdown.sig(r["ratio_median"], 3)
                cells += [f"{markdown.sig(r['speedup_median'], 3)}x", f"{markdown.sig(r['ideal_median'], 3)}x", ratio]
        rows.append((t, cells))
    return rows


def render_markdown(result: dict) -> str:
    """compare.md: per variant, provenance, speed, fits, schedules, quality, speedups and tolerance constants."""
    text = markdown.render(
        "compare.md.j2",
        result=result,
        la=result["a"]["label"],
        lb=result["b"]["label"],
        provenance_fields=PROVENANCE_FIELDS,
        speed_rows={name: speed_rows(v) for name, v in result["variants"].items() if "speedups" in v},
    )
    return text.rstrip() + "\n"


def render_plot(result: dict) -> bytes | None:
    """Median speedup (p5-p95 bars) and the ideal bound against threshold, a panel per variant; None if no sweeps."""
    variants = [(name, v) for name, v in result["variants"].items() if "speedups" in v]
    if not variants:
        return None
    # heavy (matplotlib, pandas, scipy): loaded after the arguments are checked
    from matplotlib.figure import Figure

    from bench.report.plots import figure_png

    fig = Figure(figsize=(5.0 * len(variants), 4.0), layout="constrained")
    axes = np.atleast_1d(fig.subplots(1, len(variants)))
    for ax, (name, v) in zip(axes, variants, strict=True):
        for side, color in (("a", "tab:blue"), ("b", "tab:orange")):
            rows = v["speedups"][side]
            t = [r["threshold"] for r in rows]
            med = np.array([r["speedup_median"] for r in rows])
            err = np.vstack([med - [r["speedup_p5"] for r in rows], [r["speedup_p95"] for r in rows] - med]).clip(0)
            label = result[side]["label"]
            ax.errorbar(t, med, yerr=err, marker="o", color=color, capsize=3, label=f"{label} (p5-p95)")
            ax.plot(t, [r["ideal_median"] for r in rows], ls="--", color=color, alpha=0.7, label=f"{label} ideal")
        ax.axhline(1.0, color="grey", lw=0.8)
        ax.set_xlabel("threshold")
        ax.set_ylabel("median speedup over vanilla")
        ax.set_title(name, fontsize=10)
        ax.legend(fontsize=7)
    return figure_png(fig)
