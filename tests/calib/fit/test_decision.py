"""Decision scores from traces: the charged change, the oracle (against brute force), the ranking."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from calib.fit.candidates import CandidateSpec, FittedModel
from calib.fit.decision import decision_scores, decision_summary, score_rescales
from calib.fit.decision_oracle import oracle_per_run, pooled_oracle, pooled_sum, schedule_costs, skippable
from calib.fit.decision_plot import plot_decision_curves
from calib.fit.decision_runs import CHANGE_OUTPUT, CHANGE_RESIDUAL, RunTable, pack_runs
from calib.fit.selection import fit_frame, group_folds
from calib.traces.runs import step_fraction
from teacache.gate_batch import longest_streaks
from teacache.rescale import RescaleFunction

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def table_of(x, change, norm=None, num_steps=None) -> RunTable:
    x = np.asarray(x, dtype=float)
    change = np.asarray(change, dtype=float)
    n_runs, width = x.shape
    return RunTable(
        keys=[(f"r{i}",) for i in range(n_runs)],
        prompt_ids=np.array([f"p{i}" for i in range(n_runs)]),
        x=x,
        change=change,
        norm=np.ones_like(x) if norm is None else np.asarray(norm, dtype=float),
        sigma=None,
        num_steps=np.full(n_runs, width) if num_steps is None else np.asarray(num_steps),
        change_kind=CHANGE_RESIDUAL,
        norm_column=None,
    )


def traces(n_prompts=6, seeds=(0, 1), n_steps=20, time_weight=0.0, rng_seed=0, residual=True) -> pd.DataFrame:
    """Recorder-like rows; the true change is 0.01 + 0.4 x + time_weight (1 - u)^3 (+ small noise)."""
    rng = np.random.default_rng(rng_seed)
    rows = []
    for p in range(n_prompts):
        for seed in seeds:
            for step in range(1, n_steps):  # step 0 dropped, as the trace reader drops it
                u = step / (n_steps - 1)
                x = float(rng.uniform(0.02, 0.3))
                y = 0.01 + 0.4 * x + time_weight * (1 - u) ** 3 + float(rng.normal(0, 0.003))
                row = {"prompt_id": f"p{p}", "seed": seed, "step": step, "num_steps": n_steps, "x_rel_l1": x}
                row["y_rel_l1"] = y
                if residual:
                    row["residual_rel_l1"] = y
                    row["residual_norm"] = 1.0
                rows.append(row)
    return pd.DataFrame(rows)


# ----------------------------------------------------------------------------------- what is charged


def test_a_stretch_is_charged_its_change_relative_to_the_cached_residual():
    #           step: 0    1    2    3    4    5    6
    change = [[0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6]]
    norm = [[2.0, 4.0, 1.0, 1.0, 8.0, 1.0, 1.0]]
    mask = np.array([[[False, True, True, False, False, True, False]]])
    skipped, uncomputed, worst = schedule_costs(mask, table_of(np.zeros((1, 7)), change, norm))
    # stretch 1..2 reuses step 0's residual (norm 2): (0.1 + 0.2) / 2; stretch 5 reuses step 4's: 0.5 / 8
    first, second = (0.1 + 0.2) / 2.0, 0.5 / 8.0
    assert skipped.tolist() == [[3]]
    assert uncomputed[0, 0] == pytest.approx(first + second, rel=1e-15)
    assert worst[0, 0] == pytest.approx(first, rel=1e-15)


def test_pack_runs_places_rows_by_step_and_uses_the_residual_in_its_own_units():
    frame = pd.DataFrame({
        "prompt_id": ["a", "a", "a", "b", "b"],
        "step": [3, 1, 2, 1, 4],  # out of order, step 0 absent, run b has a hole at steps 2-3
        "x_rel_l1": [0.3, 0.1, 0.2, 0.5, 0.6],
        "y_rel_l1": [1.0, 1.0, 1.0, 1.0, 1.0],
        "residual_rel_l1": [0.03, 0.01, 0.02, 0.05, 0.06],
        "residual_norm": [4.0, 1.0, 2.0, 5.0, 7.0],
    })  # fmt: skip
    table, run_of_row = pack_runs(frame)
    assert table.change_kind == CHANGE_RESIDUAL and table.norm_column == "residual_norm"
    assert run_of_row.tolist() == [0, 0, 0, 1, 1]
    assert table.num_steps.tolist() == [4, 5]  # no num_steps column: max(step) + 1
    np.testing.assert_array_equal(table.x[0], [np.nan, 0.1, 0.2, 0.3, np.nan])
    np.testing.assert_array_equal(table.x[1], [np.nan, 0.5, np.nan, np.nan, 0.6])
    # a_j = residual_rel_l1_j * residual_norm_{j-1}; step 0 has no row: its norm is the next one's
    np.testing.assert_allclose(table.change[0], [0.0, 0.01 * 1.0, 0.02 * 1.0, 0.03 * 2.0, 0.0], rtol=1e-15)
    np.testing.assert_allclose(table.change[1, 4], 0.06 * 7.0, rtol=1e-15)  # step 3 has no row: the next norm

    output, _ = pack_runs(frame.drop(columns=["residual_rel_l1"]))
    assert output.change_kind == CHANGE_OUTPUT and output.norm_column is None  # no y_norm: relative units
    np.testing.assert_array_equal(output.change[0], [0.0, 1.0, 1.0, 1.0, 0.0])
    with pytest.raises(ValueError, match="two rows share a step"):
        pack_runs(pd.concat([frame, frame.iloc[:1]]))
    with pytest.raises(ValueError, match="change: expected"):
        pack_runs(frame, change="latent")


# -------------------------------------------------------------------------------------------- oracle


@st.composite
def small_tables(draw):
    n_runs = draw(st.integers(1, 3))
    width = draw(st.integers(1, 9))
    finite = st.floats(0.0, 1.0)
    x = [[draw(st.one_of(finite, st.just(math.nan))) for _ in range(width)] for _ in range(n_runs)]
    change = [[draw(st.floats(0.0, 2.0)) for _ in range(width)] for _ in range(n_runs)]
    norm = [[draw(st.floats(0.25, 4.0)) for _ in range(width)] for _ in range(n_runs)]
    num_steps = [draw(st.integers(1, width)) for _ in range(n_runs)]
    return table_of(x, change, norm, num_steps)


def brute_force(table: RunTable, first: int, last: int, cap: int) -> tuple[np.ndarray, np.ndarray]:
    """Least (uncomputed, worst) per run and number of skips, over every mask the rules allow."""
    allowed = skippable(table, first, last)
    width = table.x.shape[1]
    masks = np.array(list(itertools.product([False, True], repeat=width)), dtype=bool)  # [M, steps]
    best_sum = np.full((table.n_runs, width + 1), np.inf)
    best_worst = np.full((table.n_runs, width + 1), np.inf)
    for r in range(table.n_runs):
        ok = masks[~np.any(masks & ~allowed[r], axis=1) & (longest_streaks(masks) <= cap)]
        one = table.subset(np.array([r]))
        k, uncomputed, worst = schedule_costs(ok[:, None, :], one)
        for kk, u, w in zip(k[:, 0], uncomputed[:, 0], worst[:, 0], strict=True):
            best_sum[r, kk] = min(best_sum[r, kk], u)
            best_worst[r, kk] = min(best_worst[r, kk], w)
    return best_sum, best_worst


@settings(max_examples=150, deadline=None)
@given(table=small_tables(), first=st.integers(0, 3), last=st.integers(0, 3), cap=st.integers(1, 4))
def test_oracle_is_the_best_schedule_for_every_number_of_skips(table, first, last, cap):
    expected_sum, expected_worst = brute_force(table, first, last, cap)
    got_sum, got_worst = oracle_per_run(table, first, last, cap)
    np.testing.assert_array_equal(got_sum, expected_sum)  # exact: both add the same stretch values in order
    np.testing.assert_array_equal(got_worst, expected_worst)


def test_the_oracle_obeys_the_rules_every_gate_obeys():
    """First and last steps computed, no skip without a finite signal, at most the cap in a row."""
    table = table_of([[0.1, 0.1, math.nan, 0.1, 0.1, 0.1]], [[1.0] * 6])  # skippable: steps 1, 3, 4
    for cap, most in ((2, 3), (1, 2)):
        uncomputed, _ = oracle_per_run(table, 1, 1, cap)
        assert np.flatnonzero(np.isfinite(uncomputed[0])).tolist() == list(range(most + 1))
    uncomputed, _ = oracle_per_run(table, 0, 0, 8)  # step 0 has nothing cached before it, whatever the rules
    assert np.flatnonzero(np.isfinite(uncomputed[0])).tolist() == [0, 1, 2, 3, 4]


def test_pooled_oracle_is_the_best_split_over_runs():
    rng = np.random.default_rng(3)
    per_run = np.cumsum(rng.uniform(0, 1, (3, 5)), axis=1)
    per_run[1, 4] = np.inf  # run 1 cannot skip 4
    pooled = pooled_oracle(per_run)
    best = np.full(13, np.inf)
    for ks in itertools.product(range(5), repeat=3):
        best[sum(ks)] = min(best[sum(ks)], pooled_sum(np.array([per_run[r, k] for r, k in enumerate(ks)])))
    np.testing.assert_array_equal(pooled, best[: pooled.size])
    assert pooled.size == 12  # 4 + 3 + 4 skips at most


# ----------------------------------------------------------------------------------------- scoring


TRUTH = RescaleFunction((0.4, 0.01))  # the change the synthetic traces are made of
CONSTANT = RescaleFunction((0.1,))  # a fixed interval: blind to the signal
INVERTED = RescaleFunction((-0.4, 0.2))  # skips where the change is largest


def test_the_function_that_knows_the_change_ranks_first_and_the_oracle_lies_below_all():
    table, _ = pack_runs(traces())
    fold = np.arange(table.n_runs) % 3
    result = score_rescales(table, {"constant": CONSTANT, "inverted": INVERTED, "truth": TRUTH}, fold)
    scores = {c["label"]: c["decision_excess"] for c in result["candidates"]}
    assert scores["truth"] < scores["constant"] < scores["inverted"]
    assert result["selected"] == "truth"
    assert result["skipped_range"][1] > 0.8 * result["n_skippable"]  # scored over most of the curve
    for c in result["candidates"]:
        for key in ("uncomputed", "worst"):
            oracle = np.array(result["oracle"][key])
            at = oracle[np.asarray(c["skipped"])]
            assert np.all(np.asarray(c[key]) >= at), (c["label"], key)  # exactly, at every threshold
        assert c["skipped"][0] == 0 and c["uncomputed"][0] == 0.0  # threshold 0 computes everything


def test_decision_scores_fit_on_other_prompts_and_prefer_the_time_aware_form_when_time_matters():
    frame = traces(time_weight=0.4)
    specs = [CandidateSpec("poly", 1), CandidateSpec("poly", 2), CandidateSpec("poly+step", 2, "free", 2)]
    result = decision_scores(frame, specs)
    scores = {c["label"]: c["decision_excess"] for c in result["candidates"]}
    assert result["selected"] == "poly2+step2"
    assert scores["poly2+step2"] < min(scores["poly1-free"], scores["poly2-free"])
    assert result["n_folds"] == 6  # leave one prompt out, as teacache-calib fit deals the folds
    same = decision_scores(frame, specs, group_folds(frame["prompt_id"].to_numpy()))
    assert [c["decision_excess"] for c in same["candidates"]] == list(scores.values())
    # a candidate fitted on all prompts would have seen the held-out ones: the per-fold fit differs from it
    fitted = fit_frame(frame, specs[2:])["selected"]
    whole = RescaleFunction(tuple(fitted["coefficients"]), tuple(fitted["x_range"]), "poly+step",
                            tuple(fitted["time_coefficients"]))  # fmt: skip
    table, run_of_row = pack_runs(frame)
    run_fold = np.zeros(table.n_runs, dtype=int)
    run_fold[run_of_row] = group_folds(frame["prompt_id"].to_numpy())
    in_sample = score_rescales(table, {"poly2+step2": whole}, run_fold)["candidates"][0]["decision_excess"]
    assert in_sample != scores["poly2+step2"]


def test_the_models_fit_frame_fitted_per_fold_score_exactly_as_fitting_them_again():
    frame = traces(time_weight=0.4)
    specs = [
        CandidateSpec("poly", 2, "monotone"),
        CandidateSpec("poly+step", 2, "monotone", 2, 1),
        CandidateSpec("mono+step", 2, "monotone", 2),
    ]
    folds = group_folds(frame["prompt_id"].to_numpy())
    fold_models: dict = {}
    fit_frame(frame, specs, fold_models=fold_models)
    x, y = frame["x_rel_l1"].to_numpy(dtype=float), frame["y_rel_l1"].to_numpy(dtype=float)
    u = step_fraction(frame)
    for spec in specs:
        again = [FittedModel.fit(spec, x[folds != f], y[folds != f], u[folds != f]) for f in np.unique(folds)]
        assert fold_models[spec.label] == again  # the same fields, float for float
    reused = decision_scores(frame, specs, folds, fold_models=fold_models)
    assert reused == decision_scores(frame, specs, folds)
    with pytest.raises(ValueError, match="one model per fold"):
        decision_scores(frame, specs, folds, fold_models={specs[0].label: fold_models[specs[0].label][:2]})


def test_compare_scores_given_coefficients_as_they_are_and_the_summary_drops_the_curves():
    frame = traces()
    result = decision_scores(frame, [CandidateSpec("poly", 1, "free")], compare={"inverted": INVERTED})
    assert [c["label"] for c in result["candidates"]] == ["poly1-free", "inverted"]
    assert result["selected"] == "poly1-free"
    summary = decision_summary(result)
    assert "oracle" not in summary and set(summary["candidates"][0]) == {
        "label",
        "decision_excess",
        "decision_excess_worst",
        "max_skipped",
        "selected",
    }


def test_plot_of_the_curves_is_a_png():
    table, _ = pack_runs(traces(n_prompts=3, seeds=(0,)))
    result = score_rescales(table, {"truth": TRUTH, "constant": CONSTANT}, n_thresholds=20)
    png = plot_decision_curves(result)
    assert png.startswith(PNG_MAGIC) and len(png) > 10_000


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"candidates": {}}, "candidates: expected at least one"),
        ({"candidates": {"t": [TRUTH]}, "run_fold": np.array([0, 1, 0])}, r"candidates\['t'\]: expected"),
        ({"run_fold": np.array([0, 1])}, "run_fold: expected one fold per run"),
        ({"skip_range": (0.5, 0.2)}, "skip_range: expected 0 <= low < high <= 1"),
        ({"max_consecutive_skips": 0}, "max_consecutive_skips: expected an integer >= 1"),
    ],
)
def test_bad_arguments_name_the_argument(kwargs, message):
    table, _ = pack_runs(traces(n_prompts=3, seeds=(0,)))
    args = {"candidates": {"truth": TRUTH}, **kwargs}
    with pytest.raises(ValueError, match=message):
        score_rescales(table, **args)
