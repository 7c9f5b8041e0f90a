"""The console scripts' dispatcher: each subcommand is a module with ``setup_arg_parser()`` and ``main(argv)``."""

from __future__ import annotations

import importlib
import os
import sys

# mflux draws a tqdm bar per generation; our commands show one progress bar of their own.
os.environ.setdefault("TQDM_DISABLE", "1")


def refuse_unsupported_mflux(prog: str) -> int | None:
    """Exit code 2 after one line when the installed mflux is outside the supported range, before any import
    of mflux or the command; None when the command may run."""
    from teacache._compat import MfluxVersionError, check_mflux_version

    try:
        check_mflux_version()
    except MfluxVersionError as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return 2
    return None


def dispatch(prog: str, subcommands: dict[str, str], argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help") or argv[0] not in subcommands:
        names = ", ".join(subcommands)
        print(f"usage: {prog} {{{names}}} [options]   ({prog} <command> --help)")
        if argv and argv[0] not in ("-h", "--help"):
            print(f"{prog}: unknown command {argv[0]!r}; expected one of: {names}", file=sys.stderr)
            return 2
        return 0
    refused = refuse_unsupported_mflux(f"{prog} {argv[0]}")
    if refused is not None:
        return refused
    from calib.interrupts import interruptions

    try:
        module = importlib.import_module(subcommands[argv[0]])
        return module.main(argv[1:]) or 0
    except interruptions():  # commands that save as they go say so themselves
        print(f"{prog} {argv[0]}: interrupted before it finished; run it again", file=sys.stderr)
        return 130
