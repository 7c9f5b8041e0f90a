"""teacache-calib drift end to end: --save a folder, compare --against it with the no-op oracles run."""

from __future__ import annotations

import json

import pytest

from calib.cli import main as calib_main
from calib.drift import verdict

pytestmark = pytest.mark.slow


def test_save_then_against_on_the_same_release_moves_nothing_and_the_oracles_hold(tmp_path):
    saved, out = tmp_path / "before", tmp_path / "after"
    calib_main(["drift", "--out", str(tmp_path / "first"), "--save", str(saved), "--floor-processes", "2"])
    floor = json.loads((saved / "noise_floor.json").read_text())
    assert len(floor["processes"]) == 2 and set(floor["floor"]) == {"float32", "bfloat16"}
    status = calib_main(["drift", "--out", str(out), "--against", str(saved), "--oracles"])
    report = json.loads((out / "verdict.json").read_text())
    assert report["baseline"].endswith("before")  # written portably ($TMPDIR/...)
    assert {r["status"] for r in report["verdicts"]} == {verdict.UNCHANGED}
    assert all(r["oracles"]["holds"] for r in report["verdicts"])
    assert {c["name"] for r in report["verdicts"] for c in r["oracles"]["checks"]} == {
        "threshold-0", "proxy-never-skipping", "restore",
    }  # fmt: skip
    assert status == 0
