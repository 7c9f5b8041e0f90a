"""One error type: every exception the project defines is a TeaCacheError, which the commands turn into one line
and its exit status in one place; any other exception is a bug and keeps its traceback."""

from __future__ import annotations

import ast
import importlib
import inspect

import pytest

import calib.cli
import calib.fit.command
from calib.run import shard
from calib.run.command import run_command
from calib.run.interrupts import Interrupted
from teacache.errors import InputError, TeaCacheError
from tests import ROOT

PACKAGES = ("teacache", "calib", "bench")
# a BaseException on purpose: SIGTERM from mlx.launch, caught like KeyboardInterrupt, never reported as a refusal
NOT_REFUSALS = {"calib.run.shard.Stopped"}


def defined_exceptions() -> list[type[BaseException]]:
    """Every exception class a module of the packages defines (imported to see its bases; warnings left out)."""
    found = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            names = [node.name for node in ast.walk(tree) if isinstance(node, ast.ClassDef) and node.bases]
            if not names:
                continue
            parts = path.relative_to(ROOT).with_suffix("").parts
            module = importlib.import_module(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
            for name in names:
                cls = getattr(module, name, None)
                exception = inspect.isclass(cls) and issubclass(cls, BaseException) and not issubclass(cls, Warning)
                if exception and cls.__module__ == module.__name__:
                    found.append(cls)
    return found


def test_every_exception_the_project_defines_is_a_teacache_error():
    found = defined_exceptions()
    names = {f"{cls.__module__}.{cls.__qualname__}" for cls in found}
    assert {"calib.traces.errors.TraceError", "bench.compare.input.CompareError", "teacache.errors.InputError"} <= names
    strays = sorted(n for cls, n in ((c, f"{c.__module__}.{c.__qualname__}") for c in found)
                    if n not in NOT_REFUSALS and not issubclass(cls, TeaCacheError))  # fmt: skip
    assert not strays, f"not TeaCacheError subclasses: {strays}"


def test_the_exit_statuses():
    assert TeaCacheError.exit_status == 2 and InputError.exit_status == 2
    assert Interrupted.exit_status == 130 and shard.ShardsIncomplete.exit_status == 1
    assert issubclass(InputError, ValueError)  # API users who catch ValueError keep working


@pytest.mark.parametrize(
    ("error", "status"),
    [(InputError("--thresholds:\n  expected   numbers"), 2), (Interrupted("saved 3 of 5\nrun it again"), 130),
     (shard.ShardsIncomplete("2 units\nnot done"), 1)],
)  # fmt: skip
def test_a_refusal_through_the_dispatcher_is_one_line_and_its_status(error, status, monkeypatch, tmp_path, capsys):
    def refuse(*_args):
        raise error

    monkeypatch.setattr(calib.fit.command, "run", refuse)
    assert calib.cli.main(["fit", str(tmp_path / "traces.parquet"), "--out", str(tmp_path / "fit")]) == status
    err = capsys.readouterr().err
    assert err == f"teacache-calib fit: {' '.join(str(error).split())}\n"


@pytest.mark.parametrize("bug", [KeyError("selected"), TypeError("'NoneType' object"), ValueError("plain")])
def test_an_unexpected_exception_in_a_command_propagates(bug, monkeypatch, tmp_path, capsys):
    """A KeyError, a TypeError or a plain ValueError inside a command is a bug: its traceback shows, never a
    one-line refusal that exits 2."""

    def broken(*_args):
        raise bug

    monkeypatch.setattr(calib.fit.command, "run", broken)
    argv = [str(tmp_path / "traces.parquet"), "--out", str(tmp_path / "fit")]
    with pytest.raises(type(bug)):
        calib.cli.main(["fit", *argv])
    with pytest.raises(type(bug)):
        calib.fit.command.main(argv)  # the module's own main (python -m, a test) too
    assert capsys.readouterr().err == ""


def test_an_unexpected_exception_in_a_bench_command_propagates(monkeypatch, tmp_path):
    import bench.cli
    from bench.report import command as report

    def broken(*_args, **_kwargs):
        raise KeyError("speedup")

    monkeypatch.setattr(report, "build_report", broken)
    with pytest.raises(KeyError):
        bench.cli.main(["report", str(tmp_path), "--out", str(tmp_path / "report")])


def test_run_command_is_the_one_handler(capsys):
    assert run_command("prog", lambda: None) == 0
    assert run_command("prog", lambda code: code, 3) == 3
    with pytest.raises(KeyboardInterrupt):  # Ctrl-C: the dispatcher's own handling, not a refusal
        run_command("prog", lambda: (_ for _ in ()).throw(KeyboardInterrupt()))
    assert capsys.readouterr().err == ""


def test_one_place_turns_a_refusal_into_its_line():
    """No command prints its own refusals: every ``except TeaCacheError`` that prints is calib.run.command's."""
    printing = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            for node in ast.walk(tree):
                if not isinstance(node, ast.ExceptHandler) or node.type is None:
                    continue
                prints = any(isinstance(n, ast.Call) and ast.unparse(n.func) == "print" for n in ast.walk(node))
                if prints and "TeaCacheError" in ast.unparse(node.type):
                    printing.append(str(path.relative_to(ROOT)))
    assert printing == ["calib/run/command.py"]
