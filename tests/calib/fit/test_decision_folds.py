"""teacache-calib fit carries the decision score beside cv R^2: per candidate, selected, --compare, selected_by."""

from __future__ import annotations

import json

import numpy as np
import pytest

from calib.fit import command as fitmod
from calib.fit.candidates import candidate_specs
from calib.fit.coefficient_sources import resolve_coefficients
from calib.fit.decision import decision_scores
from calib.fit.decision_folds import COMPARISON_LABEL, DEFAULT_SELECTION
from calib.fit.selection import group_folds
from calib.traces.reader import load_traces
from tests import ROOT
from tests.calib.fit.conftest import make_traces, write

LINE = "0,0,0,1.2,0.01"
TINY_SHAPES = ROOT / "results/cpu-amd-epyc-2c/tiny-shapes/0.24.0/traces/traces.parquet"


def residual_traces(drop_residuals: bool = False):
    """Traces whose residual drift follows y, so schedules differ in what they leave uncomputed."""
    frame = make_traces(lambda x, u, sigma: 0.01 + 0.4 * x + 2.0 * x**2 * (1 - u), n_steps=14)
    frame["residual_rel_l1"] = frame["y_rel_l1"].abs() * (1.0 + frame["step"] / 14)
    frame["residual_norm"] = 1.0 + 0.05 * frame["step"]
    if drop_residuals:
        frame = frame.drop(columns=["residual_rel_l1", "residual_norm"])
    return frame


def run_fit(tmp_path, capsys, frame, *extra):
    traces = write(frame, tmp_path / "t.parquet")
    argv = [str(traces), "--out", str(tmp_path / "o"), "--form", "poly", "--degree", "2", *map(str, extra)]
    rc = fitmod.main(argv)
    captured = capsys.readouterr()
    assert rc == 0, captured.err
    return traces, json.loads((tmp_path / "o" / "fit.json").read_text()), captured.out


def test_fit_json_carries_the_decision_score_the_decision_module_computes(tmp_path, capsys):
    traces, fit, out = run_fit(tmp_path, capsys, residual_traces(), "--min-step", 2, "--compare", LINE, "--no-plots")
    loaded = load_traces([traces])
    frame = loaded.frame[loaded.frame["step"] >= 2]
    specs = candidate_specs(True, True, "poly", 2)
    rescale, _ = resolve_coefficients(LINE, "tiny-flux1", None, arg="--compare")
    expected = decision_scores(
        frame,
        specs,
        group_folds(frame["prompt_id"].to_numpy()),
        compare={COMPARISON_LABEL: rescale},
        skip_first_n_steps=2,
        skip_last_n_steps=1,
        max_consecutive_skips=8,
    )
    by_label = {c["label"]: c for c in expected["candidates"]}
    assert [c["label"] for c in fit["candidates"]] == [s.label for s in specs]
    for cand in fit["candidates"]:
        assert cand["decision_excess"] == pytest.approx(by_label[cand["label"]]["decision_excess"], rel=1e-12)
        assert cand["decision_excess_worst"] == pytest.approx(by_label[cand["label"]]["decision_excess_worst"])
    assert fit["comparison"]["decision_excess"] == pytest.approx(by_label[COMPARISON_LABEL]["decision_excess"])
    assert fit["decision"]["rules"] == {"skip_first_n_steps": 2, "skip_last_n_steps": 1, "max_consecutive_skips": 8}
    assert fit["decision"]["change"] == "residual"
    assert "curves" not in json.dumps(fit["decision"]) and "oracle" not in fit["decision"]
    # each criterion's pick; the selection itself stays cv R^2
    scored = [c for c in fit["candidates"] if c["decision_excess"] is not None]
    assert scored, "the synthetic traces must give every candidate a score"
    best = min(scored, key=lambda c: c["decision_excess"])["label"]
    assert fit["selection"]["selected_by"] == {"cv_r2": fit["selected"]["label"], "decision_excess": best}
    assert fit["decision"]["selected"] == best
    assert fit["selection"]["default"] == DEFAULT_SELECTION == "cv_r2"
    assert fit["selected"]["decision_excess"] == by_label[fit["selected"]["label"]]["decision_excess"]
    # the report says both
    flat = " ".join(out.split())
    assert f"selects {best} (excess" in flat and f"cv R^2 selects {fit['selected']['label']}" in flat
    assert "decision excess" in flat  # the --compare line


def test_fit_falls_back_to_the_output_change_without_residual_columns(tmp_path, capsys):
    _, fit, _ = run_fit(tmp_path, capsys, residual_traces(drop_residuals=True), "--no-plots")
    assert fit["decision"]["change"] == "output"
    assert all("decision_excess" in c for c in fit["candidates"])


def test_fit_draws_the_decision_plot(tmp_path, capsys):
    _, fit, _ = run_fit(tmp_path, capsys, residual_traces(), "--mode", "free")
    png = (tmp_path / "o" / "fit_decision.png").read_bytes()
    assert png.startswith(b"\x89PNG\r\n\x1a\n") and "fit_decision.png" in fit["plots"]
    assert np.isfinite(fit["selected"]["decision_excess"])


def test_select_decision_excess_makes_the_decision_pick_the_selected_candidate(tmp_path, capsys):
    """On the committed tiny-shapes traces the two criteria disagree among the plain polynomials."""
    base = [str(TINY_SHAPES), "--form", "poly", "--min-step", "2", "--no-plots"]
    assert fitmod.main([*base, "--out", str(tmp_path / "cv")]) == 0
    assert fitmod.main([*base, "--out", str(tmp_path / "d"), "--select", "decision_excess"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    by_cv, by_decision = (json.loads((tmp_path / d / "fit.json").read_text()) for d in ("cv", "d"))
    pick = by_cv["selection"]["selected_by"]["decision_excess"]
    assert pick != by_cv["selected"]["label"], "the traces must make the two criteria disagree"
    assert by_decision["selected"]["label"] == by_decision["fitted_model"] == pick
    assert [c["label"] for c in by_decision["candidates"] if c["selected"]] == [pick]
    assert by_decision["selection"]["default"] == "decision_excess"
    assert by_decision["selection"]["selected_by"] == by_cv["selection"]["selected_by"]  # same scores either way
    assert "least decision excess" in out
