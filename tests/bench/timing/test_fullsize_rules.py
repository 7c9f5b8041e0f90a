"""``teacache-bench fullsize --rules``: MagCache's and First-Block Cache's arms, their thresholds replayed from one
calibration generation (the live rule takes the same decisions), and First-Block Cache's own ideal bound."""

from __future__ import annotations

import math

import numpy as np
import pytest

import teacache  # noqa: F401  (first: OpenBLAS preload before MLX)
from bench.timing import fullsize as bench_fullsize
from bench.timing import fullsize_rules, fullsize_tables
from teacache.fbcache import FBCacheConfig, replay
from teacache.magcache import MagCacheConfig, schedule


def test_rules_are_parsed_in_one_order_and_unknown_ones_refused():
    assert fullsize_rules.parse_rules(None) == ()
    assert fullsize_rules.parse_rules("fbcache, magcache,fbcache") == ("magcache", "fbcache")
    for text in ("teacache", "magcache,seacache", ","):
        with pytest.raises(ValueError, match="--rules: expected a comma-separated list of magcache, fbcache"):
            fullsize_rules.parse_rules(text)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--rules", "seacache"], "--rules: expected a comma-separated list"),
        (["--rules", "fbcache", "--thresholds", "0.3"], "--rules: the other rules' thresholds come from"),
    ],
)
def test_bad_rules_exit_2_before_any_model_loads(argv, message, capsys, tmp_path, monkeypatch):
    monkeypatch.setattr(bench_fullsize, "measure_model", lambda *a: pytest.fail("a model was built"))
    assert bench_fullsize.main([*argv, "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err
    assert not (tmp_path / "out").exists()


def test_magcache_thresholds_are_the_smallest_whose_schedule_reaches_the_target():
    ratios = (1.0, *np.linspace(0.9, 1.1, 19))
    arms = fullsize_rules.magcache_arms(ratios, 20, [4, 7])
    assert arms[0][0] == "magcache-all" and schedule(arms[0][2].config, 20).computed == 20
    for (kind, threshold, arm, predicted), target in zip(arms[1:], (4, 7), strict=True):
        assert kind == "magcache" and arm.config.threshold == threshold
        assert predicted == 20 - schedule(MagCacheConfig(threshold, ratios), 20).computed >= target
        assert 20 - schedule(MagCacheConfig(threshold * 0.98, ratios), 20).computed < target


def test_fbcache_thresholds_replay_the_change_table_as_the_live_rule_decides():
    rng = np.random.default_rng(0)
    changes = np.tril(rng.uniform(0.05, 0.5, (20, 20)), -1)
    changes[np.triu_indices(20)] = np.nan
    arms = fullsize_rules.fbcache_arms(changes, 20, [4, 7])
    every = arms[0][2].config
    assert arms[0][0] == "fbcache-all" and sum(not d.compute for d in replay(every, changes)) == 0
    for (kind, threshold, arm, predicted), target in zip(arms[1:], (4, 7), strict=True):
        assert kind == "fbcache" and arm.config == FBCacheConfig(threshold)
        assert predicted == sum(not d.compute for d in replay(FBCacheConfig(threshold), changes)) >= target
        assert sum(not d.compute for d in replay(FBCacheConfig(threshold * 0.98), changes)) < target


def test_the_ratio_curve_comes_from_branch_0s_residual_norms():
    records = [{"step": t, "branch": b, "residual_norm": 2.0**t * (1 + b)} for t in range(4) for b in (0, 1)]
    assert fullsize_rules.magcache_ratios(records) == (1.0, 2.0, 2.0, 2.0)


def test_a_first_block_cache_arm_is_held_to_its_own_ideal_bound(tmp_path):
    """N / (N - k (1 - 1/B)): block 0 runs at every step, so 4 of 8 skipped with 4 blocks bounds at 1.6x, not 2x."""
    facts = {"model": "random-a", "quantize": None, "resolution": "64x64", "steps": 8, "tag": "", "family": "flux2",
             "variant": "flux2-klein-base-4b", "params_b": 0.1, "dtype": "float32", "guidance": 4.0,
             "full_size": False, "rescale": "identity", "hardware": "test-chip"}  # fmt: skip
    arms = (("vanilla", "vanilla", None, 0, None), ("proxy-all", "proxy-all", None, 0, None),
            ("gate 0.3", "gate", 0.3, 4, None), ("fbcache 0.2", "fbcache", 0.2, 4, 4))  # fmt: skip
    rows = [
        {**facts, "repeat": 0, "position": i, "arm": arm, "kind": kind, "threshold": threshold, "loop_s": 1.0,
         "total_s": 1.1, "skipped": skipped, "peak_memory_gib": 1.0, "cache_memory_mib": 0.0, "blocks": blocks,
         "exact": kind == "proxy-all" if kind != "vanilla" else None, "max_abs_diff": 0.0}
        for i, (arm, kind, threshold, skipped, blocks) in enumerate(arms)
    ]  # fmt: skip
    summary = fullsize_tables.write_outputs(tmp_path, rows, {"a": {}}).set_index("arm")
    assert math.isclose(summary.loc["gate", "ideal"], 2.0)
    assert math.isclose(summary.loc["fbcache", "ideal"], 8 / (8 - 4 * 0.75))


def test_the_rules_run_end_to_end_beside_teacache(tmp_path, monkeypatch):
    """``random-flux1-dev`` built as tiny-flux1 (same pipeline classes, seconds on CPU): each rule's every-step arm
    is bit-exact and skips nothing, MagCache's arm skips what its replay predicted (a fixed schedule), First-Block
    Cache's rows carry the body's blocks and its own bound, and the provenance keeps each rule's calibration."""
    import json

    import pandas as pd

    from teacache.models import fullsize

    monkeypatch.setattr(fullsize, "build_random", lambda variant, **_: teacache.load_model("tiny-flux1"))
    monkeypatch.setattr(fullsize, "full_transformer", lambda variant, blocks=None: "tiny-flux1")
    monkeypatch.setattr(fullsize, "parameter_count", lambda _: 1000)
    argv = ["--models", "random-flux1-dev", "--size", "32", "--steps", "10", "--repeats", "1",
            "--skip-fractions", "0.3", "--rules", "fbcache,magcache", "--out", str(tmp_path)]  # fmt: skip
    assert bench_fullsize.main(argv) == 0
    summary = pd.read_csv(tmp_path / "summary.csv").set_index("arm")
    assert list(summary.index) == ["proxy-all", "gate", "magcache-all", "magcache", "fbcache-all", "fbcache"]
    for every in ("proxy-all", "magcache-all", "fbcache-all"):
        assert summary.loc[every, "skipped"] == 0 and summary.loc[every, "noop_exact"], every
    assert summary.loc["magcache", "skipped"] == summary.loc["magcache", "predicted_skipped"] >= 3
    runs = pd.read_csv(tmp_path / "runs.csv")
    first_block = runs["kind"].str.startswith("fbcache")  # fbcache-all too: block 0 runs at every step there as well
    blocks = runs.loc[first_block, "blocks"]
    assert blocks.notna().all() and runs.loc[~first_block, "blocks"].isna().all()
    fb = summary.loc["fbcache"]
    assert math.isclose(fb["ideal"], 10 / (10 - fb["skipped"] * (1 - 1 / int(blocks.iloc[0]))), rel_tol=1e-5)  # %.6g
    record = next(iter(json.loads((tmp_path / "provenance.json").read_text())["models"].values()))["rules"]
    assert len(record["magcache"]["ratios"]) == 10 and record["fbcache"]["num_blocks"] == int(blocks.iloc[0])
    assert json.loads((tmp_path / "fingerprint.json").read_text())["configurations"].popitem()[1]["rules"] == [
        "magcache",
        "fbcache",
    ]
