"""Slow lane (``make test-slow``): docs/tolerances.md's "Re-derive tolerances on new hardware", exactly as written.

The shell block under that heading runs verbatim with bash, in a copy of the project so that nothing committed
changes. The copy uses this checkout's installed environment: its ``.venv`` links to this one's contents with
a stamp of its own, so ``make install`` has nothing to do, and a ``uv`` that refuses to run stands guard on
PATH against any install. The journey must end green: its last command is ``make test``, the whole default
lane with ruff, against the module the journey derived.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from bench.tolerances.module import module_path, read_module
from tests import ROOT, doc_pages

pytestmark = pytest.mark.slow

IGNORED = {".git", ".venv", ".uv-bootstrap", "__pycache__", ".pytest_cache", ".ruff_cache", ".hypothesis"}


def journey_commands() -> str:
    """The first ```sh block under the journey's heading, as the docs page writes it."""
    return doc_pages.block("docs/tolerances.md", "Re-derive tolerances on new hardware")


def _project_files() -> list[Path]:
    """The files a clone has (tracked, plus new ones not ignored), or every file outside caches without git."""
    try:
        listed = subprocess.run(
            ["git", "-C", str(ROOT), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            capture_output=True,
            check=True,
        ).stdout.decode()
        return [Path(p) for p in listed.split("\0") if p and (ROOT / p).is_file()]
    except (OSError, subprocess.CalledProcessError):
        return [
            p.relative_to(ROOT)
            for p in ROOT.rglob("*")
            if p.is_file() and not IGNORED & set(p.relative_to(ROOT).parts) and "demo" not in p.parts
        ]


def copy_project(dst: Path) -> Path:
    """A clone (the tests that read git need one) with the working tree's changes on top, and this checkout's
    environments (the default one and each mflux release's) linked in with stamps of their own."""
    if (ROOT / ".git").exists():
        subprocess.run(["git", "clone", "-q", str(ROOT), str(dst)], check=True)
    for rel in _project_files():
        (dst / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / rel, dst / rel)
    for venv in [ROOT / ".venv", *sorted(ROOT.glob(".venv-mflux-*"))]:
        (dst / venv.name).mkdir()
        for entry in venv.resolve().iterdir():
            if not entry.name.startswith(".installed-"):
                (dst / venv.name / entry.name).symlink_to(entry)
        (dst / venv.name / f".installed-{os.environ.get('BACKEND', 'cpu')}").touch()  # newer than every copied file
    return dst


def test_the_journey_re_derives_the_tolerances_and_ends_green(tmp_path):
    if not (ROOT / ".venv" / "bin" / "python").exists():
        pytest.skip("needs the installed environment (make install)")
    project = copy_project(tmp_path / "project")
    guard = tmp_path / "guard"
    guard.mkdir()
    refusal = "the journey test installs nothing: run make install first"
    (guard / "uv").write_text(f"#!/bin/sh\necho '{refusal}' >&2\nexit 1\n")
    (guard / "uv").chmod(0o755)
    env = {
        **os.environ,
        "PATH": f"{project / '.venv' / 'bin'}{os.pathsep}{guard}{os.pathsep}{os.environ['PATH']}",
        "PYTHONPATH": str(project),  # the copy's code, not the checkout the environment was installed from
        "PYTHONUNBUFFERED": "1",
        "TQDM_DISABLE": "1",
    }
    env.pop("VIRTUAL_ENV", None)
    log = tmp_path / "journey.log"
    with log.open("w") as out:
        done = subprocess.run(
            ["bash", "-e", "-o", "pipefail", "-c", journey_commands()],
            cwd=project,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    tail = "\n".join(log.read_text(errors="replace").splitlines()[-60:])
    assert done.returncode == 0, f"the journey failed (exit {done.returncode}); last lines of {log}:\n{tail}"
    assert re.search(r"\d+ passed", tail), tail  # make test ran the default lane

    hardware = subprocess.run(
        [sys.executable, "-c", "from teacache.provenance import hardware_slug; print(hardware_slug())"],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    module = read_module(module_path(hardware, project / "tests" / "tolerances"))
    assert {"tiny-flux1", "tiny-open-flux2"} <= set(module.variants)  # the journey's two campaigns, and any
    assert module.constants["STATUS"] == "calibrated"  # others this hardware holds
    sweep = project / "results" / hardware / "tiny-open-flux2" / "0.24.0" / "sweep"
    measured = pd.read_parquet(sweep / "runs.parquet")[["prompt_id", "seed"]].drop_duplicates()
    cases = {(pid, seed) for pid, _, seed in module.constants["TINY_OPEN_FLUX2_CASES"]}
    assert cases == set(measured.itertuples(index=False, name=None))  # the tests run on these very pairs
    assert (project / "results" / hardware / "tiny-open-flux2" / "0.24.0" / "gapcheck" / "gapcheck.md").is_file()
