"""A gap check run again on the same settings keeps its files when it measured the same values."""

from __future__ import annotations

import json

from bench.tolerances.gapcheck import same_measurement
from tests import ROOT

COMMITTED = ROOT / "results/cpu-amd-epyc-2c/tiny-open-flux1/0.24.0/gapcheck/gapcheck.json"


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


def _replayed(monkeypatch, path, change=None):
    """gapcheck's main on a committed gap check's runs instead of running a model."""
    import pandas as pd

    from bench.tolerances import gapcheck

    data = json.loads(path.read_text())
    frame = pd.DataFrame(data["runs"])
    if change is not None:
        frame = change(frame)
    result = {"variant": data["summary"]["variant"], "tolerances": data["summary"]["tolerances"], "frame": frame,
              "settings": data["provenance"].get("settings") or {}}  # fmt: skip
    monkeypatch.setattr(gapcheck, "run_gapcheck", lambda args: result)
    return gapcheck


def test_a_finding_is_exit_1_with_its_report_written_and_a_clean_check_is_exit_0(monkeypatch, tmp_path, capsys):
    clean = ROOT / "results/cpu-amd-epyc-2c/tiny-shapes/0.24.0/gapcheck/gapcheck.json"
    gapcheck = _replayed(monkeypatch, clean)
    assert gapcheck.main(["--model", "tiny-shapes", "--out", str(tmp_path / "clean")]) == 0
    assert "finding:" not in capsys.readouterr().out

    def skip_band_catches_nothing(frame):
        return frame.assign(ok_skip_band=True)

    gapcheck = _replayed(monkeypatch, clean, skip_band_catches_nothing)
    out = tmp_path / "flagged"
    assert gapcheck.main(["--model", "tiny-shapes", "--out", str(out)]) == gapcheck.EXIT_FINDING == 1
    said = capsys.readouterr().out
    assert "finding: skip_band catches none of the mutants it exists for" in said
    assert (out / "gapcheck.md").is_file() and (out / "gapcheck.json").is_file()  # the report says what was found

    uncaught = ROOT / "results/cpu-amd-epyc-2c/tiny-flux1/0.24.0/gapcheck/gapcheck.json"
    gapcheck = _replayed(monkeypatch, uncaught)
    assert gapcheck.main(["--model", "tiny-flux1", "--out", str(tmp_path / "uncaught")]) == 1
    assert "finding: no tolerance catches late-decision" in capsys.readouterr().out


def test_the_exit_status_is_in_the_help(capsys):
    from bench.tolerances import gapcheck

    text = gapcheck.setup_arg_parser().format_help()
    assert "exit status" in text and "1 when one is not" in " ".join(text.split())
