"""The tests mirror the packages: ``tests/teacache``, ``tests/calib``, ``tests/bench``; end-to-end journeys and
the rebuild of committed results at the top."""

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent  # the project's root: results/, notebooks/, README.md
