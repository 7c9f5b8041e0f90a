"""teacache-calib fit on synthetic traces: known polynomials plus noise, no model runs."""

from __future__ import annotations

import hashlib
import importlib
import json
import shutil

import numpy as np
import pandas as pd
import pytest

from calib.fit import command as fitmod
from calib.fit.candidates import STEP_PIECES, X_PIECES, CandidateSpec, FittedModel, candidate_specs
from calib.fit.errors import FitError
from calib.fit.files import PLOT_FILES
from calib.fit.monotone import fit_monotone
from calib.fit.result import rescale_from_fit
from calib.fit.selection import (
    DEFAULT_MARGIN,
    TIE_TOLERANCE,
    VERDICT_OK,
    VERDICT_OK_GIVEN,
    VERDICT_REFIT,
    fit_frame,
    group_folds,
    paired_standard_error,
    select,
)
from calib.traces.reader import load_traces
from calib.traces.runs import step_fraction
from teacache.coefficients import _upstream, load_packaged, module_name
from teacache.gate import GateConfig
from teacache.rescale import FORM_POLY_SIGMA, FORM_POLY_STEP, RescaleFunction
from tests import committed
from tests.calib.fit.conftest import interaction_truth, loads_as_selected, make_traces, run_fit, write

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def cond_rows(frame: pd.DataFrame) -> pd.DataFrame:
    return frame[(frame["branch"] == "cond") & (frame["step"] > 0)]


@pytest.fixture(scope="module")
def full_fit(tmp_path_factory):
    """One complete fit (every candidate, plots) shared by the tests that only read its outputs."""
    root = tmp_path_factory.mktemp("full")
    prov = {"variant": "tiny-flux1", "steps": 12, "guidance": 3.5, "date_utc": "2026-01-02T03:04:05Z"}
    traces = write(make_traces(), root / "rec" / "traces.parquet", prov)
    out = root / "out"
    rc = fitmod.main([str(traces), "--out", str(out)])
    assert rc == 0
    return {"traces": traces, "out": out, "fit": json.loads((out / "fit.json").read_text()), "prov": prov}


# ------------------------------------------------------------------------------------- fitting math


def test_free_mode_reproduces_polyfit(tmp_path, capsys):
    frame = make_traces()
    traces = write(frame, tmp_path / "t.parquet")
    rc, out, err = run_fit([traces, "--out", tmp_path / "o", "--form", "poly", "--degree", 4, "--mode", "free",
                            "--no-plots"], capsys)  # fmt: skip
    assert rc == 0, err
    fit = json.loads((tmp_path / "o" / "fit.json").read_text())
    assert len(fit["candidates"]) == 1 and fit["candidates"][0]["selected"]
    rows = cond_rows(frame)
    expected = np.polyfit(rows["x_rel_l1"], rows["y_rel_l1"], 4)
    np.testing.assert_allclose(fit["selected"]["coefficients"], expected, rtol=1e-10)
    assert fit["selected"]["x_range"] == [rows["x_rel_l1"].min(), rows["x_rel_l1"].max()]
    assert fit["selected"]["n_pairs"] == len(rows) and fit["selected"]["n_prompts"] == 6
    assert str(tmp_path / "o" / "fit.json") in out.replace("\n", "")


def test_origin_mode_has_no_constant_and_matches_lstsq():
    rng = np.random.default_rng(3)
    x = rng.uniform(0.01, 0.5, 200)
    y = 0.4 * x + 2 * x**2 + rng.normal(0, 0.01, 200)
    model = FittedModel.fit(CandidateSpec("poly", 3, "origin"), x, y)
    assert model.function.coefficients[-1] == 0.0 and len(model.function.coefficients) == 4
    expected = np.linalg.lstsq(np.stack([x**3, x**2, x], axis=1), y, rcond=None)[0]
    np.testing.assert_allclose(model.function.coefficients[:-1], expected, rtol=1e-10)
    np.testing.assert_allclose(np.polyval(model.function.coefficients, 0.0), 0.0, atol=0)


def test_origin_mode_through_the_cli(tmp_path, capsys):
    traces = write(make_traces(), tmp_path / "t.csv")
    rc, _, err = run_fit([traces, "--out", tmp_path / "o", "--mode", "origin", "--degree", 2, "--no-plots"], capsys)
    assert rc == 0, err
    sel = json.loads((tmp_path / "o" / "fit.json").read_text())["selected"]
    assert sel["mode"] == "origin" and sel["coefficients"][-1] == 0.0 and len(sel["coefficients"]) == 3


@pytest.mark.parametrize("degree", [1, 2, 3, 4])
def test_monotone_candidate_is_non_decreasing(degree):
    rng = np.random.default_rng(degree)
    x = rng.uniform(0.02, 0.5, 300)
    y = 0.3 + x + 0.3 * np.sin(20 * x) + rng.normal(0, 0.01, 300)  # a wiggle the free fit follows
    lo, hi = x.min(), x.max()
    coef = fit_monotone(x, y, degree, (lo, hi))
    xs = np.linspace(lo, hi, 20001)
    assert np.min(np.diff(np.polyval(coef, xs))) >= -1e-12
    # no worse than the best monotone straight line (feasible for every degree)
    slope, icpt = np.polyfit(x, y, 1)
    line_sse = np.sum((np.polyval([max(slope, 0.0), icpt if slope > 0 else y.mean()], x) - y) ** 2)
    assert np.sum((np.polyval(coef, x) - y) ** 2) <= line_sse * (1 + 1e-9)


def test_monotone_constraint_binds_only_when_needed():
    rng = np.random.default_rng(5)
    x = rng.uniform(0.02, 0.5, 300)
    y = 0.1 + 2 * x**2 + rng.normal(0, 0.002, 300)  # already increasing: same as the free fit
    np.testing.assert_allclose(fit_monotone(x, y, 2, (x.min(), x.max())), np.polyfit(x, y, 2), rtol=1e-12)
    y_bad = np.cos(8 * x) + rng.normal(0, 0.01, 300)  # decreasing: the free cubic is not monotone
    free = np.polyfit(x, y_bad, 3)
    mono = fit_monotone(x, y_bad, 3, (x.min(), x.max()))
    xs = np.linspace(x.min(), x.max(), 2001)
    assert np.min(np.diff(np.polyval(free, xs))) < 0
    assert np.min(np.diff(np.polyval(mono, xs))) >= -1e-12


@pytest.mark.parametrize("form", [FORM_POLY_STEP, FORM_POLY_SIGMA])
def test_time_aware_rescale_matches_fitted_model(form):
    frame = cond_rows(make_traces(truth=lambda x, u, s: 0.05 + x + 0.2 * u - 0.1 * s**2, noise=0.001))
    frame = frame.reset_index(drop=True)
    u = step_fraction(frame) if form == FORM_POLY_STEP else frame["sigma"].to_numpy()
    x = frame["x_rel_l1"].to_numpy()
    model = FittedModel.fit(CandidateSpec(form, 2, "free", 2), x, frame["y_rel_l1"].to_numpy(), u)
    rescale = model.function
    assert rescale.form == form and len(rescale.time_coefficients) == 2
    # the gate's own time input, row by row, gives the same u
    gate_u = [rescale.time_input(int(r.step), int(r.num_steps), float(r.sigma)) for r in frame.itertuples()]
    np.testing.assert_array_equal(gate_u, u)
    np.testing.assert_allclose(rescale(x, u), model.predict(x, u), rtol=1e-12, atol=1e-15)
    for i in (0, 7, 31):
        assert rescale(float(x[i]), float(u[i])) == pytest.approx(model.predict(x[i : i + 1], u[i : i + 1])[0])


def test_group_folds_keep_prompts_together():
    groups = np.repeat([f"p{i}" for i in range(7)], 5)
    folds = group_folds(groups)
    assert len(np.unique(folds)) == 7  # leave-one-prompt-out
    for g in np.unique(groups):
        assert len(np.unique(folds[groups == g])) == 1
    many = np.repeat([f"p{i}" for i in range(23)], 3)
    folds = group_folds(many)
    assert len(np.unique(folds)) == 10
    assert all(len(np.unique(folds[many == g])) == 1 for g in np.unique(many))
    np.testing.assert_array_equal(folds, group_folds(many))  # deterministic
    with pytest.raises(FitError, match="--folds: expected 2 to 7"):  # 0 is a count, not 'the default'
        group_folds(groups, 0)


def _selected(frame: pd.DataFrame, drop=()) -> dict:
    rows = cond_rows(frame).drop(columns=list(drop)).reset_index(drop=True)
    specs = candidate_specs("num_steps" in rows, "sigma" in rows)
    return fit_frame(rows, specs)["selected"]


def test_cv_prefers_degree_two_or_more_for_quadratic_truth():
    winners = [_selected(make_traces(noise=0.004, rng_seed=s)) for s in range(4)]
    assert all(w["degree"] >= 2 for w in winners), [w["label"] for w in winners]
    winners = [_selected(make_traces(noise=0.004, rng_seed=s), drop=("num_steps", "sigma")) for s in range(4)]
    assert all(w["degree"] >= 2 for w in winners), [w["label"] for w in winners]


def test_cv_picks_poly_step_for_a_shift_in_step_fraction():
    def truth(x, u, sigma):
        return 0.05 + 0.9 * x + 0.15 * u

    winners = [_selected(make_traces(truth=truth, noise=0.004, rng_seed=s), drop=("sigma",)) for s in range(3)]
    assert all(w["form"] == FORM_POLY_STEP for w in winners), [w["label"] for w in winners]


def test_cv_picks_poly_sigma_for_a_sigma_term():
    def truth(x, u, sigma):
        return 0.05 + 0.9 * x + 0.2 * sigma**2

    winner = _selected(make_traces(truth=truth, noise=0.002), drop=("num_steps",))
    assert winner["form"] == FORM_POLY_SIGMA


def test_candidates_report_every_score(full_fit):
    fit = full_fit["fit"]
    labels = [c["label"] for c in fit["candidates"]]
    # poly degrees x modes; two time forms x degrees x (time degree 1-5, x*u degree 0..min(2, time degree)) x
    # (free, monotone); mono+step: pieces in x x pieces in the step fraction
    n_mono = len(X_PIECES) * len(STEP_PIECES)
    assert len(labels) == len(set(labels)) == 4 * 3 + 2 * 4 * 14 * 2 + n_mono
    assert sum(c["selected"] for c in fit["candidates"]) == 1
    for c in fit["candidates"]:
        for key in ("form", "degree", "mode", "coefficients", "time_coefficients", "r2", "cv_r2", "rmse",
                    "x_range", "n_prompts", "n_pairs"):  # fmt: skip
            assert key in c
        assert c["r2"] >= c["cv_r2"] - 1e-3  # held-out scores are not better than in-sample ones
    top = max((c for c in fit["candidates"] if c["safety"]["safe"]), key=lambda c: c["cv_r2"])
    weights = np.asarray(fit["selection"]["fold_weights"])  # rows per fold / rows

    def within(c):  # one-standard-error rule, paired (the default --se): the SE of c's difference from the best
        band = max((1 - top["cv_r2"]) * TIE_TOLERANCE, paired_standard_error(c, top, weights))
        return c["safety"]["safe"] and top["cv_r2"] - c["cv_r2"] <= band + 1e-12

    assert within(fit["selected"])
    # ... and no candidate with fewer parameters is inside that band
    assert all(c["n_params"] >= fit["selected"]["n_params"] for c in fit["candidates"] if within(c))
    assert fit["selected"]["degree"] >= 2  # quadratic truth
    assert fit["selection"]["cv"] == "leave-one-prompt-out"
    assert fit["format_version"] == 1 and "date_utc" in fit["provenance"]


def test_ties_go_to_fewer_parameters():
    cands = [
        {"cv_r2": 0.9, "n_params": 5},
        {"cv_r2": 0.9 - 0.1 * TIE_TOLERANCE / 2, "n_params": 3},  # cv MSE 0.5% above the best
        {"cv_r2": 0.8, "n_params": 1},
    ]
    assert select(cands) == 1
    cands[1]["cv_r2"] = 0.9 - 0.1 * TIE_TOLERANCE * 2  # 2% above: no longer a tie
    assert select(cands) == 0


# ------------------------------------------------------------------------------------ inputs, outputs


def test_rescale_from_fit_round_trip(full_fit):
    fit = full_fit["fit"]
    sel = fit["selected"]
    for source in (fit, full_fit["out"] / "fit.json", str(full_fit["out"])):
        rescale = rescale_from_fit(source)
        assert rescale == RescaleFunction(
            coefficients=tuple(sel["coefficients"]),
            x_range=tuple(sel["x_range"]),
            form=sel["form"],
            time_coefficients=tuple(sel["time_coefficients"]),
        )
        assert rescale.provenance["fitted_model"] == sel["label"]
    assert RescaleFunction.from_dict(rescale.to_dict()) == rescale


def test_input_provenance_and_hashes(full_fit):
    files = full_fit["fit"]["input"]["files"]
    assert len(files) == 1
    assert files[0]["sha256"] == hashlib.sha256(full_fit["traces"].read_bytes()).hexdigest()
    assert full_fit["fit"]["input"]["provenance"] == full_fit["prov"]
    assert full_fit["fit"]["input"]["variants"] == ["tiny-flux1"] and full_fit["fit"]["variant"] == "tiny-flux1"
    assert full_fit["fit"]["data"]["branch"] == "cond"


def test_plots_are_png(full_fit):
    for name in PLOT_FILES.values():
        data = (full_fit["out"] / name).read_bytes()
        assert data.startswith(PNG_MAGIC) and len(data) > 5000
    assert sorted(full_fit["fit"]["plots"]) == sorted(PLOT_FILES.values())


@pytest.mark.parametrize("suffix", [".csv", ".json", ".jsonl"])
def test_csv_json_inputs_match_parquet(tmp_path, capsys, suffix):
    frame = make_traces()
    args = ["--form", "poly", "--degree", 3, "--mode", "free", "--no-plots"]
    write(frame, tmp_path / "t.parquet")
    write(frame, tmp_path / f"t{suffix}")
    assert run_fit([tmp_path / "t.parquet", "--out", tmp_path / "a", *args], capsys)[0] == 0
    assert run_fit([tmp_path / f"t{suffix}", "--out", tmp_path / "b", *args], capsys)[0] == 0
    a = json.loads((tmp_path / "a" / "fit.json").read_text())["selected"]
    b = json.loads((tmp_path / "b" / "fit.json").read_text())["selected"]
    np.testing.assert_allclose(a["coefficients"], b["coefficients"], rtol=1e-12)


def test_several_files_are_concatenated(tmp_path, capsys):
    frame = make_traces()
    ids = sorted(frame["prompt_id"].unique())
    write(frame[frame["prompt_id"].isin(ids[:3])], tmp_path / "a.parquet")
    write(frame[~frame["prompt_id"].isin(ids[:3])], tmp_path / "b.csv")
    args = ["--form", "poly", "--degree", 2, "--mode", "free", "--no-plots"]
    rc, _, err = run_fit([tmp_path / "a.parquet", tmp_path / "b.csv", "--out", tmp_path / "o", *args], capsys)
    assert rc == 0, err
    fit = json.loads((tmp_path / "o" / "fit.json").read_text())
    rows = cond_rows(frame)
    np.testing.assert_allclose(fit["selected"]["coefficients"], np.polyfit(rows.x_rel_l1, rows.y_rel_l1, 2), rtol=1e-10)
    assert [f["name"] for f in fit["input"]["files"]] == ["a.parquet", "b.csv"]


def test_branch_choice_and_minimal_columns(tmp_path, capsys):
    frame = make_traces()
    write(frame, tmp_path / "t.parquet")
    args = ["--form", "poly", "--degree", 1, "--mode", "free", "--no-plots", "--allow-unsafe"]
    assert run_fit([tmp_path / "t.parquet", "--out", tmp_path / "u", "--branch", "uncond", *args], capsys)[0] == 0
    rows = frame[(frame.branch == "uncond") & (frame.step > 0)]
    got = json.loads((tmp_path / "u" / "fit.json").read_text())["selected"]["coefficients"]
    np.testing.assert_allclose(got, np.polyfit(rows.x_rel_l1, rows.y_rel_l1, 1), rtol=1e-10)
    minimal = cond_rows(frame[frame.seed == 0])[["prompt_id", "step", "x_rel_l1", "y_rel_l1"]]
    write(minimal, tmp_path / "m.csv")
    rc, _, err = run_fit([tmp_path / "m.csv", "--out", tmp_path / "m", "--no-plots"], capsys)
    assert rc == 0, err
    fit = json.loads((tmp_path / "m" / "fit.json").read_text())
    # no num_steps: inferred per run (and said), so poly+step and mono+step are tried; no sigma: no poly+sigma
    assert {c["form"] for c in fit["candidates"]} == {"poly", "poly+step", "mono+step"}
    assert fit["data"]["num_steps_source"] == "inferred" and "inferred" in err


def test_zero_x_is_a_warning(tmp_path, capsys):
    frame = make_traces(branches=("cond",))
    frame.loc[frame.index[3], "x_rel_l1"] = 0.0
    write(frame, tmp_path / "t.parquet")
    rc, _, err = run_fit([tmp_path / "t.parquet", "--out", tmp_path / "o", "--degree", 2, "--no-plots"], capsys)
    assert rc == 0 and "warning" in err and "exactly 0" in err
    assert json.loads((tmp_path / "o" / "fit.json").read_text())["data"]["warnings"]


# ------------------------------------------------------------------------------------------ bad input


def _bad_cases(tmp_path):
    good = make_traces()
    cases = {}
    cases["missing column"] = (
        [write(good.rename(columns={"y_rel_l1": "y"}), tmp_path / "renamed.csv")],
        [],
        ["y_rel_l1", "columns found", "x_rel_l1"],
    )
    nan = good.copy()
    nan.loc[(nan.step == 5) & (nan.branch == "cond"), "y_rel_l1"] = np.nan
    nan.loc[(nan.step == 6) & (nan.branch == "cond") & (nan.prompt_id == "p2"), "x_rel_l1"] = np.inf
    cases["nan rows"] = ([write(nan, tmp_path / "nan.parquet")], [], ["NaN", "14 row", "prompt_id=p0 step=5"])
    few = good[good.prompt_id.isin(["p0", "p1"])]
    cases["too few prompts"] = ([write(few, tmp_path / "few.parquet")], [], ["prompt_id", "2 distinct", "at least 3"])
    dup = write(good, tmp_path / "dup.parquet")
    cases["duplicate keys"] = ([dup, dup], [], ["duplicate", "run_id", "prompt_id=p0 step=1"])
    cases["unknown variant for packaged"] = (
        [write(good.assign(variant="no-such-model"), tmp_path / "v.parquet")],
        ["--compare", "packaged"],
        ["--compare packaged", "no-such-model", "known:"],
    )
    cases["variant disagrees"] = ([write(good, tmp_path / "d.parquet")], ["--variant", "flux1-dev"],
                                  ["--variant", "disagrees", "tiny-flux1"])  # fmt: skip
    (tmp_path / "empty.csv").write_text("prompt_id,step,x_rel_l1,y_rel_l1\n")
    cases["empty input"] = ([tmp_path / "empty.csv"], [], ["empty input", "empty.csv"])
    (tmp_path / "junk.parquet").write_bytes(b"this is not parquet")
    cases["unreadable"] = ([tmp_path / "junk.parquet"], [], ["cannot read", "junk.parquet"])
    cases["not there"] = ([tmp_path / "missing.parquet"], [], ["missing.parquet", "does not exist"])
    text = good.astype({"x_rel_l1": object})
    text.loc[text.index[5], "x_rel_l1"] = "abc"
    cases["non-numeric"] = ([write(text, tmp_path / "text.csv")], [], ["x_rel_l1", "expected numbers", "'abc'"])
    cases["time form without column"] = (  # sigma (unlike num_steps) cannot be inferred
        [write(good.drop(columns=["sigma"]), tmp_path / "ns.parquet")],
        ["--form", "poly+sigma"],
        ["poly+sigma", "sigma", "columns found"],
    )
    cases["branch missing"] = ([write(cond_rows(good).drop(columns="branch"), tmp_path / "nb.parquet")],
                               ["--branch", "cond"], ["--branch", "no 'branch' column"])  # fmt: skip
    cases["bad compare"] = ([write(good, tmp_path / "c.parquet")], ["--compare", "1,x,3"], ["--compare", "'1,x,3'"])
    cases["empty compare"] = ([write(good, tmp_path / "e.parquet")], ["--compare="], ["--compare", "empty value"])
    cases["zero folds"] = ([write(good, tmp_path / "f.parquet")], ["--folds", "0"], ["--folds", "at least 2", "got 0"])
    return cases


BAD_CASES = [
    "missing column",
    "nan rows",
    "too few prompts",
    "duplicate keys",
    "unknown variant for packaged",
    "variant disagrees",
    "empty input",
    "unreadable",
    "not there",
    "non-numeric",
    "time form without column",
    "branch missing",
    "bad compare",
    "empty compare",
    "zero folds",
]


@pytest.mark.parametrize("case", BAD_CASES)
def test_bad_input_exits_2_and_writes_nothing(tmp_path, capsys, case):
    inputs, extra, words = _bad_cases(tmp_path / "in")[case]
    out = tmp_path / "out"
    rc, stdout, err = run_fit([*inputs, "--out", out, *extra], capsys)
    assert rc == 2, (stdout, err)
    assert len([line for line in err.splitlines() if line.startswith("teacache-calib fit: ")]) == 1, err  # one line
    for word in words:
        assert word in err, (word, err)
    assert not out.exists() or not any(out.iterdir())


def test_existing_out_dir_keeps_only_previous_files_on_error(tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("x")
    few = make_traces(n_prompts=2)
    rc, _, _ = run_fit([write(few, tmp_path / "few.parquet"), "--out", out], capsys)
    assert rc == 2 and sorted(p.name for p in out.iterdir()) == ["keep.txt"]


# ------------------------------------------------------------------------------------------- compare


def _packaged_traces(scale: float) -> pd.DataFrame:
    packaged = load_packaged("flux1-dev")
    lo, hi = packaged.x_range
    hi = hi if np.isfinite(hi) else 0.4

    def truth(x, u, sigma):
        t = packaged.time_input(int(round(u * 11)), 12, sigma)
        return scale * packaged(x, t)

    return make_traces(truth=truth, variant="flux1-dev", noise=0.001, x_range=(max(lo, 0.02), hi))


@pytest.mark.parametrize(("scale", "verdict"), [(1.0, VERDICT_OK), (1.5, VERDICT_REFIT)])
def test_compare_packaged_verdicts(tmp_path, capsys, monkeypatch, scale, verdict):
    # flux1-dev's packaged function as committed, the published FLUX.1-dev tuple, set from where it is defined
    # (a local emit --variant flux1-dev rewrites teacache/coefficients/flux1.py)
    packaged = importlib.import_module(f"teacache.coefficients.{module_name('flux1-dev')}")
    monkeypatch.setattr(packaged, "RESCALE", _upstream.FLUX1_DEV_RESCALE)
    traces = write(_packaged_traces(scale), tmp_path / "t.parquet")
    rc, out, err = run_fit([traces, "--out", tmp_path / "o", "--compare", "packaged", "--no-plots"], capsys)
    assert rc == 0, err
    comp = json.loads((tmp_path / "o" / "fit.json").read_text())["comparison"]
    assert comp["verdict"] == verdict
    assert verdict in out.replace("\n", " ")
    assert comp["margin"] == DEFAULT_MARGIN and "flux1-dev" in comp["source"]
    if scale == 1.0:
        assert comp["r2"] > 0.99
    # the published FLUX.1 tuple decreases near x = 0: fit.json and the summary say where
    assert comp["safety"]["safe"] is False and comp["unsafe_intervals"]["decreasing"]
    assert "decreases with x on 0..0.0525" in out.replace("\n", " ")


def test_compare_other_sources_and_margin(tmp_path, capsys, full_fit):
    traces = full_fit["traces"]
    base = ["--out", tmp_path / "o", "--no-plots", "--degree", 2, "--mode", "free", "--form", "poly"]
    truth = "3.0,0.5,0.03"  # the generating polynomial: scores like the new fit
    assert run_fit([traces, *base, "--compare", truth], capsys)[0] == 0
    comp = json.loads((tmp_path / "o" / "fit.json").read_text())["comparison"]
    assert comp["verdict"] == VERDICT_OK_GIVEN and comp["r2"] > 0.99  # numbers, not the packaged coefficients
    assert "packaged" not in comp["verdict"]
    off = "3.0,0.5,0.06"
    assert run_fit([traces, *base, "--compare", off, "--margin", "0.2"], capsys)[0] == 0
    comp = json.loads((tmp_path / "o" / "fit.json").read_text())["comparison"]
    assert comp["verdict"] == VERDICT_REFIT and comp["margin"] == 0.2
    # a generous margin accepts the same coefficients
    assert run_fit([traces, *base, "--compare", off, "--margin", "1000"], capsys)[0] == 0
    assert json.loads((tmp_path / "o" / "fit.json").read_text())["comparison"]["verdict"] == VERDICT_OK_GIVEN
    # an earlier fit.json and a coefficient module are accepted too
    assert run_fit([traces, *base, "--compare", full_fit["out"] / "fit.json"], capsys)[0] == 0
    assert json.loads((tmp_path / "o" / "fit.json").read_text())["comparison"]["verdict"] == VERDICT_OK_GIVEN
    module = tmp_path / "coeffs.py"
    shutil.copy(fitmod.__file__.replace("calib/fit/command.py", "teacache/coefficients/flux1.py"), module)
    assert run_fit([traces, *base, "--compare", module], capsys)[0] == 0
    assert json.loads((tmp_path / "o" / "fit.json").read_text())["comparison"]["verdict"] == VERDICT_REFIT


def test_load_traces_drops_only_first_steps(tmp_path):
    frame = make_traces(branches=("cond",))
    traces = load_traces([write(frame, tmp_path / "t.parquet")])
    assert traces.dropped_first_steps == 6 * 2
    assert len(traces.frame) == len(frame) - 12 and traces.branch == "cond"


# ------------------------------------------------------------------ time-aware family and selection


def test_a_known_time_dependence_is_recovered():
    for seed in range(3):
        frame = cond_rows(make_traces(truth=interaction_truth, noise=0.002, rng_seed=seed)).reset_index(drop=True)
        frame = frame.drop(columns="sigma")
        result = fit_frame(frame, candidate_specs(True, False))
        sel = result["selected"]
        assert sel["form"] == FORM_POLY_STEP and sel["interaction_degree"] >= 1, sel["label"]
        rescale = rescale_from_fit({**result, "format_version": 1})
        xs, us = np.meshgrid(np.linspace(0.02, 0.4, 21), np.linspace(0.0, 1.0, 12))
        error = np.abs(rescale(xs.ravel(), us.ravel()) - interaction_truth(xs.ravel(), us.ravel(), None))
        assert error.max() < 5 * 0.002, (sel["label"], error.max())  # within a few noise sigmas everywhere
        # the best x-only candidate is far behind: the x*u term is real
        best_plain = max(c["cv_r2"] for c in result["candidates"] if c["form"] == "poly")
        assert sel["cv_r2"] > best_plain + 0.05


def test_with_no_time_dependence_the_plain_polynomial_is_chosen():
    for seed in range(4):
        sel = _selected(make_traces(noise=0.004, rng_seed=seed), drop=("sigma",))
        assert sel["form"] == "poly" and sel["degree"] == 2, sel["label"]  # quadratic truth, no time term


def test_the_parsimony_band_is_one_standard_error_of_the_best():
    cands = [
        {"cv_r2": 0.90, "cv_r2_se": 0.02, "n_params": 9},
        {"cv_r2": 0.885, "cv_r2_se": 0.02, "n_params": 4},  # 0.015 below the best: inside one SE (0.02)
        {"cv_r2": 0.875, "cv_r2_se": 0.02, "n_params": 2},  # 0.025 below: outside
    ]
    assert select(cands) == 1
    cands[0]["cv_r2_se"] = 0.01
    assert select(cands) == 0


def test_cv_standard_error_is_the_spread_of_fold_errors():
    from calib.fit.selection import cv_standard_error

    y = np.array([0.0, 1.0, 0.0, 1.0, 0.0, 1.0])
    folds = np.array([0, 0, 1, 1, 2, 2])
    oof = y + np.array([0.1, 0.1, 0.2, 0.2, 0.3, 0.3])  # fold MSEs 0.01, 0.04, 0.09
    fold_mse = np.array([0.01, 0.04, 0.09])
    expected = np.std(fold_mse, ddof=1) / np.sqrt(3) / np.var(y)
    assert cv_standard_error(y, oof, folds) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("interaction", [0, 1, 2])
def test_monotone_time_aware_candidate_never_decreases_in_x(interaction):
    def truth(x, u, sigma):  # decreasing in x late in the schedule: the free fit follows it
        return 0.3 + 0.8 * x - 2.0 * x * u**2 + 0.2 * u

    frame = cond_rows(make_traces(truth=truth, noise=0.003)).reset_index(drop=True)
    x, y, u = frame["x_rel_l1"].to_numpy(), frame["y_rel_l1"].to_numpy(), step_fraction(frame)
    free = FittedModel.fit(CandidateSpec(FORM_POLY_STEP, 3, "free", 2, interaction), x, y, u)
    mono = FittedModel.fit(CandidateSpec(FORM_POLY_STEP, 3, "monotone", 2, interaction), x, y, u)
    xs = np.linspace(x.min(), x.max(), 2001)
    slopes = [np.diff(mono.function(xs, v)).min() for v in np.linspace(u.min(), u.max(), 41)]
    assert min(slopes) >= -1e-12
    free_slopes = [np.diff(free.function(xs, v)).min() for v in np.linspace(u.min(), u.max(), 41)]
    assert min(free_slopes) < 0  # the constraint had something to do
    # least squares within the constraint: no worse than the free fit constrained by hand to a flat line
    flat = np.sum((y - np.mean(y)) ** 2)
    assert np.sum((mono.predict(x, u) - y) ** 2) <= flat


def test_interaction_terms_reach_the_gate_through_the_same_function():
    from teacache.gate import Gate

    frame = cond_rows(make_traces(truth=interaction_truth, noise=0.001)).reset_index(drop=True)
    x, y, u = frame["x_rel_l1"].to_numpy(), frame["y_rel_l1"].to_numpy(), step_fraction(frame)
    model = FittedModel.fit(CandidateSpec(FORM_POLY_STEP, 1, "free", 3, 1), x, y, u)
    rescale = model.function
    assert len(rescale.interaction_coefficients) == 1
    np.testing.assert_allclose(rescale(x, u), model.predict(x, u), rtol=1e-12, atol=1e-15)
    assert RescaleFunction.from_dict(rescale.to_dict()) == rescale
    gate = Gate(GateConfig(rel_l1_thresh=100.0, rescale=rescale))
    d = gate.decide(step=5, num_steps=12, x=0.2)
    assert d.rescaled == pytest.approx(model.predict(np.array([0.2]), np.array([5 / 11]))[0], rel=1e-12)
    # the floor over a schedule is the minimum over every step's time input: here at the last step, where
    # the x*u term has flattened the slope and the time term lowered the level
    late = RescaleFunction((1.0, 0.1), x_range=(0.01, 0.3), form=FORM_POLY_STEP, time_coefficients=(-0.05,),
                           interaction_coefficients=(-0.5,))  # fmt: skip
    per_step = [late.floor(s / 11)[0] for s in range(12)]
    floor = GateConfig(rel_l1_thresh=0.1, rescale=late).rescale_floor(12)
    assert floor == min(per_step) == per_step[-1] == pytest.approx(0.01 * 0.5 + 0.05) and floor < per_step[0]


def test_emit_writes_the_interaction_terms(tmp_path, capsys):
    import importlib.util

    from calib import emit as emitmod

    frame = make_traces(truth=interaction_truth, noise=0.002, branches=("cond",)).drop(columns="sigma")
    args = [write(frame, tmp_path / "t.parquet"), "--out", tmp_path / "o", "--form", "poly+step", "--degree", 1,
            "--time-degree", 3, "--interaction-degree", 1, "--mode", "free", "--no-plots"]  # fmt: skip
    assert run_fit(args, capsys)[0] == 0
    module_path = tmp_path / "tiny_flux1.py"
    assert emitmod.main([str(tmp_path / "o"), "--variant", "tiny-flux1", "--out", str(module_path)]) == 0
    spec = importlib.util.spec_from_file_location("emitted_interaction", module_path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert rescale_from_fit(tmp_path / "o") == module.RESCALE and module.RESCALE.interaction_coefficients


def test_fit_json_with_interaction_terms_round_trips(tmp_path, capsys):
    frame = make_traces(truth=interaction_truth, noise=0.002, branches=("cond",)).drop(columns="sigma")
    traces = write(frame, tmp_path / "t.parquet")
    args = [traces, "--out", tmp_path / "o", "--form", "poly+step", "--degree", 1, "--time-degree", 3,
            "--interaction-degree", 1, "--mode", "free", "--no-plots"]  # fmt: skip
    rc, _, err = run_fit(args, capsys)
    assert rc == 0, err
    fit = json.loads((tmp_path / "o" / "fit.json").read_text())
    sel = fit["selected"]
    assert sel["label"] == "poly1+step3+x*step1" and len(sel["interaction_coefficients"]) == 1
    assert rescale_from_fit(tmp_path / "o").interaction_coefficients == tuple(sel["interaction_coefficients"])


def test_existing_fit_files_still_load():
    paths = committed("results/**/fit/fit.json")
    assert paths
    for path in paths:  # the campaigns' fits and the decision comparison's older ones, written before regions
        loads_as_selected(path)
    # a file from before x*u terms and regions has neither field: its function keeps one x range at every step
    fit = json.loads(next(p for p in paths if rescale_from_fit(p).is_time_aware).read_text())
    for key in ("interaction_coefficients", "interaction_degree", "region"):
        fit["selected"].pop(key, None)
    fit["selected"]["label"] = None
    older = rescale_from_fit(fit)
    assert older.region is None and older.interaction_coefficients == () and older.is_time_aware


def test_scatter_plot_draws_each_out_of_range_piece_on_its_own(full_fit):
    from calib.fit.plots import scatter_figure

    fit = full_fit["fit"]
    frame = load_traces([full_fit["traces"]]).frame
    lo, hi = fit["selected"]["x_range"]
    assert lo > 0  # there is room left of the range, so both pieces exist
    dashed = [line for line in scatter_figure(fit, frame).axes[0].get_lines() if line.get_linestyle() == "--"]
    assert dashed
    for line in dashed:
        xs = np.asarray(line.get_xdata())
        assert (xs < lo).all() or (xs > hi).all(), "a dashed piece spans the calibrated range"
