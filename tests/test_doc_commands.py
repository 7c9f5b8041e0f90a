"""Every project command the README and docs pages write parses with the parser of the command it names.

The journeys that run on one CPU machine run whole in the slow lane (tests/test_readme_journeys.py); this fast
check covers every block, those needing a GPU, weights or several machines too: a renamed option, a dropped
subcommand or a value of the wrong kind in a page fails here, before a reader meets it.
"""

from __future__ import annotations

import contextlib
import importlib
import io

import pytest

from bench import cli as bench_cli
from calib import cli as calib_cli
from tests import doc_pages

SUBCOMMANDS = {"teacache-bench": bench_cli.SUBCOMMANDS, "teacache-calib": calib_cli.SUBCOMMANDS}
CASES = [
    pytest.param(script, args, id=f"{block.page}:{block.heading}:{block.index}:{script} {' '.join(args[:1])}")
    for block in doc_pages.blocks()
    for line in block.lines
    for script, args in doc_pages.commands(line)
]


def parse(script: str, args: list[str]) -> None:
    """Parse ``args`` as ``script`` would, without running anything; SystemExit on what argparse refuses."""
    if script == "teacache-demo":
        assert not args, "teacache-demo takes no arguments"
    elif script == "teacache-generate":
        from calib.generate.arguments import parse as parse_generate

        parse_generate(args)
    else:
        assert args and args[0] in SUBCOMMANDS[script], f"{script}: no subcommand {args[:1]}"
        importlib.import_module(SUBCOMMANDS[script][args[0]]).setup_arg_parser().parse_args(args[1:])


def test_the_pages_name_commands_of_every_console_script():
    assert {script for script, _ in (case.values for case in CASES)} >= {
        "teacache-bench",
        "teacache-calib",
        "teacache-generate",
    }


@pytest.mark.parametrize(("script", "args"), CASES)
def test_each_command_of_the_pages_parses(script, args):
    errors = io.StringIO()
    with contextlib.redirect_stderr(errors):
        try:
            parse(script, args)
        except SystemExit as exc:
            pytest.fail(f"{script} {' '.join(args)}: argparse refused it (exit {exc.code}): {errors.getvalue()}")


def test_commands_are_found_after_and_and_launch_and_assignments():
    line = "A=1 teacache-bench report x && mlx.launch -n 2 -- .venv/bin/python -m calib.cli fit t --out f | tee l"
    assert doc_pages.commands(line) == [
        ("teacache-bench", ["report", "x"]),
        ("teacache-calib", ["fit", "t", "--out", "f"]),
    ]


def test_a_wrong_option_fails_to_parse():
    with contextlib.redirect_stderr(io.StringIO()), pytest.raises(SystemExit):
        parse("teacache-bench", ["report", "runs/sweep", "--no-such-option"])


def _reference_table() -> tuple[str, dict]:
    """(docs/reference.md above its layout table, pyproject.toml's console scripts)."""
    import tomllib

    from tests import ROOT

    table = (ROOT / "docs" / "reference.md").read_text(encoding="utf-8").split("\n\n| folder |")[0]
    return table, tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["scripts"]


def test_the_reference_names_every_command_and_every_subcommand():
    """docs/reference.md's command table is where a reader looks a command up: none may be missing from it."""
    table, scripts = _reference_table()
    missing = [script for script in scripts if f"`{script}" not in table]
    for script, subcommands in SUBCOMMANDS.items():
        rows = [line for line in table.splitlines() if f"`{script} " in line]
        missing += [f"{script} {name}" for name in subcommands if not any(f" {name}" in row for row in rows)]
    assert not missing, f"docs/reference.md's command table lacks {missing}"


def test_the_reference_names_no_command_the_scripts_lack():
    """The other way round: a row of docs/reference.md's command table names a console script and its subcommands
    as they are, so a renamed or dropped command leaves no row behind."""
    table, scripts = _reference_table()
    unknown = []
    for row in (line for line in table.splitlines() if line.startswith("| `teacache-")):
        script, _, rest = row.split("`")[1].partition(" ")
        if script not in scripts:
            unknown.append(script)
            continue
        names = [part.split()[0] for part in rest.split(" / ") if part.split() and part[0] not in "-["]
        unknown += [f"{script} {name}" for name in names if name not in SUBCOMMANDS.get(script, {})]
    assert not unknown, f"docs/reference.md's command table names {unknown}, which no console script has"
