"""The console scripts' dispatcher: each subcommand is a module with ``setup_arg_parser()`` and ``main(argv)``."""

from __future__ import annotations

import importlib
import os
import sys

from calib.run.command import run_command
from calib.run.interrupts import interruptions

# mflux draws a tqdm bar per generation; our commands show one progress bar of their own.
os.environ.setdefault("TQDM_DISABLE", "1")


def check_supported_mflux() -> None:
    """Raise MfluxVersionError (exit 2) when the installed mflux is outside the supported range, before any import
    of mflux or the command."""
    from teacache._compat import check_mflux_version

    check_mflux_version()


def dispatch(prog: str, subcommands: dict[str, str], argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help") or argv[0] not in subcommands:
        names = ", ".join(subcommands)
        print(f"usage: {prog} {{{names}}} [options]   ({prog} <command> --help)")
        if argv and argv[0] not in ("-h", "--help"):
            print(f"{prog}: unknown command {argv[0]!r}; expected one of: {names}", file=sys.stderr)
            return 2
        return 0
    try:
        return run_command(f"{prog} {argv[0]}", _run, subcommands[argv[0]], argv[1:])
    except interruptions():  # commands that save as they go say so themselves
        print(f"{prog} {argv[0]}: interrupted before it finished; run it again", file=sys.stderr)
        return 130


def _run(module_name: str, argv: list[str]) -> int | None:
    check_supported_mflux()
    return importlib.import_module(module_name).main(argv)
