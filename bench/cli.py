"""``teacache-bench``: sweeps, gate replay, reports, tolerances, gap checks, benchmarks."""

from __future__ import annotations

import sys

from calib.dispatch import dispatch

SUBCOMMANDS = {
    "campaign": "bench.campaign",
    "compare-hardware": "bench.compare_hardware",
    "sweep": "bench.sweep",
    "replay": "bench.replay",
    "report": "bench.report",
    "tolerances": "bench.tolerances",
    "gapcheck": "bench.gapcheck",
    "overhead": "bench.overhead",
    "blas": "bench.blas",
    "adherence": "bench.adherence",
    "fullsize": "bench.fullsize",
    "peer-table": "bench.peer_table",
}


def main(argv: list[str] | None = None) -> int:
    return dispatch("teacache-bench", SUBCOMMANDS, argv)


if __name__ == "__main__":
    sys.exit(main())
