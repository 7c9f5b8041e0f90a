"""Shared fixtures: one tiny pipeline per session, a generate() that returns final latents, and the
session's tiny-flux1 in place of every model load (``shared_model``)."""

from __future__ import annotations

import json
import os
import re
import socket
import sys
from pathlib import Path

import pytest

# Test processes of pytest-xdist (make test runs as many as the machine has cores): one OpenBLAS thread each, and
# for the commands they start, unless set. Two threads a process oversubscribe the cores, and OpenBLAS's waiting
# threads spin: many seconds of CPU per generation of a tiny model. Read when teacache loads OpenBLAS, just below.
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import teacache  # noqa: F401  (first: OpenBLAS preload before MLX)
from tests.tolerances import describe, load_tolerances


class FinalLatents:
    """mflux callback that keeps the latents the loop ended with."""

    def __init__(self) -> None:
        self.latents = None

    def call_after_loop(self, seed, prompt, latents, config) -> None:
        self.latents = latents


def make_generate(model, **defaults):
    capture = FinalLatents()
    model.callbacks.register(capture)

    def generate(prompt: str = "a lighthouse at dusk", seed: int = 0, **kwargs):
        model.generate_image(seed=seed, prompt=prompt, **{**defaults, **kwargs})
        return capture.latents

    return generate


@pytest.fixture(scope="session")
def tiny_flux1():
    return teacache.load_model("tiny-flux1")


def patch_everywhere(monkeypatch, owner, name: str, replacement) -> None:
    """Replace ``owner.<name>`` and every other name the project's loaded modules bound to the same object.

    Commands import what they use at their top (``from teacache import load_model``), so patching the
    defining module alone would leave their names pointing at the original.
    """
    original = getattr(owner, name)
    monkeypatch.setattr(owner, name, replacement)
    for module in list(sys.modules.values()):
        if getattr(module, "__name__", "").partition(".")[0] not in ("bench", "calib", "teacache"):
            continue
        for attr, value in list(vars(module).items()):
            if value is original:
                monkeypatch.setattr(module, attr, replacement)


def free_port_pair() -> int:
    """A port P with P+1 free too: mlx.launch --backend ring -n 2 takes two consecutive ports."""
    for _ in range(20):
        with socket.socket() as a:
            a.bind(("127.0.0.1", 0))
            port = a.getsockname()[1]
            try:
                with socket.socket() as b:
                    b.bind(("127.0.0.1", port + 1))
                    return port
            except OSError:
                continue
    raise RuntimeError("no two free consecutive ports")


@pytest.fixture
def shared_model(tiny_flux1, monkeypatch):
    """Every command gets the session's tiny-flux1 instead of loading its own (one load per session)."""

    def load(name, *args, **kwargs):
        assert name == "tiny-flux1", name
        return tiny_flux1

    patch_everywhere(monkeypatch, teacache, "load_model", load)
    return tiny_flux1


@pytest.fixture(scope="session")
def flux1_generate(tiny_flux1):
    return make_generate(tiny_flux1, num_inference_steps=10, height=128, width=128, guidance=3.5)


@pytest.fixture(scope="session")
def tolerances():
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # said once, in the report header
        return load_tolerances()


def pytest_report_header(config):
    """Say once, at the top of the run, which tolerance module the tests use and its status."""
    import warnings

    from teacache.provenance import hardware_slug

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        module = load_tolerances()
    line = f"tolerances: {describe(module)} for hardware {hardware_slug()}"
    if caught:
        line += f"\nPROVISIONAL: {caught[0].message}"
    return line


# ------------------------------------------------------------- small record and sweep runs of tiny-flux1

SMALL = ["--model", "tiny-flux1", "--steps", "4", "--size", "32x32"]


@pytest.fixture
def prompts(tmp_path) -> Path:
    path = tmp_path / "prompts.json"
    path.write_text(json.dumps({"fox": "a red fox in the snow", "tower": "a lighthouse at dusk"}))
    return path


def record(out: Path, prompts: Path, *extra: str) -> int:
    from calib import record as record_cmd

    argv = [*SMALL, "--prompts", str(prompts), "--seeds", "0", "--overhead-pairs", "0", "--out", str(out), *extra]
    return record_cmd.main(argv)


def sweep(out: Path, prompts: Path, *extra: str) -> int:
    from bench.sweep import command as sweep_cmd

    argv = [*SMALL, "--prompts", str(prompts), "--seeds", "0", "--thresholds", "0,0.5", "--repeats", "1"]
    return sweep_cmd.main([*argv, "--out", str(out), *extra])


def one_line(err: str) -> str:
    """The one line a command wrote to stderr (mflux's tqdm bars aside)."""
    lines = [line for line in err.strip().splitlines() if line.strip() and not re.search(r"\d+%\|", line)]
    assert len(lines) == 1, lines
    return lines[0]


# ---------------------------------------------------------------- refusals: one line, nothing changed


def tree(folder: Path) -> dict[str, tuple[int, int]]:
    """Every path under ``folder`` with its size and mtime: equal before and after means nothing changed."""
    return {str(p.relative_to(folder)): (p.stat().st_size, p.stat().st_mtime_ns) for p in folder.rglob("*")}


def command_main(command: str):
    """``teacache-calib SUB`` / ``teacache-bench SUB`` as a function of its argv, through the dispatcher."""
    from calib.run.dispatch import dispatch

    prog, _, sub = command.partition(" ")
    if prog == "teacache-calib":
        from calib.cli import SUBCOMMANDS
    else:
        from bench.cli import SUBCOMMANDS
    return lambda argv: dispatch(prog, SUBCOMMANDS, [sub, *argv])


def _tripwire(monkeypatch) -> None:
    """Any model load or model measurement means the command went to work before checking its arguments."""

    def boom(*_args, **_kwargs):
        raise AssertionError("work started before the arguments were checked")

    import bench.timing.fullsize
    import calib.run.arguments

    monkeypatch.setattr(calib.run.arguments, "load_model", boom)
    monkeypatch.setattr(bench.timing.fullsize, "measure_model", boom)


def refused(command: str, argv: list[str], tmp_path: Path, monkeypatch, capsys) -> str:
    """Run ``command argv`` from inside tmp_path before any model loads; assert exit 2, one line on stderr, no
    traceback and no change anywhere in tmp_path; return the line."""
    monkeypatch.chdir(tmp_path)
    _tripwire(monkeypatch)
    before = tree(tmp_path)
    try:
        code = command_main(command)(argv)
    except SystemExit as exc:  # argparse's own refusals exit from inside the parser, as the script does
        code = exc.code
    err = capsys.readouterr().err
    assert code == 2, err
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert tree(tmp_path) == before, "a refused command changed the folder"
    return lines[0]


@pytest.fixture
def no_model(monkeypatch):
    """Any model load fails the test: a refusal of bad input must come before one."""

    def refuse(*args, **kwargs):
        raise AssertionError("a model was loaded before the bad input was refused")

    patch_everywhere(monkeypatch, teacache, "load_model", refuse)
