"""The report's image and difference grids (from the sweep's images/) and its threshold for a speedup target."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import PIL.Image
import pytest

from bench.report import command as report
from bench.report import grid
from teacache.io import write_parquet
from tests.bench.report.conftest import PLAN, STEPS, make_sweep


@pytest.fixture(scope="module")
def sweep_dir(tmp_path_factory):
    return make_sweep(tmp_path_factory.mktemp("sweep") / "sweep")


@pytest.fixture
def no_png(monkeypatch):
    monkeypatch.setattr(report.plots, "figure_png", lambda fig: b"\x89PNG stub")


def with_images(src, dst, drop: str | None = None):
    """A copy of the sweep whose runs point at images it saved, one per run (``drop``: a run left without one)."""
    dst.mkdir(parents=True)
    for name in ("decisions.parquet", "provenance.json"):
        (dst / name).write_bytes((src / name).read_bytes())
    runs = pd.read_parquet(src / "runs.parquet")
    runs["image_path"] = "images/" + runs["run_id"] + ".png"
    (dst / "images").mkdir()
    rng = np.random.default_rng(0)
    for run_id in runs["run_id"]:
        if run_id != drop:
            pixels = rng.integers(0, 256, (8, 8, 3), dtype=np.uint8)
            PIL.Image.fromarray(pixels).save(dst / "images" / f"{run_id}.png")
    write_parquet(dst / "runs.parquet", runs)
    return dst


def test_a_sweep_with_images_gets_both_grids_linked_from_report_md(sweep_dir, tmp_path):
    sweep = with_images(sweep_dir, tmp_path / "sweep")
    summary = report.build_report(sweep, tmp_path / "report")
    text = (tmp_path / "report" / "report.md").read_text()
    for name in ("image_grid.png", "difference_grid.png"):
        assert f"]({name})" in text and name in summary["files"]
        with PIL.Image.open(tmp_path / "report" / name) as image:
            assert min(image.size) > 100  # drawn, not a stub


def test_the_grid_shows_each_prompt_once_with_its_lowest_seed_and_every_threshold(sweep_dir, tmp_path):
    sweep = with_images(sweep_dir, tmp_path / "sweep")
    pairs, thresholds, cells = grid.grid_cells(pd.read_parquet(sweep / "runs.parquet"), sweep)
    assert pairs == ["p0-s1", "p1-s1", "p2-s1"] and thresholds == sorted(PLAN)
    assert cells[("p1-s1", 0.5)]["run_id"] == "p1-s1-t0.5" and cells[("p1-s1", None)]["kind"] == "vanilla"


def test_a_missing_image_leaves_the_grids_out_with_a_note_and_no_images_folder_adds_nothing(
    sweep_dir, tmp_path, no_png
):
    sweep = with_images(sweep_dir, tmp_path / "sweep", drop="p0-s1-t0.3")
    report.build_report(sweep, tmp_path / "report")
    assert "image_grid.png omitted: images/ lacks" in (tmp_path / "report" / "report.md").read_text()
    report.build_report(sweep_dir, tmp_path / "plain")
    assert "grid" not in (tmp_path / "plain" / "report.md").read_text()


def test_a_speedup_target_names_the_swept_threshold_nearest_n_over_s_and_where_it_came_from(
    sweep_dir, tmp_path, no_png
):
    plain = report.build_report(sweep_dir, tmp_path / "plain")
    computed = STEPS - next(r["skipped"] for r in plain["thresholds"] if r["threshold"] == 0.5)
    summary = report.build_report(sweep_dir, tmp_path / "r", target_speedup=STEPS / computed)
    assert summary["target_speedup"]["threshold"] == 0.5 and summary["target_speedup"]["computed"] == computed
    text = (tmp_path / "r" / "report.md").read_text()
    assert f"**Threshold for {STEPS / computed:g}x: 0.5**" in text and "median computed steps" in text
    recorded = json.loads((tmp_path / "r" / "summary.json").read_text())
    assert recorded["target_speedup"]["speedup"] == STEPS / computed


def test_an_unreachable_target_is_stated_with_the_nearest_and_no_speedup_is_refused(sweep_dir, tmp_path, capsys):
    summary = report.build_report(sweep_dir, tmp_path / "r", target_speedup=5.0)
    assert summary["target_speedup"]["threshold"] is None
    assert "nearest: --target-speedup" in (tmp_path / "r" / "report.md").read_text()
    assert report.main([str(sweep_dir), "--out", str(tmp_path / "bad"), "--target-speedup", "1"]) == 2
    assert "--target-speedup 1: expected a number > 1" in capsys.readouterr().err
    assert not (tmp_path / "bad").exists()
