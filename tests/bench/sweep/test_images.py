"""A sweep's saved images: threshold 0, a bit-exact no-op, gets no copy of its pair's vanilla image, and every reader
takes the vanilla one for it; a threshold-0 run that is not exact (a bug) keeps its own, and the report shows it."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

import calib.run.generation
from bench.report import grid, plots
from bench.sweep import baselines, records
from bench.sweep.files import LAYOUT
from bench.sweep.images import image_file, shares_vanilla_image
from bench.sweep.pair import save_run_image
from tests.conftest import patch_everywhere, sweep

IMAGES = ("--save-images",)


@pytest.fixture
def fox(tmp_path) -> Path:
    """One pair is enough: the thresholds 0 and 0.5 of fox-s0."""
    path = tmp_path / "fox.json"
    path.write_text(json.dumps({"fox": "a red fox in the snow"}))
    return path


def names(folder: Path) -> list[str]:
    return sorted(p.name for p in (folder / "images").iterdir())


def drawn(folder: Path) -> tuple[bytes, bytes]:
    """The report's image and difference grids of a sweep folder, as the PNG bytes it writes."""
    runs = records.read_sweep(folder).runs
    return tuple(plots.figure_png(draw(runs, folder, "grid")) for draw in (grid.image_grid, grid.difference_grid))


def test_threshold_0_writes_no_copy_of_vanilla_and_the_grids_are_those_drawn_with_it(
    tmp_path, fox, shared_model, monkeypatch
):
    out = tmp_path / "sweep"
    assert sweep(out, fox, *IMAGES) == 0
    assert names(out) == ["fox-s0-t0.5.png", "fox-s0-vanilla.png"]
    runs = records.read_sweep(out).runs.set_index("run_id")
    zero, vanilla = runs.loc["fox-s0-t0"], runs.loc["fox-s0-vanilla"]
    assert zero["image_path"] == "images/fox-s0-t0.png" and zero["max_abs"] == 0.0  # the row names its own file
    assert shares_vanilla_image(zero) and image_file(out, zero, vanilla) == out / "images" / "fox-s0-vanilla.png"
    assert LAYOUT.files(out, out, "fox-s0")[:-1] == [Path("images/fox-s0-t0.5.png"), Path("images/fox-s0-vanilla.png")]

    with_copy = tmp_path / "with-copy"  # what the sweep wrote before: the copy, byte for byte
    shutil.copytree(out, with_copy)
    shutil.copy(out / "images" / "fox-s0-vanilla.png", with_copy / "images" / "fox-s0-t0.png")
    assert drawn(out) == drawn(with_copy)

    def no_generation(*args, **kwargs):
        raise AssertionError("a finished pair was measured again")

    patch_everywhere(monkeypatch, calib.run.generation, "generate", no_generation)
    runs_bytes = (out / "runs.parquet").read_bytes()
    assert sweep(out, fox, *IMAGES) == 0  # the pair is complete without the copy: nothing is measured again
    assert (out / "runs.parquet").read_bytes() == runs_bytes and names(out) == ["fox-s0-t0.5.png", "fox-s0-vanilla.png"]


def test_a_threshold_0_run_that_is_not_exact_keeps_its_image_and_the_report_shows_it(
    tmp_path, fox, shared_model, monkeypatch
):
    real = baselines.run_arm

    def broken(model, arm, *args):  # threshold 0 moves the output: the bug the noop check exists for
        result = real(model, arm, *args)
        if arm.name != baselines.TEACACHE or arm.gate.rel_l1_thresh != 0.0:
            return result
        gen = result.generation
        image = gen.image.copy()
        image[0, 0] = 255 - image[0, 0]
        moved = dataclasses.replace(gen, latents=gen.latents + 0.01, image=image)
        return dataclasses.replace(result, generation=moved)

    monkeypatch.setattr(baselines, "run_arm", broken)
    out = tmp_path / "sweep"
    assert sweep(out, fox, *IMAGES) == 0
    assert names(out) == ["fox-s0-t0.5.png", "fox-s0-t0.png", "fox-s0-vanilla.png"]
    runs = records.read_sweep(out).runs.set_index("run_id")
    assert runs.loc["fox-s0-t0", "max_abs"] > 0 and not shares_vanilla_image(runs.loc["fox-s0-t0"])
    _pairs, _thresholds, cells = grid.grid_cells(records.read_sweep(out).runs, out)
    assert cells[("fox-s0", 0.0)]["image_file"] == out / "images" / "fox-s0-t0.png"  # its own image, not vanilla's
    assert grid.difference_grid(records.read_sweep(out).runs, out, "grid") is not None

    (out / "images" / "fox-s0-t0.png").unlink()  # lost: vanilla's does not stand in for a run that differs from it
    assert grid.grid_cells(records.read_sweep(out).runs, out) is None


def test_a_copy_an_earlier_run_left_goes_and_the_row_still_names_its_own_file(tmp_path):
    images = tmp_path / "images"
    images.mkdir()
    pixels = np.zeros((4, 4, 3), dtype=np.uint8)
    (images / "p-s0-t0.png").write_bytes(b"an earlier run's image")
    row = {"run_id": "p-s0-t0", "kind": "teacache", "threshold": 0.0, "max_abs": 0.0, "psnr": float("inf")}
    assert save_run_image(images, row, pixels, pixels) == "images/p-s0-t0.png"
    assert not (images / "p-s0-t0.png").exists()
    assert save_run_image(images, row, pixels, pixels + 1) == "images/p-s0-t0.png"  # images differ: it keeps its own
    assert (images / "p-s0-t0.png").is_file()
    assert save_run_image(None, row, pixels, pixels) is None  # no --save-images: no image at all
