"""Safe by construction: the default fit never selects a rescale function that is <= 0 or decreases in x
where the gate evaluates it, and the gate computes outside a time-aware function's region."""

from __future__ import annotations

import importlib.util
import json
import math

import numpy as np
import pytest

from calib.fit import safety
from calib.fit.candidates import CandidateSpec, FittedModel, candidate_specs
from calib.fit.monotone import prediction_floor
from calib.fit.result import rescale_from_fit
from calib.fit.selection import fit_frame
from calib.traces.reader import load_traces
from teacache.gate import REASON_ABOVE_RANGE, GateConfig, replay
from teacache.rescale import RescaleFunction
from tests import ROOT, committed
from tests.calib.fit.holdout_style import NUM_STEPS, holdout_style_frame

COMMITTED_FITS = committed("results/*/*/*/fit/fit.json")


def _selected_rescale(result: dict) -> RescaleFunction:
    return rescale_from_fit({"selected": result["selected"]})


@pytest.fixture(scope="module")
def holdout_fit():
    frame = holdout_style_frame()
    frame = frame.assign(num_steps=NUM_STEPS)
    return frame, fit_frame(frame, candidate_specs(True, False))


def test_holdout_style_default_fit_is_safe_where_the_unconstrained_pick_is_not(holdout_fit):
    _, result = holdout_fit
    rescale = _selected_rescale(result)
    checked = safety.check(rescale)  # checked again from the coefficients, not read from the file
    assert checked["safe"] and result["selected"]["safety"]["safe"]
    assert checked["nonpositive_fraction"] == 0.0 and checked["decreasing_fraction"] == 0.0
    # the table is shaped so that cv R^2 over all candidates would pick an unsafe function
    free = result["selection"]["unconstrained"]
    assert free["safe"] is False and free["cv_r2"] > result["selected"]["cv_r2"]
    assert result["selection"]["safety"]["n_safe"] < result["selection"]["safety"]["n_candidates"]


def test_holdout_style_region_makes_the_gate_compute_mid_schedule(holdout_fit):
    """Mid-schedule the table's x spans about 0.04..0.07; x = 0.3 there is inside the one global x range
    but outside the region, so the gate computes instead of evaluating the function."""
    frame, result = holdout_fit
    rescale = _selected_rescale(result)
    assert rescale.is_time_aware and rescale.region is not None
    lo, hi = rescale.x_range
    assert lo < 0.3 < hi
    mid = NUM_STEPS // 2
    assert rescale.x_bounds(mid / (NUM_STEPS - 1))[1] < 0.3
    trace = [None] + [0.05] * (mid - 1) + [0.3] + [0.05] * (NUM_STEPS - mid - 1)
    log = replay(GateConfig(100.0, rescale, max_consecutive_skips=NUM_STEPS), trace)
    assert log[mid].compute and log[mid].reason == REASON_ABOVE_RANGE
    # every recorded pair lies inside its own part of the schedule
    u = frame["step"].to_numpy() / (NUM_STEPS - 1)
    low, high = rescale.x_bounds(u)
    assert np.all((low <= frame["x_rel_l1"]) & (frame["x_rel_l1"] <= high))


def test_the_committed_fits_are_found():
    assert len(COMMITTED_FITS) >= 7, "results/<hardware>/<variant>/<version>/fit/fit.json: fewer than committed"


@pytest.mark.parametrize("path", COMMITTED_FITS, ids=lambda p: str(p.relative_to(ROOT)))
def test_committed_default_fits_select_safe_functions(path):
    fit = json.loads(path.read_text())
    assert not fit["options"].get("allow_unsafe") and fit["options"].get("mode") is None
    assert safety.check(rescale_from_fit(fit))["safe"]


def _refit_as_recorded(traces, options: dict) -> dict:
    import dataclasses

    from calib.fit import FitOptions
    from calib.fit import fit as fit_traces

    known = {f.name for f in dataclasses.fields(FitOptions)}
    recorded = {k: v for k, v in options.items() if k in known}
    return fit_traces(traces, FitOptions(**{**recorded, "no_plots": True})).to_json()


@pytest.mark.slow
@pytest.mark.parametrize("path", COMMITTED_FITS, ids=lambda p: str(p.relative_to(ROOT)))
def test_refitting_the_committed_traces_selects_safe_functions(path):
    fit = json.loads(path.read_text())
    traces = path.parents[1] / "traces" / "traces.parquet"
    if not traces.is_file():  # a study's fit of another folder's traces names them in its input
        traces = ROOT / fit["input"]["files"][0]["path"]
    if "no_splines" in fit["options"]:  # a fit that records every option: refit through the API with them
        result = _refit_as_recorded(traces, fit["options"])
    else:  # a fit from before the recorded options (and the spline candidates): the candidates it had
        frame = load_traces([traces]).frame
        frame = frame[frame["step"] >= fit["options"]["min_step"]]
        result = fit_frame(frame, candidate_specs("num_steps" in frame.columns, "sigma" in frame.columns))
    assert safety.check(_selected_rescale(result))["safe"]
    assert result["selected"]["label"] == fit["selected"]["label"]  # the committed file is today's fit


@pytest.mark.parametrize(
    ("form", "degree", "time_degree", "interaction_degree"),
    [("poly", 3, 0, 0), ("poly", 4, 0, 0), ("poly+step", 2, 3, 0), ("poly+step", 3, 2, 2), ("poly+step", 4, 5, 1)],
)
def test_monotone_candidates_are_safe_by_construction(holdout_fit, form, degree, time_degree, interaction_degree):
    """The monotone mode is non-decreasing in x and at least the prediction floor on its region, on data
    whose free fits bend down and below zero."""
    frame, _ = holdout_fit
    x, y = frame["x_rel_l1"].to_numpy(), frame["y_rel_l1"].to_numpy()
    u = frame["step"].to_numpy() / (NUM_STEPS - 1)
    spec = CandidateSpec(form, degree, "monotone", time_degree, interaction_degree)
    rescale = FittedModel.fit(spec, x, y, u if spec.is_time_aware else None).function
    assert safety.check(rescale)["safe"]
    grid_x, grid_u, _ = safety.region_grid(rescale)
    values = rescale(grid_x, grid_u if spec.is_time_aware else 0.0)
    assert np.min(values) >= prediction_floor(y) * (1 - 1e-3)


def test_safety_check_finds_what_it_should():
    rising = RescaleFunction((2.0, 0.01), x_range=(0.0, 0.5))
    assert safety.check(rising)["safe"]
    dipping = RescaleFunction((1.0, -0.2, 0.02), x_range=(0.0, 0.3))  # falls until x = 0.1, <= 0 at 0.1 +- ...
    checked = safety.check(dipping)
    assert not checked["safe"] and checked["decreasing_fraction"] == pytest.approx(1 / 3, abs=0.01)
    spans = safety.unsafe_intervals(dipping)
    assert spans["decreasing"][0][0] == 0.0 and spans["decreasing"][0][1] == pytest.approx(0.1, abs=1e-3)
    assert spans["nonpositive"] == []  # the minimum, 0.01 at x = 0.1, stays positive
    through_zero = RescaleFunction((1.0, -0.05), x_range=(0.0, 0.3))
    assert safety.unsafe_intervals(through_zero)["nonpositive"][0][1] == pytest.approx(0.05, abs=1e-3)
    assert safety.check(RescaleFunction((1.0, 0.0)))["safe"]  # y = x: 0 only at x = 0, exactly right there


def test_emitted_module_carries_the_region(holdout_fit, tmp_path):
    from calib import emit

    _, result = holdout_fit
    fit = {"selected": result["selected"], "candidates": result["candidates"], "selection": result["selection"]}
    text = emit.emit_module(fit, "tiny-shapes")
    assert "region=Region(" in text and "UNSAFE_X" not in text and "safety: positive and non-decreasing" in text
    path = tmp_path / "module.py"
    path.write_text(text)
    spec = importlib.util.spec_from_file_location("emitted_region", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert rescale_from_fit(fit) == module.RESCALE and module.RESCALE.region is not None
    assert math.isfinite(module.RESCALE.x_range[1])


def test_fit_cli_reports_safety_and_refuses_only_unsafe_candidates(tmp_path, capsys):
    from calib.fit import command as fitmod

    traces = tmp_path / "holdout.csv"
    holdout_style_frame().to_csv(traces, index=False)
    assert fitmod.main([str(traces), "--out", str(tmp_path / "o"), "--no-plots"]) == 0
    out = capsys.readouterr().out.replace("\n", " ")
    fit = json.loads((tmp_path / "o" / "fit.json").read_text())
    assert all("safety" in c for c in fit["candidates"]) and fit["selected"]["safety"]["safe"]
    assert "safety:" in out and "safe candidates only" in out and "decr" in out  # the table's safety column
    # narrowed to the one unsafe shape: refused with one line, nothing written; --allow-unsafe selects it
    narrow = ["--form", "poly+step", "--degree", "3", "--time-degree", "1", "--interaction-degree", "1"]
    narrow += ["--mode", "free", "--no-plots"]
    assert fitmod.main([str(traces), "--out", str(tmp_path / "n"), *narrow]) == 2
    err = capsys.readouterr().err
    assert "is safe" in err and "--allow-unsafe" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "n").exists()
    assert fitmod.main([str(traces), "--out", str(tmp_path / "a"), *narrow, "--allow-unsafe"]) == 0
    allowed = json.loads((tmp_path / "a" / "fit.json").read_text())
    assert allowed["selected"]["safety"]["safe"] is False and allowed["options"]["allow_unsafe"] is True
