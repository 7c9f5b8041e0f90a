"""Training scripts of the embedded models: bad arguments are one line and exit 2, before any model is built."""

from __future__ import annotations

import pytest

from teacache.io import project_root
from teacache.models import train_lora, train_open, train_shapes

SCRIPTS = pytest.mark.parametrize(
    ("script", "argv"),
    [(train_shapes, []), (train_open, ["--family", "flux2"]), (train_lora, ["--style", "stripes"])],
    ids=["tiny-shapes", "tiny-open", "tiny-open-flux2-lora"],
)


@pytest.mark.parametrize("script", [train_shapes], ids=["tiny-shapes"])
@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--steps", "0"], "--steps: expected a number > 0, got 0"),
        (["--batch", "-1"], "--batch: expected a number > 0, got -1"),
        (["--lr", "nan"], "--lr: expected a number > 0, got nan"),
        (["--samples", "-1"], "--samples: expected a number >= 0, got -1"),
    ],
)
def test_bad_arguments_are_one_line_and_build_nothing(tmp_path, capsys, monkeypatch, script, argv, message):
    monkeypatch.setattr(script, "train", lambda args: pytest.fail("training started"))
    out = tmp_path / "out"
    assert script.main([*argv, "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1 and not out.exists()


@SCRIPTS
def test_an_output_that_is_a_file_is_refused(tmp_path, capsys, script, argv):
    target = tmp_path / "weights"
    target.write_text("not a folder")
    assert script.main([*argv, "--out", str(target)]) == 2
    assert "is a file; expected a folder" in capsys.readouterr().err and target.read_text() == "not a folder"


@SCRIPTS
def test_a_folder_holding_what_training_does_not_write_is_refused_as_it_was(tmp_path, capsys, script, argv):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    assert script.main([*argv, "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "notes.txt" in err[0] and "choose another --out" in err[0]
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt"]


@SCRIPTS
def test_a_tracked_folder_of_the_checkout_is_refused(capsys, script, argv):
    if not (project_root() / ".git").exists():
        pytest.skip("not a git checkout")
    target = project_root() / "docs"
    before = sorted(p.name for p in target.iterdir())
    assert script.main([*argv, "--out", str(target)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "does not regenerate them" in err[0]
    assert sorted(p.name for p in target.iterdir()) == before
