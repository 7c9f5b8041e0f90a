"""A run folder: the output folder of a command that writes runs, and the one way every such command treats it.

One writer at a time: an OS lock (``flock``) on ``<folder>/.lock``, so it dies with its process, whose text
names the holder (pid, host, command); a lock whose process is gone (killed, power cut) is stale: named and
taken over. ``fingerprint.json``: the settings the results were made with, the weights' identity among them
(:mod:`calib.run.fingerprint`), checked before anything loads, so that a rerun resumes, extends (new seeds or
thresholds: said, and recorded with the date) or is refused in one line naming what differs. The plan of what
is left, agreed by every rank of ``mlx.launch`` (:mod:`calib.run.shard`); a progress log beside the results;
the line Ctrl-C prints (exit 130); tables written atomically (:mod:`teacache.io`). Each command describes its
folder once, as a :class:`RunFolder`, and goes through it.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import fcntl
import functools
import json
import os
import shutil
import socket
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO, TypeVar

from calib.run import fingerprint, ranks, shard
from calib.run.fingerprint import FILE, FolderState, SettingsMismatch
from calib.run.interrupts import Interrupted, interruptions
from calib.run.progress import track
from calib.run.units import UnitLayout, shard_folders
from teacache.errors import TeaCacheError
from teacache.io import FORMAT_VERSION, append_log, write_json

LOG = "progress.log"  # every line a command says about its progress, timestamped
LOCK_NAME = ".lock"
Measured = TypeVar("Measured")


def _now() -> str:
    return _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# ------------------------------------------------------------------------------------------- the lock


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
        "started_utc": _now(),
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


@dataclass(frozen=True)
class RunFolder:
    """What one command writes into its folder, and the steps every run into such a folder takes."""

    command: str  # the command line's name, recorded in the lock and the fingerprint
    results: tuple[str, ...] = ()  # what shows that a folder holds this command's results
    outputs: tuple[str, ...] = ()  # what --force-new removes (with the fingerprint)
    extendable: tuple[str, ...] = ()  # settings a rerun may add values to
    layout: UnitLayout | None = None  # where a sharded command keeps each unit
    log: str = LOG
    adopt: Callable[[Path, dict], dict] = fingerprint.from_provenance  # a folder from before fingerprints: its settings
    adopted_from: str = "provenance.json"  # the file an earlier version recorded them in

    # ------------------------------------------------------------------------------ one writer, its settings

    @contextlib.contextmanager
    def lock(self, folder: Path, command: str | None = None) -> Iterator[Lock]:
        """Hold ``folder``'s lock (FolderLocked when a live process holds it); a stale one is said and taken."""
        with folder_lock(folder, command or self.command) as lock:
            if lock.stale_message():
                print(lock.stale_message())
            yield lock

    def clear(self, folder: Path, say: bool = True) -> list[str]:
        """--force-new: remove what this command wrote into ``folder`` (its outputs and fingerprint), nothing else."""
        removed = []
        for name in (*self.outputs, FILE):
            path = folder / name
            if path.is_dir():
                shutil.rmtree(path)
            elif path.exists():
                path.unlink()
            else:
                continue
            removed.append(name)
        if removed and say:
            print(f"--force-new: removed {', '.join(removed)} from {folder}")
        return removed

    def read(self, folder: Path, data: dict | None = None) -> dict | None:
        """The folder's fingerprint (None without one); SettingsMismatch when another command wrote it."""
        data = fingerprint.read(folder) if data is None else data
        if data is not None and data.get("command") not in (None, self.command):
            raise SettingsMismatch(
                f"--out: {folder} holds the results of {data['command']}; {self.command} writes a folder of its "
                "own: choose another --out"
            )
        return data

    def check(self, folder: Path, settings: dict) -> FolderState:
        """Compare ``settings`` with the folder's fingerprint; raise SettingsMismatch naming every difference.

        ``settings`` may be partial (before the model loads, its variant is unknown): only its keys count. A
        folder from before fingerprints is judged by what its earlier version recorded (``adopt``).
        """
        current = fingerprint.canonical(settings)
        data = fingerprint.read(folder)
        adopted = data is None and fingerprint.has_results(folder, self.results)
        if adopted:
            data = self.adopt(folder, current)
        if self.read(folder, data) is None:
            return FolderState("new")
        differences, added = fingerprint.compare(data["settings"], current, self.extendable)
        if differences:
            source = f" (as its {self.adopted_from} from an earlier version says)" if adopted else ""
            raise SettingsMismatch(
                f"--out: {folder} was made with other settings{source}: {'; '.join(differences)}; pass --force-new "
                "to start it afresh, or choose a new --out"
            )
        status = "adopt" if adopted else "extend" if added else "resume"
        return FolderState(status, added, list(data.get("history", [])))

    def begin(self, folder: Path, settings: dict) -> FolderState:
        """:meth:`check`, and say what a resumed or extended folder will get."""
        state = self.check(folder, settings)
        if state.message(folder):
            print(state.message(folder))
        return state

    def save(self, folder: Path, settings: dict, state: FolderState | None = None) -> dict:
        """Write the fingerprint before the first result (checked now without ``state``); an extension is appended
        to its history."""
        state = self.check(folder, settings) if state is None else state
        history = [{"date_utc": _now(), "started": True}] if state.status == "new" else list(state.history)
        if state.added:
            history.append({"date_utc": _now(), "added": state.added})
        data = {"format_version": FORMAT_VERSION, "command": self.command,
                "settings": fingerprint.canonical(settings), "history": history}  # fmt: skip
        if state.status != "resume" or fingerprint.read(folder) is None:
            write_json(folder / FILE, data)
        return data

    def resumable(self, folder: Path, settings: dict, adopted: Callable[[Path], None] | None = None) -> None:
        """Refuse a folder made with other settings; ``adopted`` checks one from before fingerprints further."""
        if self.check(folder, settings).status == "adopt" and adopted is not None:
            adopted(folder)

    @contextlib.contextmanager
    def withdrawn_on_failure(self, folder: Path) -> Iterator[None]:
        """A fingerprint this run wrote goes again when the run stops before any result is saved: a refused run
        leaves the folder as it was, and the corrected command is not refused as "other settings"."""
        path = folder / FILE
        existed = path.exists()
        try:
            yield
        except BaseException:
            if not existed and not fingerprint.has_results(folder, self.results):
                path.unlink(missing_ok=True)
            raise

    @contextlib.contextmanager
    def writing(self, folder: Path, settings: dict, force_new: bool = False) -> Iterator[FolderState]:
        """A plain (one-process) run into ``folder``: locked, cleared by --force-new, checked and fingerprinted."""
        with self.lock(folder):
            if force_new:
                self.clear(folder)
            state = self.check(folder, settings)  # other settings: refused here
            with self.withdrawn_on_failure(folder):
                self.save(folder, settings, state)
                yield state

    # ---------------------------------------------------- a folder of configurations, each with its settings

    def configurations(self, folder: Path) -> dict[str, dict]:
        """The settings the fingerprint records per configuration (none without the file)."""
        return dict((self.read(folder) or {}).get("configurations") or {})

    def save_configuration(self, folder: Path, key: str, settings: dict) -> None:
        """Record the settings of one configuration (just before its rows are written)."""
        data = self.read(folder) or {"format_version": FORMAT_VERSION, "command": self.command, "settings": {}}
        data["configurations"] = {**data.get("configurations", {}), key: settings}
        data["history"] = [*data.get("history", []), {"date_utc": _now(), "measured": key}]
        write_json(folder / FILE, data)

    # ------------------------------------------------------------------------------------ saying progress

    def say(self, folder: Path, line: str, stream: TextIO | None = None) -> None:
        """One line to the terminal and into the folder's progress log."""
        print(line, file=stream or sys.stdout, flush=True)
        append_log(folder / self.log, line)

    def logger(self, folder: Path, stream: TextIO | None = None) -> Callable[[str], None]:
        return functools.partial(self.say, folder, stream=stream)

    def progress(self, folder: Path, label: str, total: int, noun: str | None = None):
        """The progress of ``total`` units, on the terminal and in the folder's progress log."""
        return track(label, total, noun or self.layout.noun, log=folder / self.log)

    def stopped(self, saved: int, total: int, where: Path, noun: str | None = None) -> str:
        """What a run stopped by Ctrl-C has saved, and how to go on."""
        noun = noun or self.layout.noun
        return f"interrupted: {saved} of {total} {noun} are saved in {where}; run the same command again to resume"

    @staticmethod
    @contextlib.contextmanager
    def interruptible(message: Callable[[], str]) -> Iterator[None]:
        """Ctrl-C in the block (also as mflux's StopImageGenerationException) raises Interrupted(``message()``)."""
        try:
            yield
        except interruptions():
            raise Interrupted(message()) from None

    # ------------------------------------------------------------------------------ a run over the ranks

    def sharded(self, out: Path, keys: Sequence[str], settings: dict, world: ranks.World | None = None,
                complete: Callable[[Path, str], bool] | None = None) -> shard.ShardedRun:  # fmt: skip
        """The units ``keys`` spread over the ranks; every rank must share ``settings`` (its hardware aside)."""
        agreed = {k: v for k, v in settings.items() if k != "hardware"}
        world = world if world is not None else ranks.connect()
        return shard.ShardedRun(world, out, keys, self.layout, agreed, complete)

    def run(self, run: shard.ShardedRun, settings: dict, force_new: bool, work: Callable[[shard.ShardedRun], Measured],
            merge: Callable[[shard.ShardedRun, Measured, dict[str, Path]], Path], interrupted: Callable[[], str],
            adopted: Callable[[Path], None] | None = None,
            restore: Callable[[Path], object] | None = None) -> Path | None:  # fmt: skip
        """--force-new, the locks and the settings check of every folder the merge may take, then this rank's
        ``work`` and rank 0's ``merge``; returns what the merge wrote (None on the other ranks). ``restore``: rank 0
        rebuilds in ``out`` the units a merge dropped once it had merged them, before the ranks plan what is left.

        Refusals come before anything loads, on every rank; a fingerprint this run wrote goes again when it
        stops before any result is saved; Ctrl-C raises Interrupted with ``interrupted()``.
        """
        world, out, folder = run.world, run.out, run.folder
        if force_new:
            error = None
            try:
                if world.rank == 0:  # OUT, shard folders included, is cleared before any rank claims its folder
                    with folder_lock(out, self.command):
                        self.clear(out)
            except FolderLocked as exc:
                error = exc
            shard.agree(world, error)
            if world.rank > 0 and folder.is_dir():  # a host without a shared folder clears its own shard folder
                with folder_lock(folder, self.command):
                    self.clear(folder, say=False)
        with contextlib.ExitStack() as stack:
            error = None
            try:  # this rank's folder locked (and OUT on rank 0, which merges), every folder the merge may take checked
                if world.size > 1 and world.rank == 0:
                    stack.enter_context(folder_lock(out, self.command))
                stack.enter_context(self.lock(folder))
                for _rank, other in shard_folders(out):
                    if other == folder or (other / FILE).is_file() or any(other.iterdir()):
                        self.resumable(other, settings, adopted)
                if restore is not None and world.rank == 0:  # checked and locked: the folder is this run's
                    restore(out)
            except TeaCacheError as exc:  # a held folder, other settings: every rank hears which
                error = exc
            shard.agree(world, error)
            stack.enter_context(self.withdrawn_on_failure(folder))
            measured, error = run.measure(functools.partial(work, run), interrupted)
            return run.conclude(error, None if measured is None else functools.partial(merge, run, measured))
