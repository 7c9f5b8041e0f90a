"""Progress on a non-terminal: a line per finished unit with done / total / ETA, at once; nothing for nothing."""

from __future__ import annotations

import io
import sys

from calib.run.progress import ProgressLines, track


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_lines_say_done_total_and_eta_and_fold_lines_closer_than_the_interval():
    clock, out = Clock(), io.StringIO()
    lines = ProgressLines("sweep", 4, "pairs", out, min_interval_s=10, clock=clock)
    for now in (20, 25, 40, 41):
        clock.now = now
        lines.advance()
    printed = out.getvalue().splitlines()
    assert printed == [
        "sweep: 1/4 pairs done, 0:00:20 elapsed, ETA 0:01:00",
        "sweep: 3/4 pairs done, 0:00:40 elapsed, ETA 0:00:13",
        "sweep: 4/4 pairs done, 0:00:41 elapsed, ETA 0:00:00",
    ]


def test_a_non_terminal_gets_lines_and_nothing_to_do_prints_nothing():
    out = io.StringIO()
    with track("recording", 2, "runs", out) as progress:
        progress.advance()
        assert out.getvalue().startswith("recording: 1/2 runs done")  # written at once, not at exit
        progress.advance()
    empty = io.StringIO()
    with track("sweep", 0, "pairs", empty) as progress:
        pass
    assert empty.getvalue() == ""


def test_a_resume_with_nothing_left_prints_no_empty_bar(tmp_path, capsys):
    """Through the command: output to a file (not a terminal), a finished recording resumed. In this process
    (its stdout and stderr are captured, not a terminal); tests/calib/run/test_run_folders.py runs the script."""
    from calib.cli import main as calib_main

    prompts = tmp_path / "p.txt"
    prompts.write_text("a red circle on a blue background at the left\n")
    argv = ["record", "--model", "tiny-shapes", "--seeds", "0", "--steps", "3", "--prompts", str(prompts),
            "--overhead-pairs", "0", "--out", str(tmp_path / "t")]  # fmt: skip
    assert not sys.stdout.isatty() and not sys.stderr.isatty()
    assert calib_main(argv) == 0
    first = capsys.readouterr()
    assert "recording: 1/1 runs done" in first.out, first.err
    assert calib_main(argv) == 0
    again = capsys.readouterr()
    assert "-:--:--" not in again.out + again.err and "0%" not in again.out


def test_a_log_gets_the_plan_and_a_timestamped_line_for_every_unit(tmp_path):
    import io

    from calib.run.progress import track

    log = tmp_path / "out" / "progress.log"
    with track("sweep", 3, "pairs", stream=io.StringIO(), log=log) as progress:
        for _ in range(3):
            progress.advance()
    lines = log.read_text().splitlines()
    assert lines[0].endswith("sweep: 3 pairs to do") and len(lines) == 4
    assert lines[-1].split(" ", 1)[1].startswith("sweep: 3/3 pairs done")
    assert all(line[:4].isdigit() and line[10] == "T" for line in lines)
