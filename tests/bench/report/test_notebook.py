"""notebooks/campaign.ipynb runs top to bottom on a synthetic campaign, in this venv's Python."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import nbclient
import nbformat
import pandas as pd
import pytest

from tests import ROOT
from tests.bench.report.conftest import make_sweep

NOTEBOOK = ROOT / "notebooks" / "campaign.ipynb"
TIMEOUT_S = 60


@pytest.fixture
def campaign(tmp_path) -> Path:
    folder = tmp_path / "results" / "cpu-synthetic" / "flux1-dev" / "0.24.0"
    make_sweep(folder / "sweep")
    (folder / "fit").mkdir()
    (folder / "fit" / "fit.json").write_text(json.dumps({"format_version": 1, "variant": "flux1-dev", "form": "poly"}))
    (folder / "traces").mkdir()
    pd.DataFrame({"run_id": ["a"] * 3, "step": [1, 2, 3], "x": [0.1, 0.08, 0.06], "y": [0.3, 0.2, 0.1]}).to_parquet(
        folder / "traces" / "traces.parquet"
    )
    return folder


@pytest.fixture
def venv_kernel(tmp_path, monkeypatch) -> str:
    """A 'python3' kernelspec that starts this interpreter, found first through JUPYTER_PATH."""
    spec_dir = tmp_path / "jupyter" / "kernels" / "python3"
    spec_dir.mkdir(parents=True)
    spec = {
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "Python 3 (test venv)",
        "language": "python",
    }
    (spec_dir / "kernel.json").write_text(json.dumps(spec))
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "jupyter"))
    monkeypatch.setenv("MPLBACKEND", "Agg")
    return "python3"


def test_committed_notebook_has_no_outputs():
    nb = nbformat.read(NOTEBOOK, as_version=4)
    code = [cell for cell in nb.cells if cell.cell_type == "code"]
    assert code and all(not cell.outputs and cell.execution_count is None for cell in code)
    assert 'os.environ.get("TEACACHE_CAMPAIGN")' in code[0].source


def test_notebook_runs_on_a_campaign(campaign, venv_kernel, monkeypatch):
    monkeypatch.setenv("TEACACHE_CAMPAIGN", str(campaign))
    nb = nbformat.read(NOTEBOOK, as_version=4)
    nb.cells.append(nbformat.v4.new_code_cell("import sys\nprint('kernel python:', sys.executable)"))
    client = nbclient.NotebookClient(
        nb,
        kernel_name=venv_kernel,
        timeout=TIMEOUT_S,
        startup_timeout=TIMEOUT_S,
        resources={"metadata": {"path": str(NOTEBOOK.parent)}},
    )
    client.execute()
    outputs = [out for cell in nb.cells if cell.cell_type == "code" for out in cell.outputs]
    assert not [out for out in outputs if out.output_type == "error"]
    text = "".join(out.get("text", "") for out in outputs if out.output_type == "stream")
    assert f"kernel python: {sys.executable}" in text
    assert str(campaign.resolve()) in text
    assert "recommended threshold: 0.3" in text
    images = [out for out in outputs if "image/png" in out.get("data", {})]
    assert len(images) == 5  # speedup vs SSIM and vs cosine, skips, skip heatmap, x traces
    assert "traces.parquet: 3 rows" in text
