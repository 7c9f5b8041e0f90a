"""How record, sweep and campaign end: their expected failures become one line and an exit code."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TypeVar

from calib.run import arguments, ranks, shard
from calib.run.folder_lock import FolderLocked
from calib.run.interrupts import Interrupted

T = TypeVar("T")


def run_guarded(prog: str, action: Callable[[], T]) -> tuple[int, T | None]:
    """(exit code, what ``action`` returned): 2 for bad input or a held folder, 130 when interrupted,
    1 when ranks left pairs undone (mlx.launch itself exits 0 whatever a rank did)."""
    try:
        return 0, action()
    except (ValueError, FolderLocked, ranks.ShardError) as exc:
        return arguments.fail(prog, str(exc)), None
    except Interrupted as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return arguments.EXIT_INTERRUPTED, None
    except shard.ShardsIncomplete as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return 1, None
