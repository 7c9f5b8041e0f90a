"""``teacache-bench``: sweeps, gate replay, reports, tolerances.

Each subcommand is a module of this package with ``setup_arg_parser()`` and ``main(argv)``.
"""

from __future__ import annotations

import importlib
import os
import sys

# mflux draws a tqdm bar per generation; our commands show one progress bar of their own.
os.environ.setdefault("TQDM_DISABLE", "1")

SUBCOMMANDS = {
    "campaign": "bench.campaign",
    "sweep": "bench.sweep",
    "replay": "bench.replay",
    "report": "bench.report",
    "tolerances": "bench.tolerances",
    "gapcheck": "bench.gapcheck",
    "overhead": "bench.overhead",
    "blas": "bench.blas",
    "adherence": "bench.adherence",
}


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help") or argv[0] not in SUBCOMMANDS:
        names = ", ".join(SUBCOMMANDS)
        print(f"usage: teacache-bench {{{names}}} [options]   (teacache-bench <command> --help)")
        if argv and argv[0] not in ("-h", "--help"):
            print(f"teacache-bench: unknown command {argv[0]!r}; expected one of: {names}", file=sys.stderr)
            return 2
        return 0
    module = importlib.import_module(SUBCOMMANDS[argv[0]])
    return module.main(argv[1:]) or 0


if __name__ == "__main__":
    sys.exit(main())
