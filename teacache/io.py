"""Atomic file writes: a reader never sees a half-written file, a killed run leaves no partial one."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from teacache.errors import InputError

FORMAT_VERSION = 1  # of every JSON/Parquet artifact this toolkit writes; readers reject other versions


def file_sha256(path: str | os.PathLike) -> str:
    """The SHA-256 of a file's bytes, read in 1 MiB pieces (a weights file need not fit in memory)."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; rename it over ``path`` only if the block succeeds."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        yield tmp_path
        os.chmod(tmp_path, 0o644 & ~_umask())  # mkstemp creates 0600; artifacts are meant to be read
        os.replace(tmp_path, target)
    finally:
        if tmp_path.exists():
            tmp_path.unlink()


def project_root() -> Path:
    """The repository holding teacache/, calib/ and bench/: committed results, docs and weights are found
    relative to it, so every module asks here instead of counting parents of its own file."""
    return Path(__file__).resolve().parent.parent


def portable(text: str) -> str:
    """Machine-specific absolute paths out of an artifact: the project root becomes ".", the home
    folder "~", the temp folder "$TMPDIR". Artifacts are committed and compared across machines."""
    for prefix, name in (
        (str(project_root()), "."),
        (tempfile.gettempdir(), "$TMPDIR"),
        (str(Path.home()), "~"),
    ):
        if prefix not in ("", "/"):
            text = re.sub(re.escape(prefix) + r"(?=[/\s\"'`),\]]|$)", name, text)
    return text


def write_text(path: str | os.PathLike, text: str) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(portable(text), encoding="utf-8")


def json_text(data: dict) -> str:
    """The text ``write_json`` writes for ``data``, paths made portable: what a rerun compares with its file."""
    return portable(json.dumps(data, indent=2, sort_keys=True, default=_json_default) + "\n")


def write_json(path: str | os.PathLike, data: dict) -> None:
    write_text(path, json_text(data))


def read_json_object(path: str | os.PathLike, error: type[Exception] = InputError) -> dict:
    """A JSON file that must hold an object; anything else raises ``error`` with one line naming the file."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise error(f"cannot read {path}: {exc}") from None
    if not isinstance(data, dict):
        raise error(f"{path}: expected a JSON object")
    return data


def write_parquet(path: str | os.PathLike, frame) -> None:
    with atomic_path(path) as tmp:
        frame.to_parquet(tmp, index=False)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _json_default(value):
    if hasattr(value, "item"):
        return value.item()
    if hasattr(value, "tolist"):
        return value.tolist()
    if isinstance(value, Path):
        return str(value)
    raise TypeError(f"not JSON serializable: {type(value).__name__}")


def append_log(path: Path, line: str) -> None:
    """One timestamped line (UTC) at the end of a log file, written at once."""
    path.parent.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    with path.open("a", encoding="utf-8") as handle:
        handle.write(f"{stamp} {line}\n")
