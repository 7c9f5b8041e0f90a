"""mlx-teacache's gate replayed from the installed package, beside ours, every difference given a rule."""

from __future__ import annotations

import math

import numpy as np
import pytest

pytest.importorskip("mlx_teacache")

from bench.peer import gate as pg  # noqa: E402
from teacache.gate import GateConfig  # noqa: E402
from teacache.rescale import RescaleFunction  # noqa: E402


def random_case(rng: np.random.Generator):
    n = int(rng.integers(4, 30))
    xs: list[float | None] = [None] + list(rng.uniform(0.0, 0.3, n - 1))
    for i in rng.choice(range(1, n), size=int(rng.integers(0, 3)), replace=False):
        xs[i] = float("nan")
    degree = int(rng.integers(1, 5))
    coefficients = tuple(rng.normal(0, 1, degree + 1) * [10.0**-k for k in range(degree, -1, -1)])
    lo = float(rng.uniform(0.0, 0.05))
    rescale = RescaleFunction(coefficients, x_range=(lo, lo + float(rng.uniform(0.05, 0.3))))
    ours = GateConfig(
        float(rng.choice([0.0, 0.01, 0.05, 0.2, 0.6])),
        rescale,
        int(rng.integers(0, 3)),
        int(rng.integers(0, 3)),
        int(rng.integers(1, 10)),
    )
    own_range = (lo, lo + 0.1) if rng.random() < 0.3 else None
    peer = pg.PeerSettings(pg.peer_coefficients(rescale), int(rng.integers(1, 3)), 1, own_range)
    if peer.skip_first_n_steps + peer.skip_last_n_steps >= n:
        peer = pg.PeerSettings(peer.coefficients, 1, 1, own_range)
    return xs, ours, peer


@pytest.mark.parametrize("seed", range(40))
def test_every_difference_has_a_rule(seed):
    xs, ours, peer = random_case(np.random.default_rng(seed))
    our_skipped, their_skipped, differences = pg.explain(xs, ours, peer)
    assert all(d.rule in pg.RULES for d in differences), differences
    assert {d.step for d in differences} == set(our_skipped) ^ set(their_skipped)


def test_its_gate_and_ours_agree_where_no_rule_differs():
    rng = np.random.default_rng(3)
    rescale = RescaleFunction((2.0, 0.1, 0.0), x_range=(0.0, math.inf))
    xs = [None, *rng.uniform(0.01, 0.1, 27)]
    for threshold in (0.05, 0.2, 0.5):
        ours = GateConfig(threshold, rescale, 1, 1, pg.max_consecutive_skips())
        peer = pg.PeerSettings(pg.peer_coefficients(rescale))
        our_skipped, their_skipped, differences = pg.explain(xs, ours, peer)
        assert their_skipped, "the threshold skips"
        # the only rule left: its first gated step (step 1) seeds the cache; ours may skip there
        assert {d.rule for d in differences} <= {pg.RULE_ANCHOR}
        assert 1 not in their_skipped


def test_each_rule_shows_up():
    rescale = RescaleFunction((1.0, 0.0), x_range=(0.02, 0.1))
    peer = pg.PeerSettings(pg.peer_coefficients(rescale))
    # ours skips step 1 (its anchor is step 0); mlx-teacache seeds there
    diff = pg.explain([None, 0.03, 0.03, 0.03, 0.03, 0.03], GateConfig(0.2, rescale), peer)[2]
    assert [(d.step, d.rule) for d in diff][0] == (1, pg.RULE_ANCHOR)
    # above our range we compute; it has no range for caller-supplied coefficients
    xs = [None, 0.05, 0.05, 0.5, 0.05, 0.05, 0.05]
    diff = pg.explain(xs, GateConfig(0.9, rescale), peer)[2]
    assert (3, "compute (above-range)", "skipped", pg.RULE_RANGE) in [(d.step, d.ours, d.theirs, d.rule) for d in diff]
    # a non-finite signal: both compute; it re-seeds on the next step, ours may skip there
    xs = [None, 0.05, 0.05, float("nan"), 0.01, 0.01, 0.01, 0.01]
    diff = pg.explain(xs, GateConfig(0.2, rescale), peer)[2]
    assert (4, "skip", "computed", pg.RULE_NON_FINITE) in [(d.step, d.ours, d.theirs, d.rule) for d in diff]
    # our cap of 2 against its 8
    xs = [None, 0.5, *[0.021] * 20]  # step 1 above the range: both compute there
    diff = pg.explain(xs, GateConfig(0.5, rescale, max_consecutive_skips=2), peer)[2]
    assert pg.RULE_CAP in {d.rule for d in diff}
    # our skip_first of 3 against its 1
    diff = pg.explain([None, *[0.021] * 9], GateConfig(0.5, rescale, skip_first_n_steps=3), peer)[2]
    assert pg.RULE_WINDOW in {d.rule for d in diff}


def test_what_it_cannot_take():
    with pytest.raises(ValueError, match="x only"):
        pg.peer_coefficients(RescaleFunction((1.0, 0.0), form="poly+step", time_coefficients=(0.1,)))
    with pytest.raises(ValueError, match="4 at most"):
        pg.peer_coefficients(RescaleFunction((1.0, 0, 0, 0, 0, 0.0)))
    assert pg.peer_coefficients(RescaleFunction((1.0, 0.0))) == (0.0, 0.0, 0.0, 1.0, 0.0)
    assert pg.threshold_refusal(0.5) is None and "[0, 1]" in pg.threshold_refusal(1.5)


def test_replay_cli_writes_where_and_why(tmp_path, capsys):
    import pandas as pd

    from bench.sweep import replay as replay_cmd

    rng = np.random.default_rng(5)
    rows = [
        {"prompt_id": f"p{p}", "seed": 0, "step": s, "num_steps": 12, "x_rel_l1": float(rng.uniform(0.02, 0.12))}
        for p in range(3)
        for s in range(1, 12)
    ]
    table = tmp_path / "traces.csv"
    pd.DataFrame(rows).to_csv(table, index=False)
    out = tmp_path / "out" / "schedules.csv"
    argv = [str(table), "--thresholds", "0.1,0.3", "--coefficients", "1,0", "--gate", "mlx-teacache", "--out", str(out)]
    assert replay_cmd.main(argv) == 0
    printed = capsys.readouterr().out
    assert "mlx-teacache: threshold 0.1: skipped steps ours" in printed and "anchor in the leading window" in printed
    per_run = pd.read_csv(out.with_name("schedules.mlx-teacache.csv"))
    steps = pd.read_csv(out.with_name("schedules.mlx-teacache-steps.csv"))
    assert len(per_run) == 6 and set(steps["rule"]) <= set(pg.RULES)
    ours = pd.read_csv(out)
    merged = per_run.merge(ours, on=["prompt_id", "threshold"])
    assert (merged["our_skipped"] == merged["predicted_skipped"]).all()  # ours: the same replay either way
    assert steps.groupby(["prompt_id", "threshold"]).size().sum() == per_run["differences"].sum()

    bad = [str(table), "--thresholds", "0.1", "--coefficients", "1,0", "--gate", "mlx-teacache", "--out",
           str(tmp_path / "bad" / "s.csv"), "--x-range", "0,1"]  # fmt: skip
    assert replay_cmd.main(bad) == 0  # numbers with a range are fine: it ignores ranges of given coefficients
    module = tmp_path / "timeaware.py"  # a time-aware rescale: refused before anything is written
    module.write_text(
        "from teacache.rescale import RescaleFunction\n"
        "RESCALE = RescaleFunction((1.0, 0.0), form='poly+step', time_coefficients=(0.1,))\n"
    )
    bad = [str(table), "--thresholds", "0.1", "--coefficients", str(module), "--gate", "mlx-teacache", "--out",
           str(tmp_path / "refused" / "s.csv")]  # fmt: skip
    assert replay_cmd.main(bad) == 2
    assert "x only" in capsys.readouterr().err
    assert not (tmp_path / "refused").exists()
