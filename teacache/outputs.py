"""Where a command may write: one rule for every command's output, checked before any work.

- A folder is written only if it is new, empty, or this command's own: it holds this command's marker file
  (:attr:`Writes.marker`, e.g. the fingerprint.json that names it), or nothing but what this command writes
  there (:attr:`Writes.names`).
- A file only if it is new, or ``--force`` is given.
- Never where git tracks files in this project's own checkout (its packages, ``samples/``, ``results/``,
  ``tests/``), unless the command's purpose is to regenerate them (:attr:`Writes.regenerates`), and then it
  says so. Ignored folders (``runs/``) and everything outside the checkout are free.

A refusal is one ValueError line that names the argument; it creates and changes nothing.
"""

from __future__ import annotations

import contextlib
import errno
import fnmatch
import functools
import json
import os
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from teacache.errors import InputError
from teacache.io import project_root

CHECKOUT = project_root()  # the repository holding this package, when it is a git checkout
# Entries that say nothing about who owns a folder: a writer's lock (calib.run.folder), the Finder's index.
NEUTRAL = (".lock", ".DS_Store")
MAX_SHOWN = 3  # foreign entries named in a refusal before "..."


@dataclass(frozen=True)
class Writes:
    """What a command writes into its output folder, so the rule can tell its own folder from anyone else's.

    ``names``: the files and folders it writes there (fnmatch patterns). ``marker``: a file among them that shows
    the folder is this command's whatever else sits beside it (notes, other commands' subfolders); ``is_own``
    tells its own marker from another's (default: a JSON object whose "command" names this command). A command
    that writes one file: ``is_own`` tells a file it wrote (rewritten without --force) from anyone else's.
    ``regenerates``: the checkout folders (relative, e.g. "results") this command exists to rewrite.
    """

    command: str
    names: tuple[str, ...] = ()
    marker: str | None = None
    is_own: Callable[[Path], bool] | None = None
    regenerates: tuple[str, ...] = ()

    def writes(self, name: str) -> bool:
        return any(fnmatch.fnmatchcase(name, pattern) for pattern in self.names)


# ------------------------------------------------------------------------------------ the checkout


@functools.cache
def _tracked(root: Path) -> frozenset[str] | None:
    """The files git tracks in ``root`` (None: not a git checkout, e.g. an installed package, or no git)."""
    if not (root / ".git").exists():
        return None
    try:
        done = subprocess.run(["git", "-C", str(root), "ls-files", "-z"], capture_output=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    if done.returncode != 0:
        return None
    return frozenset(name for name in done.stdout.decode("utf-8", "replace").split("\0") if name)


def _ignored(root: Path, relative: str) -> bool:
    try:
        done = subprocess.run(["git", "-C", str(root), "check-ignore", "-q", "--", relative], capture_output=True,
                              timeout=30)  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return False
    return done.returncode == 0


def _nearest_existing(path: Path) -> Path:
    for folder in (path, *path.parents):
        if folder.exists():
            return folder
    return Path.cwd()


def committed(path: str | os.PathLike, folder: bool = True) -> tuple[str, str] | None:
    """(the path relative to this project's checkout, the folder there in which git tracks files) when writing
    ``path`` (a folder, or a file when ``folder`` is False) would write among tracked files; else None.

    The folder is the output folder itself (or, when it does not exist yet, the nearest one above it); for a file,
    the folder it goes into. Paths git ignores (``runs/``) never count.
    """
    root = CHECKOUT
    target = Path(os.path.abspath(Path(path).expanduser()))
    try:
        relative = target.resolve().relative_to(root.resolve())
    except (ValueError, OSError):
        return None
    tracked = _tracked(root)
    if tracked is None or (relative.parts and relative.parts[0] == ".git"):
        return None
    if relative.parts and _ignored(root, relative.as_posix() + ("/" if folder else "")):  # "/runs/" needs the "/"
        return None
    where = _nearest_existing(target if folder else target.parent).resolve().relative_to(root.resolve())
    prefix = where.as_posix()
    if prefix == ".":
        return (relative.as_posix(), ".") if tracked else None
    if any(name == prefix or name.startswith(prefix + "/") for name in tracked):
        return relative.as_posix(), prefix
    return None


_GRANTED: list[Path] = []


@contextlib.contextmanager
def granted(folder: str | os.PathLike) -> Iterator[None]:
    """The commands this one runs may write under ``folder``, which it has checked as its own (a campaign's
    stages, the fits and sweeps of a criteria check): the rule is not applied again there."""
    _GRANTED.append(Path(os.path.abspath(folder)))
    try:
        yield
    finally:
        _GRANTED.pop()


def _is_granted(path: Path) -> bool:
    target = Path(os.path.abspath(path))
    return any(target == g or g in target.parents for g in _GRANTED)


def _check_checkout(path: Path, writes: Writes, arg: str, folder: bool) -> str | None:
    """Refuse a path among the checkout's tracked files; return the note to print when this command regenerates
    them (None: outside the checkout, or ignored there)."""
    found = committed(path, folder)
    if found is None:
        return None
    relative, where = found
    if any(relative == r or relative.startswith(r.rstrip("/") + "/") for r in writes.regenerates):
        return (
            f"{writes.command}: regenerating {relative} in this project's checkout (git status and git diff show "
            "what changed)"
        )
    if relative == ".":
        place = "the root of this project's checkout, where git tracks files"
    elif where == relative:
        place = "committed in this project's checkout (git tracks files in it)"
    elif where == ".":
        place = "in the root of this project's checkout, where git tracks files"
    else:
        place = f"in {where}/ of this project's checkout, which git tracks"
    raise InputError(
        f"{arg}: {path} is {place}; {writes.command} does not regenerate them: write under runs/ (ignored) or "
        "outside the checkout"
    )


def check_in_checkout(path: str | os.PathLike, arg: str, writes: Writes) -> None:
    """Only the rule's checkout part: refuse ``path`` among the checkout's tracked files, by the name the user
    gave (a command that writes beside an existing file under a new name checks the given one first)."""
    path = _check_path(path, arg)
    if not _is_granted(path):
        _check_checkout(path, writes, arg, folder=False)


# --------------------------------------------------------------------------------------- the rule


def _command_of(path: Path) -> str | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    command = data.get("command") if isinstance(data, dict) else None
    return command if isinstance(command, str) else None


def _shown(names: list[str]) -> str:
    return ", ".join(names[:MAX_SHOWN]) + (f" and {len(names) - MAX_SHOWN} more" if len(names) > MAX_SHOWN else "")


def check_folder_is_own(path: Path, writes: Writes, arg: str = "--out") -> None:
    """The folder part of the rule alone: ``path`` is no folder yet, empty, or ``writes``' own (a command checks
    the subfolders its stages write with it)."""
    if not path.is_dir():
        return
    entries = sorted(p.name for p in path.iterdir() if p.name not in NEUTRAL)
    if not entries:
        return
    expected = f"a new folder, an empty one, or one {writes.command} wrote"
    if writes.marker is not None and (path / writes.marker).is_file():
        marker = path / writes.marker
        if writes.is_own is not None:
            if writes.is_own(marker):
                return
            raise InputError(
                f"{arg}: {path} holds a {writes.marker} that {writes.command} did not write; expected {expected}: "
                f"choose another {arg}"
            )
        other = _command_of(marker)
        if other == writes.command:
            return
        if other is not None:
            raise InputError(
                f"{arg}: {path} holds the results of {other}; {writes.command} writes a folder of its own: choose "
                f"another {arg}"
            )
    foreign = [name for name in entries if not writes.writes(name)]
    if foreign:
        raise InputError(
            f"{arg}: {path} holds {_shown(foreign)}, which {writes.command} does not write; expected {expected}: "
            f"choose another {arg}"
        )


def _check_path(path: str | os.PathLike, arg: str) -> Path:
    if isinstance(path, str) and not path.strip():
        raise InputError(f"{arg}: expected a path, got an empty string")
    return Path(path)


def check_writable_under(path: Path, arg: str) -> None:
    """The nearest existing folder above ``path`` takes a new file (probed: a permission check alone says yes
    to root on a read-only or immutable folder). Creates nothing that stays."""
    existing = _nearest_existing(path)
    if not existing.is_dir():
        raise InputError(f"{arg}: cannot create {path}: {existing} is a file, not a folder")
    try:
        with tempfile.TemporaryFile(dir=existing, prefix=".write-probe-"):
            pass
    except OSError as exc:
        # the folder is there, so "No such file or directory" means a system folder (/proc) that takes no files
        reason = "it takes no new files" if exc.errno == errno.ENOENT else exc.strerror or exc
        raise InputError(f"{arg}: cannot write in {existing} ({reason}); choose a writable folder") from None


def check_out_dir(path: str | os.PathLike, arg: str = "--out", writes: Writes | None = None) -> Path:
    """A folder this command may write into: new, empty, or its own (``writes`` says what it writes), outside
    the checkout's tracked folders, under a folder we can write to.

    Every command that writes a folder checks it here, before it reads or computes anything else. Without
    ``writes`` only the kind of path and the permission are checked (the commands not yet moved to the rule).
    """
    path = _check_path(path, arg)
    if path.exists() and not path.is_dir():
        command = writes.command if writes is not None else "this command"
        raise InputError(f"{arg}: {path} is a file; expected a folder (a new one, an empty one, or one {command} "
                         "wrote)")  # fmt: skip
    if writes is not None and not _is_granted(path):
        note = _check_checkout(path, writes, arg, folder=True)
        check_folder_is_own(path, writes, arg)
        check_writable_under(path, arg)
        if note:
            print(note)
        return path
    check_writable_under(path, arg)
    return path


def check_out_file(
    path: str | os.PathLike,
    arg: str = "--out",
    what: str = "file",
    writes: Writes | None = None,
    force: bool = False,
    beside: str | None = None,
) -> Path:
    """A file this command may write (``what`` names it in the message): not a folder; new unless ``force``
    (``--force``) or the command's own (``writes.is_own``); outside the checkout's tracked folders unless
    ``writes`` regenerates them; in a folder we can create or write to. ``beside``: the main output, when this
    is a file written next to it. Every command that writes one file checks it here, before any work; without
    ``writes`` an existing file is replaced (the commands not yet moved to the rule).
    """
    path = _check_path(path, arg)
    if path.is_dir():
        raise InputError(f"{arg}: {path} is a folder; expected the path of the {what} to write")
    if path.exists() and not os.access(path, os.W_OK):
        raise InputError(f"{arg}: cannot overwrite {path} (not writable); choose another path")
    note = None
    if writes is not None and not _is_granted(path):
        note = _check_checkout(path, writes, arg, folder=False)
        own = note is not None or (writes.is_own is not None and path.is_file() and writes.is_own(path))
        if path.exists() and not force and not own:  # a file it regenerates or wrote itself is its to rewrite
            where = f" (written beside {beside})" if beside else ""
            raise InputError(f"{arg}: {path} exists{where}; pass --force to replace it, or choose another path")
    check_writable_under(path.parent, arg)
    if note:
        print(note)
    return path
