"""The journeys of README.md and docs/, run as written (activation included) in a fresh clone, leave its tests green.

Each test clones this repository (its committed state) into a temporary folder, runs ``make install &&
. .venv/bin/activate`` and then the journey's shell block verbatim with bash, from the clone's root, so
its outputs land where the page says (``runs/``, ``results/``, ``tests/tolerances/``). Then the clone's
own fast lane must pass, as ``make test`` would run it. Minutes each on tiny models: ``make test-slow``.
Journeys that need downloaded weights, several machines or a GPU are not run here.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests import ROOT, doc_pages

ACTIVATE = "make install && . .venv/bin/activate"
DRIFT, CURVES, TRACES = "docs/refit-and-drift.md", "docs/curves.md", "Traces and coefficients from another tool"
# Every ```sh block of README.md and docs/*.md (tests/doc_pages.py: page, heading, n-th block under it) is run as
# written by a test here or elsewhere, or says why no test on one CPU machine can run it.
RUN_HERE = (  # in a fresh clone, after ACTIVATE; then the clone's lint and fast lane (make test-slow)
    ("README.md", "teacache-lab", 0),  # make demo, make test
    ("README.md", "Journeys", 1),  # teacache-generate
    ("README.md", "Journeys", 2),  # campaign, a sweep with baselines, its report
    ("README.md", "Journeys", 3),  # campaign, tolerances, gapcheck
    ("README.md", "Journeys", 4),  # fit and emit on the shipped samples
    (DRIFT, "Refit after a new mflux release", 0),
    (DRIFT, "Refit after a new mflux release", 1),
    (CURVES, "Speed/quality curves for documentation", 0),
    (CURVES, "Speed/quality curves for documentation", 1),
    ("docs/tolerances.md", "Re-derive tolerances on new hardware", 0),
    ("docs/test-subjects.md", "The profile of any model", 0),
    (DRIFT, "After loading a LoRA or a fine-tune", 0),
    (DRIFT, "After loading a LoRA or a fine-tune", 1),
    (DRIFT, "After loading a LoRA or a fine-tune", 2),  # the fine-tune folder: record and fit with --base-model
)
# A journey whose page says it ends in another status: (exit status, what its output says)
ENDS = {
    (DRIFT, "Refit after a new mflux release", 1): (1, "tiny-open-flux1: refit-recommended"),  # --quantize 4
    (DRIFT, "After loading a LoRA or a fine-tune", 0): (1, "lora-scale-1.5: refit-recommended"),  # stripes at 1.5
}
RUN_ELSEWHERE = {  # block -> the test that runs it as written
    (DRIFT, TRACES, 0): "tests/test_readme_journeys.py::test_the_traces_journey_runs_as_written_on_the_shipped_samples",
    ("docs/generate.md", "Generate with TeaCache: `teacache-generate`", 0):
        "tests/test_docs_generate.py::test_the_commands_of_the_page_run_as_written",
    ("docs/caching-rules.md", "By speedup", 0):
        "tests/test_docs_caching_rules.py::test_first_block_cache_by_speedup_runs_as_written",
    ("docs/tolerances.md", "The quantized no-op at full size", 0):
        "tests/bench/tolerances/test_quantized_noop.py::test_the_pages_command_regenerates_the_committed_module",
    ("docs/tolerances.md", "The Intel module: tiny-shapes from a study's sweep", 0):
        "tests/bench/tolerances/test_module.py::test_the_pages_command_regenerates_the_committed_intel_module",
}  # fmt: skip
ACTIVATION = "the activation every journey here starts with (ACTIVATE)"
WEIGHTS, CUDA = "needs FLUX.1-dev's downloaded weights", "needs an NVIDIA GPU (MLX's CUDA build)"
MACHINES = "needs several GPUs or machines under mlx.launch"
NOT_RUN_HERE = {  # block -> why no test on one CPU machine runs it
    ("README.md", "teacache-lab", 1): ACTIVATION,
    **{(page, heading, 0): ACTIVATION for page, heading in (
        ("docs/campaigns.md", "The committed campaigns"), (CURVES, "Speed/quality curves and baselines"),
        ("docs/hardware.md", "Hardware: NVIDIA, Linux CPU, installing"),
        ("docs/peer-comparison.md", "The peer comparison: mlx-teacache"), (DRIFT, "Refit and drift"),
        ("docs/rescale-forms.md", "Rescale forms"), ("docs/sharding.md", "Sharding"),
        ("docs/tolerances.md", "Test tolerances"))},
    ("README.md", "Journeys", 0): WEIGHTS + " (its drift lines are docs/refit-and-drift.md's, run here)",
    (DRIFT, "Refit after a new mflux release", 2): WEIGHTS,
    ("README.md", "Journeys", 5): CUDA,
    ("docs/hardware.md", "NVIDIA GPUs (MLX's CUDA build) and comparing hardware", 0): CUDA,
    ("docs/tolerances.md", "The quantized no-op at full size", 1): "needs a GPU with 48 GiB (skipped on a CPU)",
    ("docs/peer-comparison.md", "Side by side with mlx-teacache", 0):
        "full-size random FLUX.1 (12 B parameters) needs a GPU; runs/fit is the reader's own fit",
    ("docs/peer-comparison.md", "Side by side with mlx-teacache", 1): "full-size random models need a GPU",
    ("docs/caching-rules.md", "What each rule costs at full size", 0): "full-size random models need a GPU",
    ("README.md", "Journeys", 6): MACHINES,
    ("docs/sharding.md", "Several Macs or GPUs: sharded record and sweep", 0): MACHINES,
    ("docs/sharding.md", "Several Macs or GPUs: sharded record and sweep", 1): MACHINES,
    ("docs/rescale-forms.md", "Emitting", 0): "TRACES and FIT stand for the reader's own files",
}  # fmt: skip


def test_every_shell_block_of_the_pages_is_run_or_says_why_not():
    found = {b.key for b in doc_pages.blocks()}
    listed = [*RUN_HERE, *RUN_ELSEWHERE, *NOT_RUN_HERE]
    assert len(listed) == len(set(listed)), "a block listed twice"
    assert found == set(listed), {"not listed": found - set(listed), "not on the pages": set(listed) - found}
    for node in RUN_ELSEWHERE.values():
        path, name = node.split("::")
        assert f"def {name}(" in (ROOT / path).read_text(encoding="utf-8"), node


def test_a_block_is_found_by_page_heading_and_place():
    text = "# P\n```sh\na\n```\n## J\n```sh\nb\n```\ntext\n```sh\nc\n```\n"
    assert [b.key for b in doc_pages.blocks({"x.md": text})] == [("x.md", "P", 0), ("x.md", "J", 0), ("x.md", "J", 1)]
    assert doc_pages.block("x.md", "J", 1, {"x.md": text}) == "c\n"
    with pytest.raises(AssertionError, match="no block"):
        doc_pages.block("x.md", "J", 2, {"x.md": text})


def _run(script: str, cwd: Path, timeout: int) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST", "VIRTUAL_ENV"))}
    return subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout)  # fmt: skip


def test_the_traces_journey_runs_as_written_on_the_shipped_samples(tmp_path):
    """The journey that needs no model (fit, replay and emit on samples/) runs in the fast lane: its last
    command writes the mlx-teacache file, which emit refuses for a default fit's mono+step selection."""
    shutil.copytree(ROOT / "samples", tmp_path / "samples")
    venv_bin = shlex.quote(str(Path(sys.executable).parent))  # the commands of the environment running the tests
    script = doc_pages.block(DRIFT, TRACES)
    done = _run(f'export PATH={venv_bin}:"$PATH"\n{script}', tmp_path, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert (tmp_path / "runs" / "sample-fit" / "_calibration_tiny_shapes.json").is_file()


@pytest.fixture
def clone(tmp_path) -> Path:
    target = tmp_path / "clone"
    subprocess.run(["git", "clone", "--quiet", str(ROOT), str(target)], check=True)
    return target


@pytest.mark.slow
@pytest.mark.parametrize("key", RUN_HERE, ids=lambda key: f"{key[0]}:{key[1]}:{key[2]}")
def test_a_journey_as_written_leaves_the_tests_green(key, clone):
    heading = f"{key[0]}: {key[1]} ({key[2]})"
    done = _run(f"{ACTIVATE}\n{doc_pages.block(*key)}", clone, timeout=3 * 3600)
    status, says = ENDS.get(key, (0, ""))
    assert done.returncode == status and says in done.stdout, (
        f"{heading}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    )
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
