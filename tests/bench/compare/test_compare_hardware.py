"""`teacache-bench compare-hardware` on two synthetic hardware folders: tables, differing constants, bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.compare import command as compare_hardware
from tests.bench.compare.conftest import make_campaign


@pytest.fixture()
def two_hardware(tmp_path):
    a, b = make_campaign(tmp_path, "cpu-test-2c"), make_campaign(tmp_path, "cuda-test-gpu")
    make_campaign(tmp_path, "cpu-test-2c", variant="tiny-flux1")  # only on A: listed, not compared
    return tmp_path / "cpu-test-2c", tmp_path / "cuda-test-gpu", a, b


def run(a: Path, b: Path, out: Path, *extra: str) -> tuple[dict, str]:
    assert compare_hardware.main([str(a), str(b), "--out", str(out), *extra]) == 0
    return json.loads((out / "compare.json").read_text()), (out / "compare.md").read_text()


def test_tables_side_by_side(two_hardware, tmp_path):
    hw_a, hw_b, _, _ = two_hardware
    data, md = run(hw_a, hw_b, tmp_path / "out", "--no-plot")
    assert data["a"]["label"] == "cpu-test-2c" and data["b"]["label"] == "cuda-test-gpu"
    assert data["only_in_a"] == ["tiny-flux1"] and list(data["variants"]) == ["tiny-shapes"]
    v = data["variants"]["tiny-shapes"]
    assert v["thresholds"]["common"] == [0.0, 0.1]
    sched = {r["threshold"]: r for r in v["schedules"]}
    assert sched[0.1]["runs_compared"] == 4 and sched[0.1]["identical_schedules"] == 3
    assert sched[0.1]["identical_fraction"] == pytest.approx(0.75)
    assert sched[0.1]["skipped_median_a"] == 2 and sched[0.0]["identical_fraction"] == 1.0
    quality = {r["threshold"]: r for r in v["quality"]}
    assert quality[0.1]["ssim_median_a"] == pytest.approx(0.99) and quality[0.1]["ssim_p5_b"] == pytest.approx(0.98)
    assert quality[0.0]["psnr_median_a"] == "inf"  # identical images: infinite PSNR, kept as such
    assert v["speed"]["per_step_ms_a"] == pytest.approx(50.0) and v["speed"]["per_step_ms_b"] == pytest.approx(5.0)
    # speedups: each side at its own thresholds, against N/(N-k)
    speed_b = {r["threshold"]: r for r in v["speedups"]["b"]}
    assert speed_b[0.3]["ideal_median"] == pytest.approx(10 / 6) and speed_b[0.3]["ratio_median"] == pytest.approx(0.9)
    rec_a, rec_b = v["speed"]["recommended_a"], v["speed"]["recommended_b"]
    assert rec_a["threshold"] == 0.2 and rec_b["threshold"] == 0.1  # B's 0.3 has SSIM 0.9 < 0.95
    assert v["fit"]["a"]["cv_r2"] == 0.9 and v["fit"]["b"]["cv_r2"] == 0.8
    assert v["provenance"]["a"]["device_name"] == "Test CPU" and v["provenance"]["b"]["backend"] == "cuda"
    assert v["provenance"]["b"]["sweep_pairs_measured"] == "4 of 4"  # an interrupted sweep would show "n of 4"
    assert "| campaign stages present | fit, sweep, tolerances.py | fit, sweep, tolerances.py |" in md
    headings = ("Provenance", "Speed", "Fitted rescale function", "Skip schedules", "Quality against vanilla",
                "Speedup and the ideal bound", "Tolerance constants")  # fmt: skip
    for heading in headings:
        assert f"### {heading}" in md
    assert "| 0.1 | 2 | 2 | 4 | 3 (75%) |" in md
    assert "| per-step time, vanilla loop (median over pairs, ms) | 50 | 5 | 10 |" in md
    assert "Test CPU" in md and "Test GPU" in md and "Only in A: tiny-flux1" in md
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["compare.json", "compare.md"]


def test_tolerance_constants_that_differ(two_hardware, tmp_path):
    hw_a, hw_b, _, _ = two_hardware
    data, md = run(hw_a, hw_b, tmp_path / "out", "--no-plot")
    rows = {r["constant"]: r for r in data["variants"]["tiny-shapes"]["tolerances"]["constants"]}
    floor = rows["TINY_SHAPES_SSIM_FLOOR"]
    assert not floor["same"] and floor["difference"] == pytest.approx(-0.05)
    assert floor["relative"] == pytest.approx(-0.05 / 0.9)
    band = rows["TINY_SHAPES_SKIP_BAND"]
    assert not band["same"] and band["difference"] == [0.0, 1.0]
    assert rows["TINY_SHAPES_PROXY_NOOP"]["note"] == "only in A"
    assert rows["TINY_SHAPES_PROXY_NOOP_MIN_COSINE"]["note"] == "only in B"
    assert rows["TINY_SHAPES_SETTINGS.steps"]["same"] and rows["TINY_SHAPES_SETTINGS.threshold"]["same"]
    assert not any(name.endswith(".rescale") for name in rows)  # the fit table compares the rescale function
    assert "| `TINY_SHAPES_SSIM_FLOOR` | 0.9 | 0.85 | -0.05 | differs (-5.56%) |" in md
    assert "4 of 6 constants differ." in md


def test_campaign_folders_and_plot(two_hardware, tmp_path):
    _, _, camp_a, camp_b = two_hardware
    data, _ = run(camp_a, camp_b, tmp_path / "out")
    assert (data["a"]["label"], data["b"]["label"]) == ("cpu-test-2c", "cuda-test-gpu")
    assert data["only_in_a"] == [] and "speedup_vs_threshold.png" in data["files"]
    assert (tmp_path / "out" / "speedup_vs_threshold.png").read_bytes()[:4] == b"\x89PNG"


@pytest.mark.parametrize("case", ["no-campaign", "no-common-variant", "missing"])
def test_bad_input_exits_2_and_writes_nothing(two_hardware, tmp_path, capsys, case):
    hw_a, _, _, _ = two_hardware
    if case == "no-campaign":
        other = tmp_path / "empty"
        (other / "something").mkdir(parents=True)
    elif case == "no-common-variant":
        other = make_campaign(tmp_path / "x", "cuda-test-gpu", variant="tiny-flux2").parents[1]
    else:
        other = tmp_path / "nowhere"
    out = tmp_path / "out"
    assert compare_hardware.main([str(hw_a), str(other), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("teacache-bench compare-hardware: ") and "\n" not in err
    assert {"no-campaign": "holds no campaign", "no-common-variant": "no variant in both",
            "missing": "is not a folder"}[case] in err  # fmt: skip
    assert not out.exists()


@pytest.mark.parametrize("floor", ["nan", "1.5", "-1"])
def test_a_floor_outside_0_1_is_refused_in_one_line(two_hardware, tmp_path, capsys, floor):
    hw_a, hw_b, _, _ = two_hardware
    out = tmp_path / "out"
    assert compare_hardware.main([str(hw_a), str(hw_b), "--out", str(out), "--ssim-floor", floor]) == 2
    err = capsys.readouterr().err.strip()
    assert (
        err == f"teacache-bench compare-hardware: --ssim-floor {float(floor)!r}: expected a number from 0 to 1 "
        "(a floor on p5 ssim)"
    )
    assert not out.exists()


def test_measured_cases_are_not_compared_as_tolerance_constants(two_hardware, tmp_path):
    hw_a, hw_b, camp_a, camp_b = two_hardware
    for camp, seeds in ((camp_a, (0, 1)), (camp_b, (0,))):
        cases = tuple(("p0", "a red fox", s) for s in seeds)
        path = camp / "tolerances.py"
        path.write_text(path.read_text() + f"TINY_SHAPES_CASES = {cases!r}\n")
    data, md = run(hw_a, hw_b, tmp_path / "out", "--no-plot")
    rows = {r["constant"] for r in data["variants"]["tiny-shapes"]["tolerances"]["constants"]}
    assert "TINY_SHAPES_CASES" not in rows and "TINY_SHAPES_SSIM_FLOOR" in rows and "CASES" not in md


def test_a_folder_compared_with_itself_is_refused_in_one_line(two_hardware, tmp_path, capsys):
    hw_a, _, _, _ = two_hardware
    out = tmp_path / "out"
    assert compare_hardware.main([str(hw_a), str(hw_a / "."), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("teacache-bench compare-hardware: B: ") and "is A itself" in err
    assert not out.exists()
