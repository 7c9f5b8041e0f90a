"""One writer per output folder: an exclusive lock file that names its holder (pid, host, command).

Two sweeps into one folder would time each other's runs and overwrite each other's tables. The
lock is an OS lock (``flock``) on ``<folder>/.lock``, so it dies with its process; the file's text
says who holds it. A lock file whose process is gone (killed, power cut) is stale: it is named and
taken over. The file is removed on release, and a folder the lock created stays only if something
was written into it.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import fcntl
import json
import os
import socket
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from teacache.errors import TeaCacheError

LOCK_NAME = ".lock"


class FolderLocked(TeaCacheError, RuntimeError):
    """Another live process writes the folder; the message names it."""


@dataclass(frozen=True)
class Lock:
    path: Path
    stale: dict | None  # the holder a dead process left behind, if any (pid, host, command, started_utc)

    def stale_message(self) -> str | None:
        if self.stale is None:
            return None
        return f"took over a stale lock on {self.path.parent}: {describe(self.stale)} is no longer running"


def describe(holder: dict) -> str:
    return (
        f"pid {holder.get('pid', '?')} on host {holder.get('host', '?')} "
        f"({holder.get('command', 'unknown command')}, started {holder.get('started_utc', '?')})"
    )


def _read_holder(fd: int) -> dict | None:
    os.lseek(fd, 0, os.SEEK_SET)
    text = os.read(fd, 65536).decode("utf-8", errors="replace").strip()
    if not text:
        return None
    try:
        holder = json.loads(text)
    except ValueError:
        return {"pid": "?", "host": "?", "command": f"unreadable lock text {text[:40]!r}"}
    return holder if isinstance(holder, dict) else {"pid": "?", "host": "?"}


def _open_locked(path: Path) -> tuple[int, dict | None]:
    """Open and flock the lock file; retry when a releasing holder unlinked it between open and flock."""
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read_holder(fd) or {}
            os.close(fd)
            raise FolderLocked(
                f"--out: {path.parent} is being written by {describe(holder)}; wait for it to finish or choose "
                "another --out"
            ) from None
        try:
            same = os.fstat(fd).st_ino == os.stat(path).st_ino
        except FileNotFoundError:
            same = False
        if same:
            return fd, _read_holder(fd)
        os.close(fd)


@contextlib.contextmanager
def folder_lock(folder: str | os.PathLike, command: str | None = None) -> Iterator[Lock]:
    """Hold ``folder``'s lock for the block; raise FolderLocked when a live process holds it."""
    folder = Path(folder)
    created = [p for p in (folder, *folder.parents) if not p.exists()]
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / LOCK_NAME
    try:
        fd, stale = _open_locked(path)
    except FolderLocked:
        _remove_empty(created)
        raise
    holder = {
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "command": command or " ".join(sys.argv),
        "started_utc": _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }
    os.ftruncate(fd, 0)
    os.lseek(fd, 0, os.SEEK_SET)
    os.write(fd, (json.dumps(holder) + "\n").encode("utf-8"))
    os.fsync(fd)
    try:
        yield Lock(path, stale)
    finally:
        path.unlink(missing_ok=True)  # before unlocking: a waiting process then retries on a fresh file
        os.close(fd)
        _remove_empty(created)


def _remove_empty(created: list[Path]) -> None:
    """Folders the lock made for a command that then wrote nothing go again (no partial output)."""
    for folder in created:
        try:
            folder.rmdir()
        except OSError:
            return
