"""Training scripts of the embedded models: bad arguments are one line and exit 2, before any model is built."""

from __future__ import annotations

import pytest

from teacache.models import train_scenes, train_shapes


@pytest.mark.parametrize("script", [train_shapes, train_scenes], ids=["tiny-shapes", "tiny-scenes"])
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


@pytest.mark.parametrize("script", [train_shapes, train_scenes], ids=["tiny-shapes", "tiny-scenes"])
def test_an_output_that_is_a_file_is_refused(tmp_path, capsys, script):
    target = tmp_path / "weights"
    target.write_text("not a folder")
    assert script.main(["--out", str(target)]) == 2
    assert "is a file, expected a folder" in capsys.readouterr().err and target.read_text() == "not a folder"
