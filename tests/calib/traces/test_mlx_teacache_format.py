"""teacache-calib emit --format mlx-teacache: its calibration JSON, read back by ours, accepted by its wrapper."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from calib import emit as emitmod
from calib.traces import mlx_teacache as reader
from calib.traces import mlx_teacache_format as fmt
from calib.traces.reader import load_traces
from teacache.io import portable, project_root
from tests.calib.conftest import make_fit, traces


def emit(args, capsys) -> tuple[int, str, str]:
    rc = emitmod.main([str(a) for a in args])
    captured = capsys.readouterr()
    return rc, captured.out, captured.err


@pytest.fixture(scope="module")
def poly_fit(tmp_path_factory) -> Path:
    return make_fit(tmp_path_factory.mktemp("fmt"), traces(), "--form", "poly", "--mode", "free", "--degree", "2")


def test_round_trip_through_our_reader(tmp_path, capsys, poly_fit):
    out = tmp_path / "cal.json"
    rc, stdout, _ = emit([poly_fit, "--format", "mlx-teacache", "--out", out], capsys)
    assert rc == 0 and "note:" not in stdout
    data = json.loads(out.read_text())
    fit = json.loads(poly_fit.read_text())
    selected = fit["selected"]
    assert data["coefficients_c4_to_c0"] == [0.0, 0.0, *selected["coefficients"]]  # degree 2, padded
    assert (data["x_min"], data["x_max"]) == tuple(selected["x_range"])
    assert data["fit_r_squared"] == selected["r2"] and data["num_inference_steps"] == 10
    assert data["num_prompts"] == 10 and data["num_pairs"] == selected["n_pairs"] == 90
    assert data["seeds"] == [0, 1] and "seed" not in data

    assert reader.is_calibration(data)
    rescale = reader.calibration_rescale(data, None, out.name)
    assert rescale.coefficients == tuple(data["coefficients_c4_to_c0"])
    assert rescale.x_range == tuple(selected["x_range"])
    xs = np.linspace(*selected["x_range"], 9)
    np.testing.assert_allclose(rescale(xs), np.polyval(selected["coefficients"], xs), rtol=1e-12)
    assert rescale.provenance["variant"] == "tiny-flux1" and rescale.provenance["r2"] == selected["r2"]

    back, _ = reader.calibration_traces(data, None, out.name)
    original = load_traces([poly_fit.parent.parent / "rec" / "traces.parquet"]).frame
    assert back["x_rel_l1"].tolist() == original["x_rel_l1"].tolist()  # same pairs, same order
    assert back["y_rel_l1"].tolist() == original["y_rel_l1"].tolist()
    assert back["step"].tolist() == original["step"].tolist()
    # and through the one trace reader every command uses, as a file
    again = load_traces([out]).frame
    assert again["x_rel_l1"].tolist() == original["x_rel_l1"].tolist()


def test_time_aware_fit_writes_its_best_x_only_candidate_and_says_so(tmp_path, capsys):
    fit_path = make_fit(tmp_path, traces(shift_per_step=0.2), "--mode", "free", "--degree", "2")
    fit = json.loads(fit_path.read_text())
    assert fit["selected"]["form"] != "poly"  # the drift makes a time-aware form win
    rc, stdout, _ = emit([fit_path, "--format", "mlx-teacache"], capsys)
    assert rc == 0
    written = fit_path.parent / fmt.default_name("tiny-flux1")
    assert written.name == "_calibration_tiny_flux1.json"
    data = json.loads(written.read_text())
    x_only = [c for c in fit["candidates"] if c["form"] == "poly"]
    best = max(x_only, key=lambda c: c["cv_r2"])
    assert data["fitted_model"] == best["label"] and data["fit_r_squared"] == best["r2"]
    assert data["coefficients_c4_to_c0"][-len(best["coefficients"]) :] == best["coefficients"]
    assert "time-aware" in data["note"] and best["label"] in data["note"]
    assert f"note: {data['note']}" in stdout


def test_refusals_leave_no_file(tmp_path, capsys):
    fit_path = make_fit(tmp_path, traces(shift_per_step=0.2), "--form", "poly+step")  # no x-only candidate
    rc, _, err = emit([fit_path, "--format", "mlx-teacache"], capsys)
    assert rc == 2 and "cannot express" in err and "refit" in err
    assert not list(fit_path.parent.glob("_calibration_*"))

    fit_path = make_fit(tmp_path / "b", traces(), "--form", "poly", "--degree", "2")
    rec = fit_path.parent.parent / "rec" / "traces.parquet"
    frame = pd.read_parquet(rec)
    frame.loc[0, "x_rel_l1"] += 0.001
    frame.to_parquet(rec, index=False)  # the traces changed since the fit
    rc, _, err = emit([fit_path, "--format", "mlx-teacache"], capsys)
    assert rc == 2 and "sha256" in err
    assert not list(fit_path.parent.glob("_calibration_*"))
    rc, _, err = emit([fit_path, "--format", "mlx-teacache", "--traces", rec], capsys)
    assert rc == 2 and "sha256" in err  # given explicitly too: only the tables the fit read
    rc, _, err = emit([fit_path, "--format", "mlx-teacache", "--variant", "tiny-flux2"], capsys)
    assert rc == 2 and "--variant" in err


def test_module_format_still_needs_a_variant(capsys, poly_fit):
    rc, _, err = emit([poly_fit], capsys)
    assert rc == 2 and "--variant" in err
    rc, _, err = emit([poly_fit, "--format", "mlx-teacache", "--out", poly_fit.parent], capsys)
    assert rc == 2 and "--out" in err


def test_its_wrapper_accepts_the_written_tuple(tmp_path, capsys, poly_fit):
    mlx_teacache = pytest.importorskip("mlx_teacache")
    from calib.run.generation import generate
    from teacache.loading import load_model

    out = tmp_path / "cal.json"
    assert emit([poly_fit, "--format", "mlx-teacache", "--out", out], capsys)[0] == 0
    data = json.loads(out.read_text())
    model = load_model("tiny-flux1")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # its untested-mflux warning
        with mlx_teacache.apply_teacache(model, rel_l1_thresh=0.5, coefficients=data["coefficients_c4_to_c0"]) as h:
            generate(model, "a red cube", 0, 6, 64, 64, 3.5)
            assert h.coefficients == tuple(data["coefficients_c4_to_c0"])
            assert h.provenance.source == "user"
            assert len(h.stats.last_generation.decisions) == 6


def test_a_path_under_the_project_root_resolves_where_portable_wrote_it():
    """A fit names its traces as teacache.io.portable writes them: "./results/..." is under the repository root."""
    written = project_root() / "results" / "some" / "traces.parquet"
    assert portable(str(written)) == "./results/some/traces.parquet"
    assert fmt._local("./results/some/traces.parquet") == written
