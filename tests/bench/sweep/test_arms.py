"""teacache-bench sweep with --baselines, --compare-coefficients and --isolate, and the report's baselines section.

The sweep runs on the session's tiny-flux1 (6 steps at 32x32, one prompt, one repeat: seconds); a
sweep without the new flags must write exactly the tables and provenance it wrote before them.
"""

from __future__ import annotations

import io
import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from bench.report import baselines as report_baselines
from bench.report import command as report
from bench.sweep import arms as sweep_arms
from bench.sweep import command as sweep_cmd
from bench.sweep import records
from bench.sweep.baselines import ARMS, STATIC
from teacache.schedule import StaticSchedule

SMALL = ["--model", "tiny-flux1", "--steps", "6", "--size", "32x32", "--seeds", "0", "--repeats", "1"]
# runs.parquet's columns before the arm columns existed: a sweep without the new flags writes exactly these
OLD_RUN_COLUMNS = [
    "format_version", "pair_id", "variant", "model", "prompt_id", "prompt", "seed", "num_steps", "run_id", "kind",
    "threshold", "computed", "skipped", "skipped_steps", "longest_skip_streak", "wall_s", "wall_s_median", "speedup",
    "ideal_speedup", "max_abs", "mean_abs", "max_rel", "cosine", "ssim", "psnr", "adherence", "image_path",
    "predicted_skipped", "rank", "hardware", "contended",
]  # fmt: skip
RESCALE_MODULE = """from teacache.rescale import RescaleFunction
RESCALE = RescaleFunction(coefficients=(0.0, 0.0, 0.0, 1.5, 0.0), x_range=(0.0, 10.0))
"""


@pytest.fixture
def prompts(tmp_path) -> Path:
    path = tmp_path / "prompts.json"
    path.write_text(json.dumps({"fox": "a red fox in the snow"}))
    return path


def run(out: Path, prompts: Path, *extra: str) -> int:
    return sweep_cmd.main([*SMALL, "--prompts", str(prompts), "--thresholds", "0.1,0.3", "--out", str(out), *extra])


def test_a_sweep_without_the_new_flags_writes_what_it_wrote_before(tmp_path, prompts, shared_model):
    out = tmp_path / "sweep"
    assert run(out, prompts) == 0
    derived = [d.name for d in records.RUNS.derived]
    assert list(pd.read_parquet(out / "runs.parquet").columns) == [c for c in OLD_RUN_COLUMNS if c not in derived]
    runs = records.read_sweep(out).runs  # the derived columns in their places of before
    assert list(runs.columns) == OLD_RUN_COLUMNS
    assert set(runs["kind"]) == {"vanilla", "teacache"}
    assert list(runs["run_id"]) == ["fox-s0-vanilla", "fox-s0-t0.1", "fox-s0-t0.3"]
    provenance = json.loads((out / "provenance.json").read_text())
    assert "arms" not in provenance and "isolated" not in provenance["timing"]
    settings = json.loads((out / "fingerprint.json").read_text())["settings"]
    assert not {"baselines", "compare_coefficients", "compare_rescales", "isolate"} & set(settings)
    files, summary = report.render(report.load_sweep(out))
    assert "baselines" not in summary and not report_baselines.OUTPUTS & set(files)
    assert b"## Baselines" not in files["report.md"]


def test_every_row_of_a_sweep_with_baselines_says_its_arm_and_setting(tmp_path, prompts, shared_model, capsys):
    module = tmp_path / "linear.py"
    module.write_text(RESCALE_MODULE)
    out = tmp_path / "sweep"
    flags = ["--baselines", "fewer-steps,static,step-cache", "--compare-coefficients", f"packaged,{module}"]
    assert run(out, prompts, *flags) == 0
    runs = records.read_sweep(out).runs
    assert set(runs["arm"]) <= {"vanilla", *ARMS} and {"vanilla", "teacache", "fewer-steps", "static"} <= set(
        runs["arm"]
    )
    assert (runs["arm"] == runs["kind"]).all() and runs["run_id"].is_unique
    assert runs.loc[runs["arm"] != "vanilla", "arm_setting"].str.len().gt(0).all()
    tc = runs[runs["arm"] == "teacache"]
    assert sorted(tc["rescale"].unique()) == sorted(["packaged", str(module)])  # one arm per rescale function
    assert len(tc) == 2 * 2 and set(tc["arm_setting"].astype(float)) == {0.1, 0.3}
    assert runs.loc[runs["arm"] != "teacache", "rescale"].isna().all()
    fewer = runs[runs["arm"] == "fewer-steps"]
    assert (fewer["steps_run"] == fewer["arm_setting"].astype(int)).all() and (fewer["computed"] < 6).all()
    for row in runs[runs["arm"] == "static"].itertuples():  # the static arm skips what its label says
        if row.arm_setting.startswith("even:"):
            assert row.computed == int(row.arm_setting.split(":")[1])
    provenance = json.loads((out / "provenance.json").read_text())
    arms = provenance["arms"]
    for arm, settings in arms["settings"].items():
        assert sorted(runs.loc[runs["arm"] == arm, "arm_setting"]) == sorted(settings)
    assert arms["primary_rescale"] == "packaged" and len(arms["rescales"]) == 2  # paths as provenance writes them
    # the decision log keeps TeaCache's and the static schedule's steps
    decisions = pd.read_parquet(out / "decisions.parquet")
    static_ids = set(runs.loc[runs["arm"] == "static", "run_id"])
    assert static_ids and static_ids <= set(decisions["run_id"])
    # the threshold tables read --coefficients' runs only; the section reads every arm
    files, summary = report.render(report.load_sweep(out))
    dist = pd.read_csv(io.BytesIO(files["distribution.csv"]))
    assert set(dist.loc[dist["metric"] == "ssim", "n"]) == {1}
    text = files["report.md"].decode()
    assert "## Baselines" in text and "Against fewer steps:" in text and "### Rescale functions compared" in text
    assert {"baselines_front.png", "baselines_front_ideal.png", "rescale_fronts.png"} <= set(files)
    # other baselines or rescale functions are another sweep: refused before the model loads
    capsys.readouterr()
    assert run(out, prompts, "--baselines", "fewer-steps", "--compare-coefficients", f"packaged,{module}") == 2
    assert "baselines" in capsys.readouterr().err
    # and so is a new threshold: the arms' settings follow the thresholds
    assert run(out, prompts, "--thresholds", "0.1,0.2", *flags) == 2


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--baselines", "fewer-steps,fast"], "--baselines: unknown arm 'fast'"),
        (["--baselines", "static,static"], "--baselines: 'static' given twice"),
        (["--compare-coefficients", "packaged,1.5"], "--compare-coefficients: '1.5' is not 'packaged' or a file"),
        (["--compare-coefficients", "missing.json"], "--compare-coefficients: missing.json does not exist"),
        (["--compare-coefficients", "a.json", "--x-range", "0,1"], "--x-range: applies to --coefficients numbers"),
    ],
)
def test_bad_arm_flags_are_refused_in_one_line_before_anything_is_written(tmp_path, prompts, flags, message, capsys):
    out = tmp_path / "sweep"
    assert run(out, prompts, *flags) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err, err
    assert not out.exists() or not any(out.iterdir())


def test_the_arm_grid_covers_what_teacache_reached():
    n = 10
    schedules = {0.1: [[2, 3, 5], [2, 3, 5], [4]], 0.2: [[2, 3, 5, 7]]}  # computed 7, 9 and 6
    grid = sweep_arms.arm_grid(n, schedules, ("fewer-steps", "static", "step-cache"), skip_first=1)
    by = {arm: [a.setting for a in grid if a.name == arm] for arm in ("fewer-steps", "static", "step-cache")}
    assert by["fewer-steps"] == ["3", "5", "6", "7", "8", "9"]  # 6, 7, 9 reached, plus 3, 5, 8 (quarters)
    assert by["static"][:3] == ["even:6", "even:7", "even:9"]
    common = [a for a in grid if a.name == STATIC and a.setting == "common:0.1"]
    assert common[0].schedule == StaticSchedule.from_skipped(n, [2, 3, 5], "common:0.1")
    assert by["static"][3:] == ["common:0.1", "common:0.2"]
    even = StaticSchedule.evenly(n, 6).skipped_steps  # a most common schedule that an even one already runs
    again = sweep_arms.arm_grid(n, {0.5: [even]}, ("static",), skip_first=1)
    assert [a.setting for a in again] == ["even:6"]
    assert by["step-cache"] == ["0.1", "0.3", "0.4"]  # StepCache skips round(ratio * N): 1, 3 and 4 steps
    assert sweep_arms.arm_grid(n, schedules, (), skip_first=1) == []


def _timed(arm: str, setting: str, in_process: list[float], isolated: list[float], ideal: float = 5.0) -> dict:
    return {"pair_id": "p-s0", "arm": arm, "kind": arm, "arm_setting": setting, "rescale": None,
            "wall_s_in_process": in_process, "wall_s": isolated, "ideal_speedup": ideal}  # fmt: skip


def test_the_isolation_check_says_whether_the_two_timings_agree():
    runs = pd.DataFrame([
        _timed("vanilla", "", [2.0, 2.1, 1.9], [2.0, 2.1, 1.9]),
        _timed("teacache", "0.1", [1.0, 1.05, 0.95], [1.0, 1.1, 0.9]),  # 2x in both
        _timed("teacache", "0.3", [0.5, 0.52, 0.48], [1.0, 1.02, 0.98]),  # 4x in-process, 2x isolated
    ])  # fmt: skip
    table = report_baselines.isolation(runs).set_index("arm_setting")
    assert table.loc["0.1", "agree"] and not table.loc["0.3", "agree"]
    assert math.isclose(table.loc["0.3", "in_process_median"], 4.0) and table.loc["0.3", "isolated_n"] == 3
    lines = report_baselines.isolation_markdown(table.reset_index())
    assert "do not agree with isolated ones at teacache 0.3" in lines and "above their ideal bound" not in lines
    runs.loc[2, "ideal_speedup"] = 3.0  # 4x in-process: faster than N / computed allows
    lines = report_baselines.isolation_markdown(report_baselines.isolation(runs))
    assert "1 of 2 settings measure above their ideal bound" in lines
    assert report_baselines.isolation(runs.drop(columns=["wall_s_in_process"])).empty


@pytest.mark.slow
def test_isolate_times_every_generation_in_a_fresh_process(tmp_path, prompts, shared_model):
    out = tmp_path / "sweep"
    assert run(out, prompts, "--thresholds", "0.3", "--isolate") == 0
    runs = records.read_sweep(out).runs
    assert list(runs["arm"]) == ["vanilla", "teacache"]
    for row in runs.itertuples():
        assert len(row.wall_s) == len(row.wall_s_in_process) == 1
        assert not np.allclose(row.wall_s, row.wall_s_in_process)  # two different timings, both kept
    vanilla = runs.iloc[0]
    assert math.isclose(runs.iloc[1]["speedup"], vanilla["wall_s_median"] / runs.iloc[1]["wall_s_median"])
    assert "fresh process" in json.loads((out / "provenance.json").read_text())["timing"]
    files, summary = report.render(report.load_sweep(out))
    assert "isolation.csv" in files and "isolation_agree" in summary["baselines"]
