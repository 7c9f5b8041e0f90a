"""Every command that writes follows one output rule (teacache.outputs): a folder only if it is new, empty or
the command's own, a file only if it is new or --force is given, never among the tracked files of this
project's checkout unless regenerating them is the command's purpose. A refusal is one line before any work,
and leaves every folder as it was; a rerun into the command's own folder goes on working."""

from __future__ import annotations

import json
import shutil

import pytest

from tests import ROOT
from tests.conftest import command_main, refused, tree

CAMPAIGN = ROOT / "results/cpu-amd-epyc-2c/tiny-shapes/0.24.0"
SWEEP = CAMPAIGN / "sweep"
TRACES = CAMPAIGN / "traces" / "traces.parquet"
FIT = CAMPAIGN / "fit" / "fit.json"
HARDWARE_A, HARDWARE_B = ROOT / "results/cpu-amd-epyc-2c", ROOT / "results/cuda-nvidia-h200"

# Each command that writes a folder, with arguments that are good but for --out.
FOLDER_COMMANDS = {
    "report": ("teacache-bench report", [str(SWEEP)]),
    "fit": ("teacache-calib fit", [str(TRACES)]),
    "compare-hardware": ("teacache-bench compare-hardware", [str(HARDWARE_A), str(HARDWARE_B)]),
    "gapcheck": ("teacache-bench gapcheck", ["--model", "tiny-shapes", "--max-prompts", "1"]),
    "fullsize": ("teacache-bench fullsize", ["--models", "random-z-image", "--blocks", "1", "--size", "16"]),
    "sweep": ("teacache-bench sweep", ["--model", "tiny-shapes", "--thresholds", "0.1", "--seeds", "0"]),
    "record": ("teacache-calib record", ["--model", "tiny-shapes", "--seeds", "0"]),
    "campaign": ("teacache-bench campaign", ["--model", "tiny-shapes"]),
    "decision-check": ("teacache-bench decision-check", ["--candidate", f"a={SWEEP}={FIT}", "--scores", str(FIT)]),
    "criteria": ("teacache-bench criteria", ["--model", "tiny-shapes", "--fit", str(FIT), "--traces", str(TRACES)]),
    "across-models": ("teacache-bench across-models", ["--model", f"tiny-shapes={CAMPAIGN}={CAMPAIGN / 'report'}"]),
}


@pytest.mark.parametrize("name", sorted(FOLDER_COMMANDS))
def test_a_folder_holding_someone_elses_files_is_refused_before_any_work(name, tmp_path, monkeypatch, capsys):
    command, argv = FOLDER_COMMANDS[name]
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep me\n")
    line = refused(command, [*argv, "--out", str(mine)], tmp_path, monkeypatch, capsys)
    assert "--out" in line and "notes.txt" in line and command in line


def test_fit_keeps_a_fit_json_it_did_not_write(tmp_path, monkeypatch, capsys):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "fit.json").write_text(json.dumps({"my": "own fit"}))
    line = refused("teacache-calib fit", [str(TRACES), "--out", str(mine)], tmp_path, monkeypatch, capsys)
    assert "fit.json that teacache-calib fit did not write" in line


def test_report_keeps_a_report_md_it_did_not_write(tmp_path, monkeypatch, capsys):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "report.md").write_text("# my report\n")
    line = refused("teacache-bench report", [str(SWEEP), "--out", str(mine)], tmp_path, monkeypatch, capsys)
    assert "report.md" in line and "teacache-bench report" in line


def test_fit_and_report_rerun_into_their_own_folders(tmp_path, capsys):
    fit = command_main("teacache-calib fit")
    argv = [str(TRACES), "--form", "poly", "--degree", "1", "--mode", "free", "--out", str(tmp_path / "fit")]
    assert fit(argv) == 0 and fit(argv) == 0, capsys.readouterr().err
    report = command_main("teacache-bench report")
    assert report([str(SWEEP), "--out", str(tmp_path / "report")]) == 0
    assert report([str(SWEEP), "--out", str(tmp_path / "report")]) == 0, capsys.readouterr().err


def test_replay_replaces_an_existing_file_only_with_force(tmp_path, monkeypatch, capsys):
    out = tmp_path / "afile.csv"
    out.write_text("someone's table\n")
    argv = [str(TRACES), "--thresholds", "0.1", "--out", str(out)]
    line = refused("teacache-bench replay", argv, tmp_path, monkeypatch, capsys)
    assert "--out" in line and "--force" in line and out.read_text() == "someone's table\n"
    assert command_main("teacache-bench replay")([*argv, "--force"]) == 0
    assert out.read_text().startswith("run_id,")


def test_replay_keeps_an_existing_provenance_beside_its_csv(tmp_path, monkeypatch, capsys):
    (tmp_path / "s.provenance.json").write_text("{}")
    argv = [str(TRACES), "--thresholds", "0.1", "--out", str(tmp_path / "s.csv")]
    line = refused("teacache-bench replay", argv, tmp_path, monkeypatch, capsys)
    assert "s.provenance.json exists" in line


def test_tolerances_replaces_a_file_it_did_not_generate_only_with_force(tmp_path, monkeypatch, capsys):
    out = tmp_path / "t.py"
    out.write_text("X = 1\n")
    line = refused("teacache-bench tolerances", [str(SWEEP), "--out", str(out)], tmp_path, monkeypatch, capsys)
    assert "--force" in line


def _top_level(folder):
    return {p.name: p.stat().st_mtime_ns for p in folder.iterdir()}


def test_report_refuses_the_checkouts_root(tmp_path, monkeypatch, capsys):
    before = _top_level(ROOT)
    line = refused("teacache-bench report", [str(SWEEP), "--out", str(ROOT)], tmp_path, monkeypatch, capsys)
    assert "checkout" in line and "runs/" in line
    assert _top_level(ROOT) == before


@pytest.mark.parametrize("name", ["sweep", "record", "fit", "report"])
def test_no_command_writes_into_the_checkouts_tracked_samples(name, tmp_path, monkeypatch, capsys):
    command, argv = FOLDER_COMMANDS[name]
    before = tree(ROOT / "samples")
    for out in (ROOT / "samples", ROOT / "samples" / "new"):
        line = refused(command, [*argv, "--out", str(out)], tmp_path, monkeypatch, capsys)
        assert "checkout" in line and "samples" in line
    assert tree(ROOT / "samples") == before


def test_the_campaign_regenerates_the_committed_results_and_says_so(capsys):
    from bench.campaign import default_out, plan_campaign

    # the committed campaign's own settings (docs/tolerances.md: Re-derive tolerances on new hardware)
    plan_campaign("tiny-shapes", default_out("tiny-shapes"), sweep_prompts="tiny-shapes", sweep_seeds="0")
    assert "teacache-bench campaign: regenerating results/" in capsys.readouterr().out


def test_a_campaign_folder_keeps_the_studies_filed_beside_its_stages(tmp_path, capsys):
    from bench.campaign import plan_campaign

    out = tmp_path / "campaign"
    for name in ("traces", "fit", "report", "baselines", "gapcheck"):
        shutil.copytree(CAMPAIGN / name, out / name)
    plan_campaign("tiny-shapes", out)
    (out / "notes.txt").write_text("mine\n")
    with pytest.raises(ValueError, match="notes.txt"):
        plan_campaign("tiny-shapes", out)


def test_the_sample_calibration_replaces_an_existing_table_only_with_force(tmp_path, monkeypatch, capsys):
    from calib.traces.sample_calibration import main

    table = tmp_path / "t.csv"
    table.write_text("mine\n")
    monkeypatch.chdir(tmp_path)
    before = tree(tmp_path)
    assert main([str(TRACES), "--out", str(tmp_path / "s.json"), "--table", str(table)]) == 2
    assert "--table" in capsys.readouterr().err and tree(tmp_path) == before
