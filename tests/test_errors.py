"""One error type: every exception the project defines is a TeaCacheError, which the commands turn into one line
and its exit status in one place; any other exception is a bug and keeps its traceback."""

from __future__ import annotations

import ast
import importlib
import inspect
from collections import Counter

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


# The plain ValueError / TypeError / RuntimeError raises that stay: a bug's check (its traceback is wanted) or a
# protocol that needs the builtin. A refusal of user input raises a TeaCacheError subclass instead, one that is
# also the builtin it was before (InputError, InputTypeError, StateError, FitError, ...).
# (file, function, builtin, how many, why)
PLAIN_RAISES = [
    ("teacache/io.py", "_json_default", "TypeError", 1, "json.dumps' default= hook must raise TypeError"),
    ("teacache/variants/__init__.py", "zoo", "ValueError", 1, "targets come from the package's own specs"),
    ("calib/pyliteral.py", "scalar", "TypeError", 1, "callers write only numbers and strings"),
    ("calib/run/generation.py", "paired_overhead", "ValueError", 1, "callers measure only with pairs > 0"),
    ("calib/run/interleave.py", "interleave", "ValueError", 1, "callers check --repeats first"),
    ("calib/run/shard.py", "ShardedRun.__init__", "ValueError", 1, "the plan is built by the folder"),
    ("calib/run/units.py", "assign", "ValueError", 1, "the world size comes from the launcher"),
    ("bench/peer/gate.py", "_recorded_signal.recorded", "RuntimeError", 1, "mlx-teacache's gate changed"),
    ("bench/quality/adherence.py", "summarize", "ValueError", 1, "callers check --n >= 1"),
    ("bench/report/markdown.py", "header", "ValueError", 1, "alignments are written in code"),
    ("bench/sweep/arms.py", "isolated_times.run", "RuntimeError", 1, "isolated and in-process runs disagree"),
    ("bench/sweep/baselines.py", "Arm.__post_init__", "ValueError", 2, "arms come from the factories"),
    ("bench/sweep/baselines.py", "StepCacheRun.step", "RuntimeError", 1, "mflux called outside its loop"),
    ("bench/sweep/baselines.py", "measure_pair.run", "RuntimeError", 1, "a repeat skipped other steps"),
    ("bench/sweep/isolate.py", "job", "ValueError", 1, "callers check --repeats first"),
    ("bench/sweep/isolate.py", "run_isolated", "RuntimeError", 1, "the child process failed; its tail is shown"),
    ("bench/timing/fullsize.py", "_write_model", "RuntimeError", 1, "the plan and its rows disagree"),
    ("bench/timing/step_cost_measure.py", "arm_settings", "ValueError", 1, "--arms is parsed first"),
    ("bench/timing/step_cost_measure.py", "Session.run", "RuntimeError", 1, "the pipeline skipped its callback"),
    ("bench/timing/step_cost_switch.py", "switched", "ValueError", 1, "schedules come from mixed_schedule"),
    ("bench/tolerances/mutants.py", "_proxy_class", "TypeError", 1, "an adapter without a proxy class"),
    ("bench/tolerances/noop_pairs.py", "arm", "ValueError", 1, "run names come from measure.py"),
    ("bench/tolerances/noop_pairs.py", "check", "ValueError", 1, "pairs come from differences()"),
]
PLAIN = ("ValueError", "TypeError", "RuntimeError")


def plain_raises() -> Counter:
    """(file, function, builtin) of every ``raise ValueError/TypeError/RuntimeError`` in the packages, counted."""
    found: Counter = Counter()

    def visit(node: ast.AST, path: str, scope: tuple[str, ...]) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                visit(child, path, (*scope, child.name))
                continue
            if isinstance(child, ast.Raise) and child.exc is not None:
                raised = child.exc.func if isinstance(child.exc, ast.Call) else child.exc
                if isinstance(raised, ast.Name) and raised.id in PLAIN:
                    found[(path, ".".join(scope) or "<module>", raised.id)] += 1
            visit(child, path, scope)

    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            visit(ast.parse(path.read_text(encoding="utf-8")), path.relative_to(ROOT).as_posix(), ())
    return found


def test_no_new_plain_builtin_raises():
    """A refusal raises a TeaCacheError subclass (the commands print it as one line); a plain ValueError,
    TypeError or RuntimeError is kept only where PLAIN_RAISES says why, so their count cannot grow."""
    allowed = Counter({(path, function, builtin): n for path, function, builtin, n, _why in PLAIN_RAISES})
    found = plain_raises()
    assert len(allowed) == len(PLAIN_RAISES), "PLAIN_RAISES names a function twice"
    new = sorted(f"{p} {f}: {b} x{n - allowed[p, f, b]}" for (p, f, b), n in found.items() if n > allowed[p, f, b])
    assert not new, f"raise a TeaCacheError subclass (teacache.errors) for a refusal, or add to PLAIN_RAISES: {new}"
    stale = sorted(f"{p} {f}: {b}" for (p, f, b), n in allowed.items() if found[p, f, b] < n)
    assert not stale, f"PLAIN_RAISES allows more than the code raises; lower or drop: {stale}"
