"""A gap check run again on the same settings keeps its files when it measured the same values."""

from __future__ import annotations

import json

from bench.tolerances.gapcheck import same_measurement
from tests import ROOT

COMMITTED = ROOT / "results/cpu-intel-xeon-2c/tiny-scenes/0.24.0/gapcheck/gapcheck.json"


def test_only_when_and_from_which_checkout_may_differ(tmp_path):
    data = json.loads(COMMITTED.read_text())
    rerun = json.loads(json.dumps(data))
    rerun["provenance"].update(date_utc="2030-01-01T00:00:00Z", command="teacache-bench gapcheck ...",
                               git={"commit": "f" * 40, "dirty": True})  # fmt: skip
    assert same_measurement(COMMITTED, rerun)
    other = json.loads(json.dumps(data))
    other["runs"][0]["ssim"] = other["runs"][0]["ssim"] - 1e-9
    assert not same_measurement(COMMITTED, other)
    settings = json.loads(json.dumps(data))
    settings["provenance"]["versions"]["mlx"] = "0.99.0"
    assert not same_measurement(COMMITTED, settings)
    assert not same_measurement(tmp_path / "none.json", data)
    (tmp_path / "bad.json").write_text("{")
    assert not same_measurement(tmp_path / "bad.json", data)


def test_a_value_that_is_not_a_number_is_the_same_measurement_again(tmp_path):
    data = json.loads(COMMITTED.read_text())
    data["summary"]["unmeasured"] = float("nan")  # a NaN is never == itself as a float
    (tmp_path / "gapcheck.json").write_text(json.dumps(data))
    assert same_measurement(tmp_path / "gapcheck.json", data)


def test_a_live_path_is_compared_as_the_file_writes_it():
    """A rerun holds the tolerance module's absolute path; the file holds it portable (``./tests/...``)."""
    data = json.loads(COMMITTED.read_text())
    assert data["summary"]["tolerances"].startswith("./")
    live = json.loads(json.dumps(data))
    live["summary"]["tolerances"] = str(ROOT / data["summary"]["tolerances"][2:])
    assert same_measurement(COMMITTED, live)
