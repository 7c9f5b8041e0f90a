"""The release report is derived: rebuilt from the committed drift outputs, it is the committed report."""

from __future__ import annotations

import json
import shutil

from calib.drift import report
from tests import ROOT

FOLDER = ROOT / "results" / "releases" / "mflux-0.21-0.24"


def test_the_release_report_rebuilds_from_the_drift_outputs(tmp_path):
    for name in ("notes.md", "mlx-0.32.4-tests.txt"):
        shutil.copy(FOLDER / name, tmp_path / name)
    shutil.copytree(FOLDER / "h200", tmp_path / "h200")
    runs = sorted(str(p) for p in (FOLDER / "drift").iterdir())
    assert report.main([*runs, "--out", str(tmp_path)]) == 0
    assert (tmp_path / "report.md").read_text() == (FOLDER / "report.md").read_text()
    assert report.FULLSIZE_SECTION in (tmp_path / "report.md").read_text()


def test_the_report_states_the_verdicts_of_the_done_when():
    """0.21 -> 0.22: FLUX.1 and Qwen-Image moved in both dtypes, Z-Image in bfloat16 only, FLUX.2 unchanged;
    0.22, 0.23 and 0.24 unchanged among themselves."""
    rows = json.loads((FOLDER / "summary.json").read_text())["transitions"]
    moved = {(r["from"], r["family"]): (r["float32"]["moved"], r["bfloat16"]["moved"]) for r in rows}
    assert moved[("0.21.0", "FLUX.1")] == (True, True)
    assert moved[("0.21.0", "Qwen-Image")] == (True, True)
    assert moved[("0.21.0", "Z-Image")] == (False, True)
    assert moved[("0.21.0", "FLUX.2")] == (False, False)
    assert all(m == (False, False) for (start, _), m in moved.items() if start in ("0.22.0", "0.23.0"))
    assert all(r["oracles"] == "hold" for r in rows)


def test_at_full_size_the_h200_comparisons_say_what_the_cpu_report_says():
    """mflux 0.21.0 -> 0.24.0 at full size in bfloat16: FLUX.1, Qwen-Image and Z-Image moved, FLUX.2 identical."""
    verdicts = {}
    for path in sorted((FOLDER / "h200").glob("*/comparison.md")):
        for line in path.read_text().splitlines():
            cells = [c.strip() for c in line.strip("|").split("|")]
            if line.startswith("| random-"):
                verdicts[cells[0]] = cells[2]
    assert verdicts == {
        "random-flux1-dev": "**moved**",
        "random-flux2-klein-4b": "bit-identical",
        "random-qwen-image": "**moved**",
        "random-z-image": "**moved**",
    }


def test_a_folder_without_a_verdict_is_refused_in_one_line(tmp_path, capsys):
    assert report.main([str(tmp_path), "--out", str(tmp_path / "out")]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists()


EFFECT = ROOT / "results" / "releases" / "effect-cpu-amd-epyc-2c"


def test_the_effect_report_rebuilds_from_its_drift_outputs(tmp_path):
    from calib.drift import effect_report

    shutil.copy(EFFECT / "notes.md", tmp_path / "notes.md")
    runs = sorted(str(p) for p in (EFFECT / "drift").iterdir())
    assert effect_report.main([*runs, "--out", str(tmp_path)]) == 0
    assert (tmp_path / "report.md").read_text() == (EFFECT / "report.md").read_text()


def test_the_effect_report_says_no_gate_decision_moved_between_the_releases():
    """mflux 0.21 -> 0.24 and MLX 0.32.2 -> 0.32.4 on this CPU: the bits of FLUX.1, Qwen-Image and Z-Image move at
    0.22.0, yet no effect model's gate changes a decision beyond its tolerance at any step."""
    rows = json.loads((EFFECT / "summary.json").read_text())["rows"]
    judged = [r for r in rows if r["model"] is not None]
    assert {r["family"] for r in judged} == {"FLUX.1", "FLUX.2", "Qwen-Image", "Z-Image"}
    assert all("**" not in r["decisions"] for r in judged)
    assert not any("refit-recommended" in r["statuses"] or "integration-broken" in r["statuses"] for r in judged)
