"""Long work says how long it will take before it starts, and asks for --yes above an hour."""

from __future__ import annotations

import pytest

from calib.run import estimate
from tests.conftest import one_line, record, sweep


def test_the_estimate_counts_every_step_of_every_generation():
    work = estimate.Work(generations=120, steps=30)
    assert work.seconds(0.5) == 1800.0
    assert "at most 0:30:00 for 120 generations x 30 steps at 0.5 s/step (timed)" in estimate.describe(
        work, 0.5, "timed"
    )
    estimate.check_confirmed(work, 0.5, yes=False)  # half an hour: runs unasked
    with pytest.raises(ValueError, match=r"^--yes: this is about 2:00:00 of work .* fewer seeds"):
        estimate.check_confirmed(work, 2.0, yes=False, fewer="seeds")
    estimate.check_confirmed(work, 2.0, yes=True)


def test_a_second_run_is_timed_only_where_the_first_would_ask_for_yes():
    work, again = estimate.Work(10, 10), []

    def timed() -> float:
        again.append(1)
        return 5.0

    assert estimate.per_step(100.0, timed, work, yes=False) == (10.0, "the warm-up's vanilla run, compilation included")
    assert again == []
    assert estimate.per_step(10_000.0, timed, work, yes=False) == (0.5, "a vanilla run after the warm-up")
    assert estimate.per_step(10_000.0, timed, work, yes=True)[0] == 1000.0 and len(again) == 1


def test_a_later_stage_over_the_limit_is_timed_again_too():
    """A campaign's record stage is short, its sweep long: a warm-up slowed by compilation must not refuse the
    sweep when a compiled run would pass."""
    work, later = estimate.Work(10, 10), estimate.Work(400, 10)  # 10 s/step: 1,000 s and 40,000 s

    def timed() -> float:
        return 5.0  # 0.5 s/step: 2,000 s for the later stage

    assert estimate.per_step(100.0, timed, work, yes=False, later=later) == (0.5, "a vanilla run after the warm-up")
    assert estimate.per_step(100.0, timed, work, yes=False)[0] == 10.0


@pytest.mark.parametrize("command", [record, sweep])
def test_work_over_the_limit_is_refused_without_yes_and_leaves_no_folder(
    command, tmp_path, prompts, shared_model, monkeypatch, capsys
):
    monkeypatch.setattr(estimate, "CONFIRM_ABOVE_S", 0.0)  # any work is "over an hour"
    out = tmp_path / "out"
    assert command(out, prompts) == 2
    printed = capsys.readouterr()
    assert "estimate: at most" in printed.out
    assert one_line(printed.err).split(": ", 1)[1].startswith("--yes: this is about")
    assert not out.exists()
    assert command(out, prompts, "--yes") == 0
    assert "estimate: at most" in (out / "progress.log").read_text()
