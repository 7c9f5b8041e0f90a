"""Every derived file committed under results/, and each tolerance module, rebuilds byte-identically from raw tables.

Reports come from their sweep folder, the hardware comparison from both hardware folders (an input changed
since it was made fails, naming the command that re-makes it), gap-check tables from gapcheck.json and each
hardware's tolerance module from its sweeps and the quantized no-op files it records (``..._NOOP_INPUTS``,
paths from the project root). PNGs are left out here (drawing them takes a minute); `teacache-bench report`
rebuilds them byte-identically too.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest

from bench.compare import command as compare_hardware
from bench.compare.input import version_key
from bench.report import command as report
from bench.report import plots
from bench.tolerances import derive as tolerances_cmd
from bench.tolerances import gapcheck, quantized_noop
from bench.tolerances.module import TOLERANCES_DIR, generated_modules, prefix
from tests import ROOT, committed

RESULTS = ROOT / "results"
CAMPAIGNS = [p.parents[1] for p in committed("results/*/*/*/sweep/runs.parquet")]  # not a demo's or journey's
COMPARISON = RESULTS / "comparisons" / "cpu-amd-epyc-2c-vs-cuda-nvidia-h200"
GAPCHECKS = committed("results/*/*/*/gapcheck/gapcheck.json")
MODULES = [m for m in generated_modules() if (RESULTS / m.hardware).is_dir()]


def _derived_from(module, variant: str) -> Path:
    """The sweep a module derived ``variant`` from: the newest campaign's; where its hardware ran no campaign of the
    variant, the one committed sweep of it there at the module's settings and threshold (cpu-intel-xeon-2c's
    tiny-shapes comes from a criteria study's sweep). Committed ones only: a journey's sweep under a newer mflux
    (untracked) is not what the module was derived from."""
    hardware = module.hardware
    sweeps = [p.parent for p in committed(f"results/{hardware}/{variant}/*/sweep/runs.parquet")]
    if sweeps:
        return max(sweeps, key=lambda p: version_key(p.parent.name))
    settings = module.constants[f"{prefix(variant)}_SETTINGS"]
    found = [p.parent for p in committed(f"results/{hardware}/{variant}/**/runs.parquet") if _at(p.parent, settings)]
    assert len(found) == 1, f"the {hardware} module derives {variant}: sweeps at its settings {found or 'none'}"
    return found[0]


def _at(sweep: Path, settings: dict) -> bool:
    """Whether a sweep ran at these settings (rescale function, steps, guidance, resolution) and swept the threshold."""
    prov = json.loads((sweep / "provenance.json").read_text())
    same = all(prov.get(key) == settings[key] for key in ("rescale", "steps", "guidance", "resolution"))
    return same and any(abs(t - settings["threshold"]) < 1e-12 for t in prov.get("thresholds", ()))


@pytest.fixture
def no_png(monkeypatch):
    monkeypatch.setattr(plots, "figure_png", lambda fig: b"")


def _rel(path: Path) -> str:
    return str(path.relative_to(ROOT))


@pytest.mark.parametrize("campaign", CAMPAIGNS, ids=_rel)
def test_report_rebuilds_from_its_sweep(campaign, no_png):
    recorded = json.loads((campaign / "report" / "summary.json").read_text())
    target = (recorded.get("target_speedup") or {}).get("speedup")
    files, _ = report.render(report.load_sweep(campaign / "sweep"), recorded["floor"], recorded["metric"], target)
    for name, data in files.items():
        if not name.endswith(".png"):
            assert data == (campaign / "report" / name).read_bytes(), f"{_rel(campaign)}/report/{name}"


def test_hardware_comparison_rebuilds_from_both_hardware_folders(monkeypatch):
    monkeypatch.chdir(ROOT)  # compare.md names the folders as given on the command line
    recorded = json.loads((COMPARISON / "compare.json").read_text())
    changed = [
        path
        for variant in recorded["variants"].values()
        for side in ("a", "b")
        for path, sha in variant["inputs"][side].items()
        if not (ROOT / path).is_file() or hashlib.sha256((ROOT / path).read_bytes()).hexdigest() != sha
    ]
    if changed:  # re-measured since (docs/tolerances.md: Re-derive tolerances on new hardware): the comparison is stale
        pytest.fail(
            f"compare.md predates its inputs ({', '.join(changed)}): re-run, from the project root, "
            f"{recorded['provenance']['command']} and commit what it writes"
        )
    a, b = (Path(recorded[side]["path"]) for side in ("a", "b"))
    result = compare_hardware.build(a, b, recorded["ssim_floor"])
    assert compare_hardware.render_markdown(result) == (COMPARISON / "compare.md").read_text()


@pytest.mark.parametrize("path", GAPCHECKS, ids=_rel)
def test_gapcheck_table_rebuilds_from_its_json(path):
    assert gapcheck.rerender(path.parent) == (path.parent / "gapcheck.md").read_text()


def _derived_again(module) -> list[dict]:
    """The variants a module derived, from their sweeps at the threshold it records."""
    derived = []
    for variant in module.variants:
        threshold = module.constants[f"{prefix(variant)}_SETTINGS"]["threshold"]
        derived.append(tolerances_cmd.derive(_derived_from(module, variant), threshold))
    return derived


@pytest.fixture
def two_cores(monkeypatch):
    # The CPU sweeps predate the core count in provenance: their slug takes this machine's, 2 when measured.
    monkeypatch.setattr(os, "cpu_count", lambda: 2)


@pytest.mark.parametrize("module", MODULES, ids=lambda m: m.hardware)
def test_tolerance_module_rebuilds_from_its_sweeps(module, two_cores):
    """The variants it derived from their sweeps (at the threshold it records); the ones it kept, from itself; the
    quantized no-op bounds from the files it records, read from the project root."""
    derived = _derived_again(module)
    recorded = [ROOT / path for path in quantized_noop.recorded_inputs(module)]
    noop = quantized_noop.read_measurements(recorded, derived[0]["backend"])
    rebuilt = tolerances_cmd.module_text(derived, module.path, noop, TOLERANCES_DIR)
    assert rebuilt.text == module.path.read_text()
    assert not rebuilt.kept_bits  # every bit width it holds comes from the files it records


@pytest.mark.parametrize("module", MODULES, ids=lambda m: m.hardware)
def test_a_module_derived_again_from_its_sweeps_alone_keeps_its_quantized_noop_bounds_as_written(module, two_cores):
    rebuilt = tolerances_cmd.module_text(_derived_again(module), module.path, [], TOLERANCES_DIR)
    assert rebuilt.text == module.path.read_text()
    held = {quantized_noop.bits_of(name) for name in module.constants} - {None}
    assert rebuilt.kept_bits == sorted(held, reverse=True)


def _script(path: Path):
    """A study script under results/, imported by path (they are run as files, not packages)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"_rebuild_{path.parent.name.replace('-', '_')}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


RULES_FRONT = RESULTS / "cpu-amd-epyc-2c" / "tiny-open-flux2" / "0.24.0" / "rules-front" / "study.py"
RULES_FRONTS = committed("results/cpu-amd-epyc-2c/*/0.24.0/rules-front/points.csv")
RULES_AT_BUDGETS = RESULTS / "comparisons" / "rules-at-budgets"


@pytest.mark.parametrize("points", RULES_FRONTS, ids=_rel)
def test_rules_front_summary_rebuilds_from_its_points(points):
    """`study.py --model M --summarize`'s text: summary.md from points.csv and the campaign's traces alone."""
    study = _script(RULES_FRONT)
    model = points.parents[2].name
    assert study.folder(model) == points.parent
    assert study.summary_text(model) == (points.parent / "summary.md").read_text()


def test_rules_at_budgets_table_rebuilds_from_the_committed_points():
    budgets = _script(RULES_AT_BUDGETS / "budgets.py")
    assert {p for m in budgets.MODELS for p in budgets.inputs(m)} >= set(RULES_FRONTS)
    assert budgets.render() == (RULES_AT_BUDGETS / "budgets.md").read_text()


def test_the_full_size_rules_figure_draws_every_row_of_its_summary():
    """speedup.png's figure (plot.py, from summary.csv alone): one panel per family, one point per summary row,
    each at the row's realized / ideal."""
    import pandas as pd

    folder = RESULTS / "cuda-nvidia-h100" / "fullsize-rules"
    summary = pd.read_csv(folder / "summary.csv")
    fig = _script(folder / "plot.py").figure(summary)
    panels = [ax for ax in fig.axes if ax.get_title()]
    assert len(panels) == 4
    drawn = sorted(
        round(y, 6) for ax in panels for line in ax.lines if line.get_marker() != "None" for y in line.get_ydata()
    )
    assert drawn == sorted(round(v, 6) for v in summary["ratio_to_ideal"])
    assert (folder / "speedup.png").is_file()
