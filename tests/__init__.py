"""The tests mirror the packages: ``tests/teacache``, ``tests/calib``, ``tests/bench``; end-to-end journeys and
the rebuild of committed results at the top."""

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent  # the project's root: results/, notebooks/, README.md


def committed(pattern: str, root: Path = ROOT) -> list[Path]:
    """The files git tracks in ``root`` whose path matches ``pattern`` (a glob such as ``results/**/runs.parquet``):
    what a demo, a journey or a user writes beside them (ignored, or not yet added) is not what a test of committed
    results checks. Without git, every match outside results/demo."""
    try:
        listed = subprocess.run(
            ["git", "-C", str(root), "ls-files", "-z", "--", f":(glob){pattern}"], capture_output=True, check=True
        ).stdout.decode()
    except (OSError, subprocess.CalledProcessError):
        return sorted(p for p in root.glob(pattern) if "demo" not in p.relative_to(root).parts)
    return sorted(root / name for name in listed.split("\0") if name and (root / name).is_file())
