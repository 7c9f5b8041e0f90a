"""bench.studies.criteria (candidates, fit options, thresholds per level) and bench.studies.across_models."""

from __future__ import annotations

import functools
import json

import numpy as np
import pandas as pd
import pytest

from bench.studies import across_models, criteria, decision_check
from calib.fit import FitOptions
from calib.fit.candidates import CandidateSpec, candidate_specs
from calib.fit.result import rescale_from_fit
from teacache.gate import GateConfig, replay
from teacache.rescale import RescaleFunction
from tests.bench.studies.test_decision_check import candidate, fit_document, sweep


def test_every_candidate_label_maps_back_to_its_fit_options():
    specs = candidate_specs(True, True, with_splines=True)
    assert any(spec.form == "mono+step" for spec in specs)
    for spec in specs:
        options = criteria.fit_options(spec.label)
        FitOptions(**options)  # fields the fit API takes
        rebuilt = CandidateSpec(
            form=options["form"], degree=options["degree"], mode=options["mode"],
            time_degree=options.get("time_degree", 0), interaction_degree=options.get("interaction_degree", 0),
        )  # fmt: skip
        assert rebuilt.label == spec.label
    with pytest.raises(ValueError, match="not one of"):
        criteria.fit_options("spline3")


def _candidate(label: str, cv: float, excess: float, safe: bool = True) -> dict:
    return {"label": label, "cv_r2": cv, "decision_excess": excess, "safety": {"safe": safe}}


def test_candidates_are_each_criterions_safe_pick_and_the_best_of_the_other_kind():
    fit = {
        "candidates": [
            _candidate("poly2+step3", 0.86, 0.33), _candidate("poly1-origin", 0.44, 0.18),
            _candidate("poly4-free", 0.74, 0.40, safe=False), _candidate("poly2-origin", 0.50, 0.19),
            _candidate("poly1+step4-monotone", 0.80, 0.30),
        ],
        "selection": {"selected_by": {"cv_r2": "poly2+step3", "decision_excess": "poly1-origin"}},
    }  # fmt: skip
    chosen = criteria.choose_candidates(fit)
    assert list(chosen) == ["poly2+step3", "poly1-origin", "poly2-origin", "poly1+step4-monotone"]
    assert "poly4-free" not in chosen  # unsafe: never a candidate


def test_named_candidates_are_compared_with_the_fits_selection_only():
    fit = {
        "candidates": [_candidate("mono1+step16", 0.89, 0.33), _candidate("poly2+step3", 0.86, 0.34),
                       _candidate("poly1-origin", 0.44, 0.18)],
        "selected": {"label": "mono1+step16"},
        "options": {"select": "cv_r2"},
        "selection": {"selected_by": {"cv_r2": "mono1+step16", "decision_excess": "poly1-origin"}},
    }  # fmt: skip
    chosen = criteria.choose_candidates(fit, ["poly2+step3"])
    assert list(chosen) == ["mono1+step16", "poly2+step3"]
    assert chosen["mono1+step16"] == "the fit's selection (--select cv_r2)"
    with pytest.raises(ValueError, match="'poly3-free' is not one of the candidates of --fit"):
        criteria.choose_candidates(fit, ["poly3-free"])


def _replayed_thresholds(rescale, traces, levels, skip_first):
    """The gate itself, one threshold and run at a time: what thresholds_for_levels did before gate_batch."""
    runs = [
        (group.sort_values("step")["x_rel_l1"].tolist(), group.sort_values("step")["sigma"].to_numpy())
        for _, group in traces.groupby("run_id", sort=True)
    ]

    @functools.cache  # each level's search walks the grid from its start again
    def median_computed(threshold):
        counts = []
        for xs, sigmas in runs:
            config = GateConfig(threshold, rescale, skip_first_n_steps=skip_first)
            counts.append(sum(d.compute for d in replay(config, xs, sigmas=sigmas)))
        return float(np.median(counts))

    grid = sorted({float(f"{t:.4g}") for t in np.geomspace(1e-4, 5.0, 600)})
    out = []
    for level in sorted(levels, reverse=True):
        found = next(((t, c) for t in grid if (c := median_computed(t)) <= level), None)
        if found is not None:
            out.append((level, *found))
    return out


@pytest.mark.parametrize("label", ["mono1+step16", "poly2+step3", "poly2+sigma2"])
def test_thresholds_for_levels_equal_the_gates_replay(label):
    from tests import ROOT

    fit = json.loads(
        (ROOT / "results" / "comparisons" / "forms-front" / "tiny-shapes" / "fit" / "fit.json").read_text()
    )
    rescale = rescale_from_fit({"selected": next(c for c in fit["candidates"] if c["label"] == label)})
    traces = pd.read_parquet(
        ROOT / "results" / "cpu-amd-epyc-2c" / "tiny-shapes" / "0.24.0" / "traces" / "traces.parquet"
    )
    traces = traces[traces["run_id"].isin(sorted(traces["run_id"].unique())[:2])]
    traces = traces.assign(x_rel_l1=traces["x_rel_l1"].where(traces["step"] != 9))  # a broken step: NaN
    levels = [18, 13, 10, 8, 6]
    assert criteria.thresholds_for_levels(rescale, traces, levels, 2) == _replayed_thresholds(
        rescale, traces, levels, 2
    )


def test_thresholds_reach_the_levels_by_replay():
    xs = [float("nan")] + [0.05] * 27
    traces = pd.DataFrame({"run_id": "r", "step": range(28), "x_rel_l1": xs, "sigma": 1.0})
    rescale = RescaleFunction(coefficients=(1.0, 0.0), x_range=(0.0, 1.0))
    found = criteria.thresholds_for_levels(rescale, traces, [18, 10], skip_first=2)
    assert [level for level, _, _ in found] == [18, 10]
    assert all(computed <= level for level, _, computed in found)
    assert found[0][1] < found[1][1]  # fewer computed steps need a higher threshold


def _criteria_folder(tmp_path, name: str, gap: float):
    sweep(tmp_path / name / "a", "poly1-origin", 0.0)
    sweep(tmp_path / name / "b", "poly2+step3", gap)
    scores = fit_document([candidate("poly1-origin", 0.4, 0.2), candidate("poly2+step3", 0.9, 0.3)])
    (tmp_path / name / "full.json").write_text(json.dumps(scores))
    out = tmp_path / name / "criteria"
    argv = ["--scores", str(tmp_path / name / "full.json"), "--out", str(out)]
    for label, d in (("poly1-origin", "a"), ("poly2+step3", "b")):
        argv += ["--candidate", f"{label}={tmp_path / name / d}={tmp_path / name / d / 'fit.json'}"]
    assert decision_check.main(argv) == 0
    baselines = tmp_path / name / "baselines"
    baselines.mkdir()
    pd.DataFrame([{"speed": "ideal_speedup_median", "rescale": "x/poly1-origin/fit.json", "threshold": 0.02,
                   "teacache_speedup": 2.0, "teacache_quality": 0.99, "baseline_arm": "fewer-steps",
                   "baseline_setting": 14, "baseline_speedup": 2.0, "baseline_quality": 0.98, "n_pairs": 8,
                   "difference": 0.01, "ci_low": 0.005, "ci_high": 0.02, "outcome": "beats"}]).to_csv(
        baselines / "baselines_comparison.csv", index=False)  # fmt: skip
    return f"{name}={out}={baselines}"


def test_across_models_names_the_rule_both_models_support(tmp_path, capsys):
    argv = [
        "--model", _criteria_folder(tmp_path, "one", 0.004),
        "--model", _criteria_folder(tmp_path, "two", 0.006),
        "--out", str(tmp_path / "out"),
    ]  # fmt: skip
    assert across_models.main(argv) == 0
    evidence = json.loads((tmp_path / "out" / "evidence.json").read_text())
    assert evidence["supported_rule"]["criterion"] == "decision_excess"
    text = (tmp_path / "out" / "summary.md").read_text()
    assert "| one | poly1-origin | 0.02 |" in text and "`decision_excess`" in text


def test_across_models_says_when_the_models_disagree(tmp_path):
    argv = [
        "--model", _criteria_folder(tmp_path, "one", 0.004),
        "--model", _criteria_folder(tmp_path, "two", -0.006),
        "--out", str(tmp_path / "out"),
    ]  # fmt: skip
    assert across_models.main(argv) == 0
    evidence = json.loads((tmp_path / "out" / "evidence.json").read_text())
    assert evidence["supported_rule"]["criterion"] is None


def test_a_missing_criteria_folder_is_refused_in_one_line(tmp_path, capsys):
    argv = ["--model", f"m={tmp_path}={tmp_path}", "--out", str(tmp_path / "out")]
    assert across_models.main(argv) == 2
    assert "verdicts.json does not exist" in capsys.readouterr().err and not (tmp_path / "out").exists()


def test_a_criterions_pick_is_the_fits_own_selection_where_it_was_swept():
    scores = pd.DataFrame(
        {"cv_r2": [0.86, 0.87, 0.44], "decision_excess": [0.33, 0.34, 0.18],
         "fitted": ["poly2+step3", "poly4+step5", "poly1-origin"]},
        index=["poly2+step3", "poly4+step5", "poly1-origin"],
    )  # fmt: skip
    rule = {"cv_r2": "poly2+step3", "decision_excess": "poly1-origin"}
    assert decision_check.criterion_picks(scores, rule) == rule  # the one-standard-error pick, not the best cv R^2
    assert decision_check.criterion_picks(scores)["cv_r2"] == "poly4+step5"  # no rule given: the best swept score


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"--levels": "5,a"}, "--levels: expected comma-separated computed step counts"),
        ({"--model": "tiny-shapes"}, "was fitted for 'tiny-open-flux2', not --model 'tiny-shapes'"),
        ({"--traces": "missing.parquet"}, "--traces: missing.parquet does not exist"),
        ({"--candidate": "mono1+step99"}, "--candidate: 'mono1+step99' is not one of the candidates of --fit"),
    ],
)
def test_bad_input_is_one_line_before_any_fit_or_model(tmp_path, capsys, change, message):
    from tests import ROOT

    folder = ROOT / "results" / "cpu-amd-epyc-2c" / "tiny-open-flux2" / "0.24.0"
    options = {
        "--model": "tiny-open-flux2",
        "--fit": str(folder / "fit" / "fit.json"),
        "--traces": str(folder / "traces" / "traces.parquet"),
        "--out": str(tmp_path / "out"),
        **change,
    }
    assert criteria.main([v for pair in options.items() for v in pair]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1 and not (tmp_path / "out").exists()


def test_a_folder_made_with_other_settings_is_refused_before_anything_is_written(tmp_path, capsys):
    from tests import ROOT

    folder = ROOT / "results" / "cpu-amd-epyc-2c" / "tiny-open-flux2" / "0.24.0"
    out = tmp_path / "out"
    out.mkdir()
    earlier = {"model": "tiny-open-flux2", "seeds": "0"}
    (out / criteria.SETTINGS_NAME).write_text(json.dumps(earlier))
    argv = ["--model", "tiny-open-flux2", "--fit", str(folder / "fit" / "fit.json"), "--traces",
            str(folder / "traces" / "traces.parquet"), "--out", str(out)]  # fmt: skip
    assert criteria.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "was made with other settings" in err and "seeds" in err and len(err.splitlines()) == 1
    assert [p.name for p in out.iterdir()] == [criteria.SETTINGS_NAME]
    assert json.loads((out / criteria.SETTINGS_NAME).read_text()) == earlier


def test_across_models_on_one_model_says_model_not_models(tmp_path):
    argv = ["--model", _criteria_folder(tmp_path, "one", 0.004), "--out", str(tmp_path / "out")]
    assert across_models.main(argv) == 0
    title = (tmp_path / "out" / "summary.md").read_text().splitlines()[0]
    assert title.endswith("on 1 trained model"), title


@pytest.mark.parametrize("model", ["tiny-open-flux1", "tiny-open-flux2", "tiny-shapes"])
def test_the_default_sweep_prompts_are_the_models_campaign_sweep_set(model):
    from calib.run.prompts import SETS
    from teacache import variants

    name = criteria.sweep_prompts(variants.get(model))
    assert name == variants.get(model).campaign_sizes.sweep_prompts and name in SETS


def test_a_model_without_a_campaign_sweep_set_must_name_its_prompts():
    from teacache import variants
    from teacache.errors import InputError

    with pytest.raises(InputError, match="--prompts"):
        criteria.sweep_prompts(variants.get("dev"))


@pytest.mark.parametrize("argv, said", [(["--prompts", "no-such-set"], "--prompts"), (["--seeds", "x"], "--seeds")])
def test_bad_prompts_or_seeds_are_refused_before_any_fit_is_written(argv, said, tmp_path, monkeypatch, capsys):
    from pathlib import Path

    from tests.conftest import refused

    campaign = Path(__file__).resolve().parents[3] / "results/cpu-amd-epyc-2c/tiny-open-flux2/0.24.0"
    line = refused(
        "teacache-bench criteria",
        ["--model", "tiny-open-flux2", "--fit", str(campaign / "fit/fit.json"),
         "--traces", str(campaign / "traces/traces.parquet"), "--out", "criteria", *argv],
        tmp_path, monkeypatch, capsys,
    )  # fmt: skip
    assert said in line


def test_a_folder_from_before_fingerprints_is_checked_against_its_settings_json(tmp_path):
    """Without "candidates" (none were named) its settings.json resumes the same run and refuses a named one."""
    from calib.run.fingerprint import SettingsMismatch

    earlier = {"model": "tiny-open-flux2", "fit_sha256": "a", "traces_sha256": "b", "prompts": "tiny-open-sweep",
               "seeds": "1", "levels": [6, 8]}  # fmt: skip
    (tmp_path / criteria.SETTINGS_NAME).write_text(json.dumps(earlier))
    assert criteria.FOLDER.check(tmp_path, {**earlier, "candidates": None}).status == "adopt"
    with pytest.raises(SettingsMismatch, match=r"as its settings\.json from an earlier version says\): candidates"):
        criteria.FOLDER.check(tmp_path, {**earlier, "candidates": ["poly1-free"]})


def test_every_committed_criteria_folder_is_read_by_its_settings_json():
    """The committed folders predate fingerprints: each is the command's own and judged by what it recorded."""
    from teacache.outputs import check_folder_is_own
    from tests import committed

    folders = [p.parent for p in committed("results/**/settings.json") if (p.parent / "plan.json").is_file()]
    assert folders
    for folder in folders:
        check_folder_is_own(folder, criteria.WRITES)
        recorded = {"candidates": None, **json.loads((folder / criteria.SETTINGS_NAME).read_text())}
        assert criteria.FOLDER.check(folder, recorded).status == "adopt"


def test_ctrl_c_while_refitting_is_one_line_and_exit_130(tmp_path, monkeypatch, capsys):
    from tests import ROOT

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(criteria, "fit_traces", interrupted)
    folder = ROOT / "results" / "cpu-amd-epyc-2c" / "tiny-open-flux2" / "0.24.0"
    argv = ["--model", "tiny-open-flux2", "--fit", str(folder / "fit" / "fit.json"), "--traces",
            str(folder / "traces" / "traces.parquet"), "--out", str(tmp_path / "out")]  # fmt: skip
    assert criteria.main(argv) == 130
    err = capsys.readouterr().err.strip()
    assert err.startswith("teacache-bench criteria: interrupted:") and len(err.splitlines()) == 1, err
