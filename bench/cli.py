"""``teacache-bench``: sweeps, gate replay, reports, tolerances, gap checks, benchmarks."""

from __future__ import annotations

import sys

from calib.run.dispatch import dispatch

SUBCOMMANDS = {
    "campaign": "bench.campaign",
    "compare-hardware": "bench.compare.command",
    "sweep": "bench.sweep.command",
    "replay": "bench.sweep.replay",
    "report": "bench.report.command",
    "decision-check": "bench.studies.decision_check",
    "criteria": "bench.studies.criteria",
    "across-models": "bench.studies.across_models",
    "tolerances": "bench.tolerances.derive",
    "gapcheck": "bench.tolerances.gapcheck",
    "overhead": "bench.timing.overhead",
    "blas": "bench.timing.blas",
    "adherence": "bench.quality.adherence",
    "fullsize": "bench.timing.fullsize",
    "step-cost": "bench.timing.step_cost",
    "peer-table": "bench.peer.table",
    "dynamics": "bench.report.dynamics",
    "open-card": "bench.quality.open_card",
}


def main(argv: list[str] | None = None) -> int:
    return dispatch("teacache-bench", SUBCOMMANDS, argv)


if __name__ == "__main__":
    sys.exit(main())
