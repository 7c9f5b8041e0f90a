"""Atomic file writes: a reader never sees a half-written file, a killed run leaves no partial one."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import tempfile
import time
from collections.abc import Collection, Iterator
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


def json_text(data: dict, rows: Collection[str] | None = None) -> str:
    """The text ``write_json`` writes for ``data``, paths made portable: what a rerun compares with its file.

    Keys sorted, indented two spaces. Without ``rows`` every value has a line of its own. With ``rows`` (the keys
    of tables, such as fit.json's ``candidates``) each element of a list under one of those keys takes one line,
    and so does each list of numbers (nested ones too): the same JSON, numbers spelled alike, a fraction of the
    lines."""
    if rows is None:
        return portable(json.dumps(data, indent=2, sort_keys=True, default=_json_default) + "\n")
    plain = json.loads(json.dumps(data, sort_keys=True, default=_json_default))  # plain types, keys in order
    return portable(_layout(plain, "", frozenset(rows)) + "\n")


def _layout(value, indent: str, rows: frozenset[str], table: bool = False) -> str:
    """``value`` as JSON: a row of a table and a list of numbers on one line (no spaces), anything else nested."""
    if not isinstance(value, (dict, list)) or not value or _numbers(value):
        return json.dumps(value, separators=(",", ":"))
    inner = indent + "  "
    if isinstance(value, dict):
        parts = [f"{json.dumps(k)}: {_layout(v, inner, rows, k in rows)}" for k, v in value.items()]
        return "{\n" + ",\n".join(inner + part for part in parts) + "\n" + indent + "}"
    parts = [json.dumps(v, separators=(",", ":")) if table else _layout(v, inner, rows) for v in value]
    return "[\n" + ",\n".join(inner + part for part in parts) + "\n" + indent + "]"


def _numbers(value) -> bool:
    """A non-empty list of numbers (or nulls), or of such lists."""
    if not isinstance(value, list) or not value:
        return False
    return all(v is None or (isinstance(v, (int, float)) and not isinstance(v, bool)) or _numbers(v) for v in value)


def write_json(path: str | os.PathLike, data: dict, rows: Collection[str] | None = None) -> None:
    write_text(path, json_text(data, rows))


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
