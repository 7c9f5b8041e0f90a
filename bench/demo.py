"""``make demo``: the main job on the embedded trained model, start to finish, in minutes on a CPU.

Records traces, fits and selects a rescale function, sweeps thresholds against paired vanilla runs
and writes the report with its speed/quality curves, into ``results/demo/`` (not committed; the
committed campaigns under ``results/<hardware>/`` are made with ``teacache-bench campaign``).
"""

from __future__ import annotations

import os
import sys

os.environ.setdefault("TQDM_DISABLE", "1")

from bench.campaign import PROJECT_ROOT  # noqa: E402
from bench.campaign import main as campaign_main
from calib.run.command import run_command
from calib.run.dispatch import check_supported_mflux
from teacache import variants

PROG = "teacache-demo"  # what `make demo` runs: every message names it, not the campaign behind it
# One timed repeat per arm (the committed campaigns time two): the paired speedups keep their spread across
# prompts, and the demo stays within minutes on a 2-core CPU with the default model's CFG (two passes a step).
DEMO_REPEATS = "1"


def main(argv: list[str] | None = None) -> int:
    return run_command(PROG, _main, list(sys.argv[1:] if argv is None else argv))


def _given(argv: list[str], flag: str) -> bool:
    """Whether the user passed ``flag`` (``--flag VALUE`` or ``--flag=VALUE``): the demo's default then stays out."""
    return any(a == flag or a.startswith(f"{flag}=") for a in argv)


def _main(argv: list[str]) -> int:
    check_supported_mflux()
    if not _given(argv, "--out"):
        argv += ["--out", str(PROJECT_ROOT / "results" / "demo" / variants.default_model())]
    if not _given(argv, "--repeats"):
        argv += ["--repeats", DEMO_REPEATS]
    return campaign_main(argv, prog=PROG)


if __name__ == "__main__":
    sys.exit(main())
