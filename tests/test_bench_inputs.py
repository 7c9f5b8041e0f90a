"""Bad input to the bench and calib commands: one clear message, exit code 2, no partial files."""

from __future__ import annotations

import time

import pandas as pd
import pytest

from bench import replay as replay_cmd
from bench import sweep as sweep_cmd
from bench import tolerances as tolerances_cmd
from bench.common import parse_thresholds
from calib import record as record_cmd
from calib.prompts import load_prompts, parse_seeds, parse_size


@pytest.mark.parametrize(
    ("text", "match"),
    [("0,-0.1", "negative"), ("0,nan", "not finite"), ("0.1,0.2,0.1", "duplicate"), ("0,abc", "not a number"),
     ("", "at least one")],
)  # fmt: skip
def test_bad_thresholds(text, match):
    with pytest.raises(ValueError, match=match):
        parse_thresholds(text)


def test_thresholds_are_sorted():
    assert parse_thresholds("0.3,0,0.1") == [0.0, 0.1, 0.3]


@pytest.mark.parametrize("text", ["", "1,1", "-1", "a"])
def test_bad_seeds(text):
    with pytest.raises(ValueError, match="--seeds"):
        parse_seeds(text)


def test_seed_ranges():
    assert parse_seeds("0-2,5") == [0, 1, 2, 5]
    assert parse_size("64x32") == (64, 32)
    with pytest.raises(ValueError, match="--size"):
        parse_size("64")


def test_empty_prompt_file_is_refused(tmp_path):
    path = tmp_path / "prompts.txt"
    path.write_text("# only a comment\n\n")
    with pytest.raises(ValueError, match="holds no prompts"):
        load_prompts(str(path))
    with pytest.raises(ValueError, match="neither a built-in set"):
        load_prompts(str(tmp_path / "missing.txt"))


def test_prompt_files_give_stable_ids(tmp_path):
    path = tmp_path / "p.txt"
    path.write_text("a cat\na dog\n")
    assert load_prompts(str(path)) == load_prompts(str(path))
    csv = tmp_path / "p.csv"
    csv.write_text("id,text\ncat,a cat\n")
    assert load_prompts(str(csv)) == {"cat": "a cat"}


def test_sweep_refuses_bad_input_before_writing(tmp_path, capsys):
    out = tmp_path / "sweep"
    code = sweep_cmd.main(["--model", "tiny-flux1", "--thresholds", "0,-1", "--out", str(out)])
    assert code == 2 and "negative" in capsys.readouterr().err
    assert not out.exists()
    empty = tmp_path / "empty.txt"
    empty.write_text("\n")
    code = sweep_cmd.main(["--model", "tiny-flux1", "--thresholds", "0", "--prompts", str(empty), "--out", str(out)])
    assert code == 2 and "no prompts" in capsys.readouterr().err
    assert not out.exists()


def test_record_dry_run_prints_the_plan_and_writes_nothing(tmp_path, capsys):
    out = tmp_path / "rec"
    assert (
        record_cmd.main(
            ["--model", "tiny-flux1", "--prompts", "fast", "--seeds", "0,1", "--dry-run", "--out", str(out)]
        )
        == 0
    )
    printed = capsys.readouterr().out
    assert "6 runs" in printed and "would record scene-city-s1" in printed
    assert not out.exists()


def _traces(n_runs=40, steps=28):
    rows = []
    for r in range(n_runs):
        for s in range(steps):
            rows.append({"run_id": f"p{r}-s0", "prompt_id": f"p{r}", "seed": 0, "step": s, "num_steps": steps,
                         "sigma": 1 - s / steps, "x_rel_l1": float("nan") if s == 0 else 0.05 + 0.01 * (r % 3),
                         "variant": "tiny-flux1", "branch": "cond"})  # fmt: skip
    return pd.DataFrame(rows)


def test_replay_predicts_schedules_well_under_a_second(tmp_path, capsys):
    path = tmp_path / "traces.parquet"
    _traces().to_parquet(path)
    start = time.perf_counter()
    assert replay_cmd.main([str(path), "--thresholds", "0,0.2,0.4,0.8", "--out", str(tmp_path / "s.csv")]) == 0
    assert time.perf_counter() - start < 1.0
    schedules = pd.read_csv(tmp_path / "s.csv")
    assert len(schedules) == 40 * 4
    zero = schedules[schedules["threshold"] == 0]
    assert (zero["predicted_skipped"] == 0).all()
    assert replay_cmd.main([str(path), "--thresholds", "0.1,-1"]) == 2


def test_tolerances_refuse_a_threshold_that_was_not_swept(tmp_path, capsys):
    assert tolerances_cmd.main([str(tmp_path), "--out", str(tmp_path / "t.py")]) == 2
    assert "no runs.parquet" in capsys.readouterr().err
    assert not (tmp_path / "t.py").exists()
