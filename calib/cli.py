"""``teacache-calib``: record traces, fit rescale functions, emit coefficient modules."""

from __future__ import annotations

import sys

from calib.run.dispatch import dispatch

SUBCOMMANDS = {
    "record": "calib.record",
    "fit": "calib.fit.command",
    "safety-costs": "calib.fit.safety_costs",
    "emit": "calib.emit",
    "drift": "calib.drift.command",
    "drift-code": "calib.drift.code",
    "drift-numbers": "calib.drift.numbers",
    "drift-noise": "calib.drift.noise",
    "drift-compare": "calib.drift.compare",
    "drift-report": "calib.drift.report",
    "drift-effect-report": "calib.drift.effect_report",
}


def main(argv: list[str] | None = None) -> int:
    return dispatch("teacache-calib", SUBCOMMANDS, argv)


if __name__ == "__main__":
    sys.exit(main())
