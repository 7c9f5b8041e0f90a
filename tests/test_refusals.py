"""A refusal leaves every folder as it was: each command checks its --out before any work, the same way.

Bad input is one line naming the argument, exit 2, no traceback, nothing written: not the output, not a
fingerprint, not a file in the current folder (``--out ''`` is not "here"). The commands run in-process
with a tripwire on their expensive work, so a late check fails the test at once instead of after a model run.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import calib.run.generation
from teacache.errors import InputError
from tests import ROOT
from tests.conftest import command_main, patch_everywhere, refused, tree

CAMPAIGN = ROOT / "results/cpu-amd-epyc-2c/tiny-shapes/0.24.0"
SWEEP = CAMPAIGN / "sweep"
TRACES = CAMPAIGN / "traces" / "traces.parquet"
FIT = CAMPAIGN / "fit" / "fit.json"
HARDWARE_A, HARDWARE_B = ROOT / "results/cpu-amd-epyc-2c", ROOT / "results/cuda-nvidia-h200"


# Each command with arguments that are good but for --out, which the case supplies.
FOLDER_COMMANDS = {
    "report": ("teacache-bench report", [str(SWEEP)]),
    "fit": ("teacache-calib fit", [str(TRACES)]),
    "compare-hardware": ("teacache-bench compare-hardware", [str(HARDWARE_A), str(HARDWARE_B)]),
    "gapcheck": ("teacache-bench gapcheck", ["--model", "tiny-shapes", "--max-prompts", "1"]),
    "fullsize": ("teacache-bench fullsize", ["--models", "random-z-image", "--blocks", "1", "--size", "16"]),
    "sweep": ("teacache-bench sweep", ["--model", "tiny-shapes", "--thresholds", "0.1", "--seeds", "0"]),
    "record": ("teacache-calib record", ["--model", "tiny-shapes", "--seeds", "0"]),
    "campaign": ("teacache-bench campaign", ["--model", "tiny-shapes"]),
    "drift": ("teacache-calib drift", ["--code-only"]),
}
FILE_COMMANDS = {
    "emit": ("teacache-calib emit", [str(FIT), "--variant", "tiny-shapes"]),
    "replay": ("teacache-bench replay", [str(TRACES), "--thresholds", "0.1"]),
    "tolerances": ("teacache-bench tolerances", [str(SWEEP)]),
}


def _bad_outs(tmp_path: Path, expects: str) -> dict[str, str]:
    a_file = tmp_path / "a-file.txt"
    a_file.write_text("keep me\n")
    a_folder = tmp_path / "a-folder"
    a_folder.mkdir()
    wrong = str(a_file) if expects == "folder" else str(a_folder)
    return {"empty": "", "wrong-kind": wrong, "under-a-file": str(a_file / "sub" / "out")}


@pytest.mark.parametrize("case", ["empty", "wrong-kind", "under-a-file"])
@pytest.mark.parametrize("name", sorted(FOLDER_COMMANDS))
def test_a_bad_out_folder_is_one_line_before_any_work(name, case, tmp_path, monkeypatch, capsys):
    command, argv = FOLDER_COMMANDS[name]
    out = _bad_outs(tmp_path, "folder")[case]
    line = refused(command, [*argv, "--out", out], tmp_path, monkeypatch, capsys)
    assert "--out" in line


@pytest.mark.parametrize("case", ["empty", "wrong-kind", "under-a-file"])
@pytest.mark.parametrize("name", sorted(FILE_COMMANDS))
def test_a_bad_out_file_is_one_line_before_any_work(name, case, tmp_path, monkeypatch, capsys):
    command, argv = FILE_COMMANDS[name]
    out = _bad_outs(tmp_path, "file")[case]
    line = refused(command, [*argv, "--out", out], tmp_path, monkeypatch, capsys)
    assert "--out" in line


def test_gapcheck_render_only_checks_its_folder(tmp_path, monkeypatch, capsys):
    a_file = tmp_path / "a-file.txt"
    a_file.write_text("keep me\n")
    line = refused("teacache-bench gapcheck", ["--render-only", "--out", str(a_file)], tmp_path, monkeypatch, capsys)
    assert "--out" in line


@pytest.mark.parametrize("command", ["teacache-bench sweep --thresholds 0.1", "teacache-calib record"])
def test_a_size_the_model_cannot_make_is_refused_before_it_loads(command, tmp_path, monkeypatch, capsys):
    prog = " ".join(command.split()[:2])
    argv = [*command.split()[2:], "--model", "tiny-shapes", "--seeds", "0", "--size", "33x33"]
    line = refused(prog, [*argv, "--out", str(tmp_path / "out")], tmp_path, monkeypatch, capsys)
    assert "--size" in line and "32x32" in line


@pytest.mark.parametrize("command", ["teacache-bench sweep --thresholds 0.1 --repeats 1", "teacache-calib record"])
def test_a_run_refused_after_the_model_loaded_leaves_no_fingerprint(command, tmp_path, monkeypatch, capsys):
    """A refusal from inside the model's run (here: its first generation) leaves the folder as it was, so the
    corrected command is not refused as "other settings"."""

    def refuse(*_args, **_kwargs):
        raise InputError("height/width: this model cannot make that")

    prompts = tmp_path / "prompts.txt"
    prompts.write_text("a red circle on a blue background at the left\n")
    prog = " ".join(command.split()[:2])
    argv = [*command.split()[2:], "--model", "tiny-shapes", "--seeds", "0", "--prompts", str(prompts)]
    out = tmp_path / "out"
    monkeypatch.chdir(tmp_path)
    patch_everywhere(monkeypatch, calib.run.generation, "generate", refuse)
    before = tree(tmp_path)
    assert command_main(prog)([*argv, "--out", str(out)]) == 2
    assert "cannot make that" in capsys.readouterr().err
    assert tree(tmp_path) == before
