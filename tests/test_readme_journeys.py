"""The journeys of README.md and docs/, run as written (activation included) in a fresh clone, leave its tests green.

Each test clones this repository (its committed state) into a temporary folder, runs ``make install &&
. .venv/bin/activate`` and then the journey's shell block verbatim with bash, from the clone's root, so
its outputs land where the page says (``runs/``, ``results/``, ``tests/tolerances/``). Then the clone's
own fast lane must pass, as ``make test`` would run it. Minutes each on tiny models: ``make test-slow``.
Journeys that need downloaded weights, several machines or a GPU are not run here.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests import ROOT

ACTIVATE = "make install && . .venv/bin/activate"
# The journeys that run on one CPU machine with the embedded models, by their heading (README.md or docs/).
JOURNEYS = (
    "Traces and coefficients from another tool",
    "Speed/quality curves for documentation",
    "Re-derive tolerances on new hardware",
)


def pages() -> list[Path]:
    """README.md, then the docs pages: where the journeys are written."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def journey(heading: str, texts: dict[str, str] | None = None) -> str:
    """The shell block under ``heading`` as bash will run it (continuation lines kept). ``heading`` is looked up
    in README.md and docs/*.md (or ``texts``, name -> text) and must be there exactly once."""
    texts = texts if texts is not None else {p.name: p.read_text(encoding="utf-8") for p in pages()}
    pattern = re.compile(rf"^#+ {re.escape(heading)}$", flags=re.M)
    found = [(name, match) for name, text in texts.items() for match in pattern.finditer(text)]
    assert len(found) == 1, f"section {heading!r} is in {[name for name, _ in found]}: wanted exactly once"
    name, start = found[0]
    block = re.compile(r"^```sh\n(.*?)^```", flags=re.S | re.M).search(texts[name], start.end())
    assert block, f"no shell block under {heading!r} in {name}"
    return block.group(1)


def test_a_journey_heading_is_found_once_over_the_readme_and_the_docs():
    block = "```sh\nteacache-bench report runs/sweep\n```\n"
    assert journey("J", {"README.md": "x\n", "docs/a.md": f"## J\n\n{block}"}).startswith("teacache-bench")
    for texts in ({"README.md": "## K\n"}, {"README.md": f"## J\n{block}", "docs/a.md": f"### J\n{block}"}):
        with pytest.raises(AssertionError, match="exactly once"):
            journey("J", texts)


def test_every_named_journey_is_in_the_readme_or_the_docs():
    for heading in JOURNEYS:
        assert re.search(r"(teacache-calib|teacache-bench) ", journey(heading))


def _run(script: str, cwd: Path, timeout: int) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST", "VIRTUAL_ENV"))}
    return subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout)  # fmt: skip


def test_the_traces_journey_runs_as_written_on_the_shipped_samples(tmp_path):
    """The journey that needs no model (fit, replay and emit on samples/) runs in the fast lane: its last
    command writes the mlx-teacache file, which emit refuses for a default fit's mono+step selection."""
    shutil.copytree(ROOT / "samples", tmp_path / "samples")
    venv_bin = shlex.quote(str(Path(sys.executable).parent))  # the commands of the environment running the tests
    script = journey("Traces and coefficients from another tool")
    done = _run(f'export PATH={venv_bin}:"$PATH"\n{script}', tmp_path, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert (tmp_path / "runs" / "sample-fit" / "_calibration_tiny_shapes.json").is_file()


@pytest.fixture
def clone(tmp_path) -> Path:
    target = tmp_path / "clone"
    subprocess.run(["git", "clone", "--quiet", str(ROOT), str(target)], check=True)
    return target


@pytest.mark.slow
@pytest.mark.parametrize("heading", JOURNEYS)
def test_a_readme_journey_as_written_leaves_the_tests_green(heading, clone):
    done = _run(f"{ACTIVATE}\n{journey(heading)}", clone, timeout=3 * 3600)
    assert done.returncode == 0, f"{heading}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    lint = _run(f"{ACTIVATE}\nruff check . && ruff format --check .", clone, timeout=600)
    assert lint.returncode == 0, lint.stdout[-3000:]
    tests = _run(f"{ACTIVATE}\npytest -q -x -p no:cacheprovider", clone, timeout=3600)
    assert tests.returncode == 0, f"after {heading!r}:\n{tests.stdout[-5000:]}"


@pytest.mark.slow
def test_a_campaign_rerun_on_committed_results_resumes_and_rewrites_none_of_them(clone):
    """The journeys' `teacache-bench campaign --model tiny-shapes`, once, its results committed, then again: the
    second run resumes (exit 0) and leaves the committed traces, fit and sweep as they are."""
    command = f"{ACTIVATE}\nteacache-bench campaign --model tiny-shapes"
    first = _run(command, clone, timeout=3600)
    assert first.returncode == 0, first.stderr[-3000:]
    commit = "git add -A results && git -c user.name=t -c user.email=t@t commit -q -m results"
    assert _run(commit, clone, timeout=120).returncode == 0
    again = _run(command, clone, timeout=3600)
    assert again.returncode == 0, again.stderr[-3000:]
    changed = _run("git status --porcelain results", clone, timeout=120).stdout.splitlines()
    stages = ("/traces/", "/fit/", "/sweep/")
    assert not [line for line in changed if any(stage in line for stage in stages)], changed
