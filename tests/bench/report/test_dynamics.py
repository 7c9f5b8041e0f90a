"""teacache-bench dynamics: medians by part of the schedule, the real-model bounds, and the files it writes."""

from __future__ import annotations

import numpy as np
import pandas as pd

from bench.report import dynamics


def _traces(y_of_fraction, steps=28, runs=3) -> pd.DataFrame:
    rows = []
    for run in range(runs):
        for step in range(1, steps):
            f = step / steps
            rows.append({"prompt_id": f"p{run}", "seed": 0, "step": step, "num_steps": steps,
                         "x_rel_l1": 0.05, "y_rel_l1": y_of_fraction(f)})  # fmt: skip
    return pd.DataFrame(rows)


def test_parts_take_the_median_of_each_seventh_and_the_ratio_mid_schedule():
    table = _traces(lambda f: 0.3 if f < 1 / 7 else (0.2 if f >= 6 / 7 else 0.1))
    p = dynamics.parts(table)
    assert (p["first"], p["middle"], p["last"]) == (0.3, 0.1, 0.2)
    assert np.isclose(p["ratio_middle"], 2.0)
    assert dynamics.shortfalls(p) == []


def test_a_straight_flow_is_named_for_each_bound_it_misses():
    p = dynamics.parts(_traces(lambda f: 0.01))
    gaps = dynamics.shortfalls(p)
    assert [g.split()[0] for g in gaps] == ["first", "middle", "ratio_middle"]


def test_the_command_writes_its_table_plot_and_summary(tmp_path):
    path = tmp_path / "a" / "traces.csv"
    path.parent.mkdir()
    _traces(lambda f: 0.2).to_csv(path, index=False)
    assert dynamics.main([str(path), "--out", str(tmp_path / "out")]) == 0
    for name in ("dynamics.csv", "dynamics.md", "parts.json", "dynamics.png"):
        assert (tmp_path / "out" / name).stat().st_size > 0
    assert "| traces | 0.200 |" in (tmp_path / "out" / "dynamics.md").read_text()


def test_a_missing_table_is_one_line_and_exit_2(tmp_path, capsys):
    assert dynamics.main([str(tmp_path / "none.parquet"), "--out", str(tmp_path / "out")]) == 2
    assert not (tmp_path / "out").exists()


def test_a_tracked_folder_of_another_kind_is_refused_and_left_as_it_was(tmp_path, capsys):
    from tests import ROOT

    path = tmp_path / "traces.csv"
    _traces(lambda f: 0.2).to_csv(path, index=False)
    before = sorted(p.name for p in (ROOT / "docs").iterdir())
    assert dynamics.main([str(path), "--out", str(ROOT / "docs")]) == 2
    assert "git tracks" in capsys.readouterr().err
    assert sorted(p.name for p in (ROOT / "docs").iterdir()) == before


def test_two_tables_of_one_name_are_both_shown(tmp_path):
    for side, y in (("a", 0.2), ("b", 0.4)):
        (tmp_path / side / "traces").mkdir(parents=True)
        _traces(lambda f, y=y: y).to_parquet(tmp_path / side / "traces" / "traces.parquet")
    paths = [str(tmp_path / side / "traces" / "traces.parquet") for side in ("a", "b")]
    assert dynamics.main([*paths, "--out", str(tmp_path / "out")]) == 0
    text = (tmp_path / "out" / "dynamics.md").read_text()
    assert "| traces | 0.200 |" in text and "b/traces/traces.parquet | 0.400 |" in text  # the second by its path
