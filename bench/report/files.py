"""What ``teacache-bench report`` writes into its folder, and how the output rule (:mod:`teacache.outputs`)
tells a folder it wrote. Light to import: a campaign checks its report folder with it before plotting loads."""

from __future__ import annotations

from pathlib import Path

from teacache.outputs import Writes

PROG = "teacache-bench report"
TITLE = "# TeaCache sweep: "  # the first line of every report.md this command writes
# The baselines section's files (a sweep with --baselines or --compare-coefficients; bench.report.baselines)
BASELINES_OUTPUTS = frozenset(
    {
        "baselines_front.png",
        "baselines_front_ideal.png",
        "rescale_fronts.png",
        "rescale_fronts_ideal.png",
        "baselines_comparison.csv",
        "baselines_points.csv",
        "isolation.csv",
    }
)
OUTPUTS = (
    frozenset(
        {
            "report.md",
            "summary.json",
            "distribution.csv",
            "predicted_vs_actual.csv",
            "speedup_vs_ssim.png",
            "speedup_vs_cosine.png",
            "skips_vs_threshold.png",
            "x_traces.png",
            "skip_heatmap.png",
            "image_grid.png",
            "difference_grid.png",
        }
    )
    | BASELINES_OUTPUTS
)


def is_report(path: Path) -> bool:
    """``path`` is a report.md this command wrote (its first line)."""
    try:
        with path.open(encoding="utf-8") as handle:
            return handle.readline().startswith(TITLE)
    except (OSError, UnicodeDecodeError):
        return False


# its report files, in a folder of its own (a report.md it wrote marks it; notes beside it are kept); a report is
# derived, so rebuilding the committed ones under results/ (after a change to what a report shows) is its job too
WRITES = Writes(PROG, names=tuple(sorted(OUTPUTS)), marker="report.md", is_own=is_report, regenerates=("results",))
