"""Every derived file committed under results/, and each tolerance module, rebuilds byte-identically from raw tables.

Reports come from their sweep folder, the hardware comparison from both hardware folders, gap-check tables
from gapcheck.json and each hardware's tolerance module from its sweeps. PNGs are left out here (drawing
them takes a minute); `teacache-bench report` rebuilds them byte-identically too (README).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from bench import compare_hardware, gapcheck, plots, report
from bench import tolerances as tolerances_cmd
from bench.tolerance_module import TOLERANCES_DIR, complete, module_path, render_module

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "results"
CAMPAIGNS = sorted(p for p in RESULTS.glob("*/*/*") if (p / "sweep" / "runs.parquet").is_file())
COMPARISON = RESULTS / "comparisons" / "cpu-amd-epyc-2c-vs-cuda-nvidia-h200"
GAPCHECKS = sorted(RESULTS.glob("*/*/*/gapcheck/gapcheck.json"))
MODULES = {  # each committed module and the sweeps it was derived from, in its VARIANTS order
    "cpu-amd-epyc-2c": ("tiny-shapes", "tiny-flux1", "tiny-flux2", "tiny-qwen-image", "tiny-z-image"),
    "cuda-nvidia-h200": ("tiny-shapes", "tiny-flux1"),
}


@pytest.fixture
def no_png(monkeypatch):
    monkeypatch.setattr(plots, "figure_png", lambda fig: b"")


def _rel(path: Path) -> str:
    return str(path.relative_to(ROOT))


@pytest.mark.parametrize("campaign", CAMPAIGNS, ids=_rel)
def test_report_rebuilds_from_its_sweep(campaign, no_png):
    files, _ = report.render(report.load_sweep(campaign / "sweep"))
    for name, data in files.items():
        if not name.endswith(".png"):
            assert data == (campaign / "report" / name).read_bytes(), f"{_rel(campaign)}/report/{name}"


def test_hardware_comparison_rebuilds_from_both_hardware_folders(monkeypatch):
    monkeypatch.chdir(ROOT)  # compare.md names the folders as given on the command line
    result = compare_hardware.build(Path("results/cpu-amd-epyc-2c"), Path("results/cuda-nvidia-h200"))
    assert compare_hardware.render_markdown(result) == (COMPARISON / "compare.md").read_text()


@pytest.mark.parametrize("path", GAPCHECKS, ids=_rel)
def test_gapcheck_table_rebuilds_from_its_json(path):
    assert gapcheck.rerender(path.parent) == (path.parent / "gapcheck.md").read_text()


@pytest.mark.parametrize("hardware", sorted(MODULES))
def test_tolerance_module_rebuilds_from_its_sweeps(hardware, monkeypatch):
    # The CPU sweeps predate the core count in provenance: their slug takes this machine's, 2 when measured.
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    derived = [tolerances_cmd.derive(RESULTS / hardware / v / "0.24.0" / "sweep") for v in MODULES[hardware]]
    target = module_path(hardware)
    kept, provisional_from = complete(derived, target, TOLERANCES_DIR)
    assert render_module(derived, kept, provisional_from) == target.read_text()
