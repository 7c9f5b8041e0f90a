"""The user journeys end to end on tiny-flux1, into temporary folders: refit, and re-derive tolerances."""

from __future__ import annotations

import ast
import importlib.util
import sys

import pandas as pd
import pytest

import teacache
from bench.sweep import command as sweep_cmd
from bench.sweep import records
from bench.tolerances import derive as tolerances_cmd
from calib import emit as emit_cmd
from calib import record as record_cmd
from calib.fit import command as fit_cmd
from calib.fit.result import rescale_from_fit

SMALL = ["--model", "tiny-flux1", "--steps", "8", "--size", "64x64"]


@pytest.fixture(scope="module")
def traces(tmp_path_factory):
    out = tmp_path_factory.mktemp("traces")
    assert (
        record_cmd.main([*SMALL, "--prompts", "fast", "--seeds", "0,1", "--overhead-pairs", "0", "--out", str(out)])
        == 0
    )
    return out


def test_record_writes_one_row_per_run_and_step_and_resumes(traces, capsys):
    table = pd.read_parquet(traces / "traces.parquet")
    assert len(table) == 3 * 2 * 8
    assert set(table["run_id"]) == {f"{p}-s{s}" for p in ("obj-teapot", "scene-city", "portrait-elder") for s in (0, 1)}
    assert table.groupby("run_id")["step"].apply(list).map(lambda s: s == list(range(8))).all()
    assert (traces / "provenance.json").exists()
    # resume: nothing is redone
    assert record_cmd.main([*SMALL, "--prompts", "fast", "--seeds", "0,1", "--out", str(traces)]) == 0
    assert "6 runs (6 already done)" in capsys.readouterr().out


def test_refit_journey_emits_the_module_the_gate_loads(traces, tmp_path, monkeypatch):
    fit_dir = tmp_path / "fit"
    assert fit_cmd.main([str(traces / "traces.parquet"), "--out", str(fit_dir), "--compare", "packaged"]) == 0
    module_path = tmp_path / "tiny_flux1.py"
    assert emit_cmd.main([str(fit_dir / "fit.json"), "--variant", "tiny-flux1", "--out", str(module_path)]) == 0
    spec = importlib.util.spec_from_file_location("teacache.coefficients.tiny_flux1", module_path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert rescale_from_fit(fit_dir / "fit.json") == module.RESCALE
    monkeypatch.setitem(sys.modules, "teacache.coefficients.tiny_flux1", module)
    model = teacache.load_model("tiny-flux1")
    with teacache.apply_teacache(model, rel_l1_thresh=0.3) as handle:
        assert handle.rescale == module.RESCALE


def test_tolerance_journey_writes_a_module_with_provenance_on_every_constant(traces, tmp_path):
    sweep_dir = tmp_path / "sweep"
    assert sweep_cmd.main([*SMALL, "--prompts", "fast", "--seeds", "0", "--thresholds", "0,0.5", "--repeats", "1",
                           "--traces", str(traces / "traces.parquet"), "--out", str(sweep_dir)]) == 0  # fmt: skip
    module_path = tmp_path / "tolerances.py"
    argv = [str(sweep_dir), "--threshold", "0.5", "--out", str(module_path)]
    assert tolerances_cmd.main(argv) == 0
    text = module_path.read_text()
    tree = ast.parse(text)
    lines = text.splitlines()
    constants = [node for node in tree.body if isinstance(node, ast.Assign)]
    assert {t.id for node in constants for t in node.targets} >= {
        "HARDWARE", "STATUS", "TINY_FLUX1_SKIP_BAND", "TINY_FLUX1_SSIM_FLOOR", "TINY_FLUX1_NOOP_THRESHOLD0",
    }  # fmt: skip
    for node in constants:
        name = node.targets[0].id
        if name.startswith("TINY_FLUX1_"):
            comment = lines[node.lineno - 2]
            assert comment.startswith("# ") and comment[2:] in ("provisional", "calibrated"), name
            above = node.lineno - 2
            while above > 0 and lines[above - 1].startswith("#"):
                above -= 1
            block = "\n".join(lines[above : node.lineno - 1])
            assert "measured 20" in block and "mflux" in block, name
    # same input, byte-identical file
    first = module_path.read_bytes()
    assert tolerances_cmd.main(argv) == 0
    assert module_path.read_bytes() == first
    # and the tolerances hold for the very runs they were derived from
    tol = tolerances_cmd.load_module(module_path)
    runs = records.read_sweep(sweep_dir).runs  # skipped is derived on reading
    at = runs[(runs["kind"] == "teacache") & (runs["threshold"] == 0.5)]
    for row in at.itertuples():
        verdict = tolerances_cmd.check_run(tol, "tiny-flux1", {"skipped": row.skipped, "ssim": row.ssim})
        assert all(verdict.values()), verdict
