"""The combined front: dominated points, the best baseline at equal or greater speed, the verdict."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bench.report import front, front_plots

coordinate = st.one_of(st.sampled_from([1.0, 1.5, 2.0, 0.9, 0.95]), st.floats(0.0, 4.0), st.just(math.nan))
point_lists = st.lists(st.tuples(coordinate, coordinate), min_size=1, max_size=25)


def _dominates(a, b) -> bool:
    return a[0] >= b[0] and a[1] >= b[1] and (a[0] > b[0] or a[1] > b[1])


def _frame(pts) -> pd.DataFrame:
    return pd.DataFrame({"speedup_median": [p[0] for p in pts], "ssim_median": [p[1] for p in pts]})


@settings(max_examples=200, deadline=None)
@given(pts=point_lists)
def test_a_point_is_on_the_front_exactly_when_nothing_dominates_it(pts):
    on = front.mark_front(_frame(pts)).to_list()
    finite = [p for p in pts if not (math.isnan(p[0]) or math.isnan(p[1]))]
    for p, flag in zip(pts, on, strict=True):
        if math.isnan(p[0]) or math.isnan(p[1]):
            assert not flag  # a run without a speed or a quality is never on the front
        else:
            assert flag == (not any(_dominates(q, p) for q in finite))


@settings(max_examples=200, deadline=None)
@given(pts=point_lists, seed=st.integers(0, 2**16))
def test_every_dominated_point_is_dominated_by_a_front_point_and_order_does_not_matter(pts, seed):
    frame = _frame(pts)
    on = front.mark_front(frame).to_numpy()
    front_points = [pts[i] for i in np.flatnonzero(on)]
    for i, p in enumerate(pts):
        if not on[i] and not (math.isnan(p[0]) or math.isnan(p[1])):
            assert any(_dominates(q, p) for q in front_points)
    order = np.random.default_rng(seed).permutation(len(pts))
    shuffled = front.mark_front(frame.iloc[order].reset_index(drop=True)).to_numpy()
    assert (shuffled == on[order]).all()


def test_equal_points_both_stay_on_the_front_and_a_strictly_better_one_removes_both():
    assert front.mark_front(_frame([(2.0, 0.9), (2.0, 0.9)])).to_list() == [True, True]
    assert front.mark_front(_frame([(2.0, 0.9), (2.0, 0.9), (2.0, 0.91)])).to_list() == [False, False, True]


# --- comparisons over a synthetic sweep ------------------------------------------------------------------
BASE = np.array([0.90, 0.97, 0.93, 0.99, 0.95, 0.91, 0.98, 0.94])  # per-pair quality: very spread


def _runs(arms: dict) -> pd.DataFrame:
    """arms: (arm, setting) -> (speedup, per-pair ssim offset from BASE, computed)."""
    rows = []
    for i, value in enumerate(BASE):
        pair = f"p{i}"
        rows.append({"pair_id": pair, "kind": "vanilla", "arm": "vanilla", "arm_setting": "", "speedup": 1.0,
                     "ideal_speedup": 1.0, "computed": 28, "ssim": 1.0, "cosine": 1.0, "psnr": math.inf})  # fmt: skip
        for (arm, setting), (speed, offset, computed) in arms.items():
            rows.append({"pair_id": pair, "kind": arm, "arm": arm, "arm_setting": setting, "speedup": speed,
                         "ideal_speedup": 28 / computed, "computed": computed, "ssim": value + offset,
                         "cosine": 1.0, "psnr": 30.0})  # fmt: skip
    frame = pd.DataFrame(rows)
    return frame.sample(frac=1.0, random_state=0).reset_index(drop=True)  # row order must not matter


ARMS = {
    ("teacache", "0.02"): (2.0, 0.0, 13),
    ("teacache", "0.05"): (3.0, -0.06, 7),
    ("teacache", "0.2"): (6.0, -0.2, 3),
    ("fewer-steps", "14"): (1.95, 0.005, 14),  # better but slower than TeaCache 0.02: not a candidate
    ("fewer-steps", "13"): (2.1, -0.01, 13),
    ("fewer-steps", "10"): (2.8, -0.03, 10),
    ("fewer-steps", "7"): (4.0, -0.04, 7),
    ("static", "even:13"): (2.05, -0.02, 13),
}


def test_the_best_baseline_at_equal_or_greater_speed_is_compared_pair_by_pair():
    table = front.compare(_runs(ARMS), baselines=("fewer-steps", "static"))
    fewer = table[table["baseline_arm"] == "fewer-steps"].set_index("threshold")
    # at 2.0x: "13" (2.1x, -0.01) and "10", "7" qualify; "14" is slower; the best is "13"
    assert fewer.loc[0.02, "baseline_setting"] == "13" and fewer.loc[0.02, "n_pairs"] == len(BASE)
    # pairs differ by exactly +0.01 although the qualities spread over 0.09: only pairing gives a zero-width CI
    assert fewer.loc[0.02, ["difference", "ci_low", "ci_high"]].to_numpy() == pytest.approx([0.01] * 3)
    assert fewer.loc[0.02, "outcome"] == "beats"
    assert fewer.loc[0.05, "baseline_setting"] == "7" and fewer.loc[0.05, "outcome"] == "loses"
    assert fewer.loc[0.05, "difference"] == pytest.approx(-0.02)
    assert fewer.loc[0.2, "outcome"] == "no baseline"
    static = table[table["baseline_arm"] == "static"].set_index("threshold")
    assert static.loc[0.02, "baseline_setting"] == "even:13" and static.loc[0.02, "difference"] == pytest.approx(0.02)


def test_noisy_pairs_that_straddle_zero_are_a_tie():
    arms = {("teacache", "0.02"): (2.0, 0.0, 13), ("fewer-steps", "13"): (2.1, 0.0, 13)}
    runs = _runs(arms)
    noise = np.array([0.02, -0.02, 0.01, -0.01, 0.015, -0.015, 0.005, -0.005])
    tc = runs["arm"] == "teacache"
    runs.loc[tc, "ssim"] += noise[runs.loc[tc, "pair_id"].str[1:].astype(int).to_numpy()]
    row = front.compare(runs, baselines=("fewer-steps",)).iloc[0]
    assert row["outcome"] == "tie" and row["ci_low"] < 0 < row["ci_high"]
    same = front.compare(_runs(arms), baselines=("fewer-steps",)).iloc[0]  # identical images: no winner
    assert same["outcome"] == "tie" and same["ci_low"] == same["ci_high"] == 0


def test_the_verdict_says_where_teacache_wins_loses_and_was_not_compared():
    table = front.compare(_runs(ARMS), baselines=("fewer-steps",))
    text = front.verdict(table, "fewer-steps")
    assert text.startswith("On this model TeaCache beats fewer steps at 1 of 2 thresholds compared: +0.010 ssim")
    assert "at 2.00x (threshold 0.02, against fewer-steps 13 at 2.10x)" in text
    assert "At threshold 0.05 it loses to fewer steps: -0.020 ssim" in text
    assert "No fewer-steps setting was as fast as TeaCache at threshold 0.2" in text
    only_win = front.compare(_runs({k: v for k, v in ARMS.items() if k[1] != "0.05"}), baselines=("fewer-steps",))
    assert front.verdict(only_win).startswith("On this model TeaCache beats fewer steps at every threshold compared")
    assert front.verdict(table, "step-cache") == "No step-cache runs to compare TeaCache with."


def test_points_summarise_each_setting_and_keep_rescale_functions_apart():
    runs = _runs(ARMS)
    tc = runs[runs["arm"] == "teacache"].assign(rescale="fit-a")
    other = tc.assign(rescale="degree-4", ssim=tc["ssim"] - 0.001)
    runs = pd.concat([runs[runs["arm"] != "teacache"].assign(rescale=None), tc, other], ignore_index=True)
    pts = front.points(runs)
    assert len(pts) == 3 * 2 + 5 and (pts["n"] == len(BASE)).all()
    at = pts[(pts["arm"] == "teacache") & (pts["rescale"] == "degree-4") & (pts["arm_setting"] == "0.02")].iloc[0]
    assert at["ssim_median"] == pytest.approx(np.median(BASE) - 0.001)
    assert at["ideal_speedup_median"] == pytest.approx(28 / 13)
    table = front.compare(runs, baselines=("fewer-steps",))
    assert sorted(table["rescale"].unique()) == ["degree-4", "fit-a"]


def test_front_plots_draw_every_arm():
    runs = _runs(ARMS)
    pts = front.points(runs)
    fig = front_plots.combined_front(pts)
    labels = fig.axes[0].get_legend_handles_labels()[1]
    assert {"TeaCache", "fewer steps", "a static schedule", "Pareto front"} <= set(labels)
    assert len(front_plots.front_panels(pts).axes) == 4
    ideal = front_plots.combined_front(pts, speed="ideal_speedup_median").axes[0]
    assert ideal.get_xlabel().startswith("ideal speedup")
    assert front_plots.rescale_fronts(pts).axes[0].get_legend_handles_labels()[1] == ["TeaCache front"]


def _union_area(pts, rs, rq) -> float:
    """Exact area of the union of rectangles [rs, s] x [rq, q], cell by cell on the points' own grid."""
    pts = [(s, q) for s, q in pts if not (math.isnan(s) or math.isnan(q)) and s > rs and q > rq]
    xs = sorted({rs, *(s for s, _ in pts)})
    ys = sorted({rq, *(q for _, q in pts)})
    area = 0.0
    for x0, x1 in zip(xs, xs[1:], strict=False):
        for y0, y1 in zip(ys, ys[1:], strict=False):
            if any(s >= x1 and q >= y1 for s, q in pts):
                area += (x1 - x0) * (y1 - y0)
    return area


@settings(max_examples=200, deadline=None)
@given(pts=point_lists)
def test_the_front_area_is_the_union_of_what_each_point_dominates(pts):
    speed, quality = [p[0] for p in pts], [p[1] for p in pts]
    assert front.hypervolume(speed, quality, 1.0, 0.5) == pytest.approx(_union_area(pts, 1.0, 0.5), abs=1e-12)


def test_the_rescale_comparison_says_whether_the_cv_choice_has_the_better_front():
    runs = _runs({k: v for k, v in ARMS.items() if k[0] == "teacache"})
    better = runs.assign(rescale="degree-4", ssim=runs["ssim"] + 0.01)
    runs = pd.concat([runs.assign(rescale="fit.json"), better], ignore_index=True)
    table = front.rescale_areas(front.points(runs))
    assert list(table["rescale"]) == ["degree-4", "fit.json"] and table["area"].iloc[0] > table["area"].iloc[1]
    assert list(table["on_joint_front"]) == [3, 0]
    assert front.rescale_verdict(table, "fit.json").startswith(
        "The rescale function selected by cross-validation (fit.json) does not give the best front: degree-4"
    )
    assert front.rescale_verdict(table, "degree-4").startswith("The rescale function selected by cross-validation "
                                                               "(degree-4) also gives the best front")  # fmt: skip


def test_comparing_at_equal_work_uses_the_ideal_speedup_and_says_so():
    table = front.compare(_runs(ARMS), baselines=("fewer-steps",), speed="ideal_speedup_median")
    at = table.set_index("threshold")
    # ideal 28/13 for TeaCache 0.02: "13" (28/13) qualifies, "14" (2.0) does not
    assert at.loc[0.02, "baseline_setting"] == "13" and at.loc[0.05, "baseline_setting"] == "7"
    assert "at 2.15x ideal (threshold 0.02, against fewer-steps 13 at 2.15x ideal)" in front.verdict(table)
