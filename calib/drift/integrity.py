"""A drift save's integrity record: the SHA-256 of each file the save wrote and the machine it ran on.

``--against`` judges a release by a save, so a save edited by hand (a tolerance raised to 100 %), cut short or
copied incompletely would otherwise be read as a verdict about the release. The record is written last (a save
without one did not finish), atomically, and verified before anything runs: a damaged save is refused in one
line naming its file. The machine says whether the save and the repeated runs share hardware (runs on other
hardware differ by the hardware, whatever the release did).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from teacache.errors import InputError
from teacache.io import file_sha256, read_json_object, write_json
from teacache.provenance import device_info, hardware_slug

NAME = "integrity.json"
FORMAT = 1
NOT_SEALED = (NAME, "progress.log")  # not the save's data: the record itself and the log (and hidden files: a lock)


class DamagedSave(InputError):
    """A save whose files are not the files it wrote (edited, missing, or never sealed)."""


def machine(provenance: dict | None = None) -> dict:
    """The hardware a save ran on: this machine's, or the one a provenance block records."""
    info = provenance if provenance is not None else device_info()
    return {"hardware": hardware_slug(info), "device_name": info.get("device_name"), "backend": info.get("backend")}


def _sealed_files(folder: Path) -> list[Path]:
    return sorted(
        p for p in folder.rglob("*") if p.is_file() and p.name not in NOT_SEALED and not p.name.startswith(".")
    )


def write(folder: Path, files: Iterable[str] | None = None, machine_: dict | None = None) -> dict:
    """Seal ``folder``: hash ``files`` (relative names; default every file in it) and write the record last."""
    folder = Path(folder)
    paths = [folder / f for f in files] if files is not None else _sealed_files(folder)
    record = {
        "format_version": FORMAT,
        "machine": machine_ or machine(),
        "files": {p.relative_to(folder).as_posix(): file_sha256(p) for p in paths},
    }
    write_json(folder / NAME, record)
    return record


def verify(folder: Path, required: Iterable[str], arg: str) -> dict:
    """The record of a sealed folder whose every listed file is as written and which lists ``required``;
    else :class:`DamagedSave` with one line naming the file."""
    folder = Path(folder)
    path = folder / NAME
    again = "save it again (drift --save DIR)"
    if not path.is_file():
        raise DamagedSave(f"{arg}: damaged save: {folder} has no {NAME} (the save did not finish, was made before "
                          f"saves were sealed, or was copied incompletely); {again}")  # fmt: skip
    try:
        record = read_json_object(path, DamagedSave)
    except DamagedSave as exc:
        raise DamagedSave(f"{arg}: damaged save: {exc}") from None
    files, where = record.get("files"), record.get("machine")
    if (
        record.get("format_version") != FORMAT
        or not isinstance(files, dict)
        or not all(isinstance(k, str) and isinstance(v, str) for k, v in files.items())
        or not isinstance(where, dict)
        or not isinstance(where.get("hardware"), str)
    ):
        raise DamagedSave(f"{arg}: damaged save: {path} is not an integrity record of format_version {FORMAT}")
    for name in required:
        if name not in files:
            raise DamagedSave(f"{arg}: damaged save: {path} does not list {name}, which the save needs; {again}")
    for name, digest in files.items():
        file = folder / name
        if ".." in Path(name).parts or Path(name).is_absolute():
            raise DamagedSave(f"{arg}: damaged save: {path} lists {name!r}, outside its folder")
        if not file.is_file():
            raise DamagedSave(f"{arg}: damaged save: {file} is missing ({NAME} lists it); {again}")
        if file_sha256(file) != digest:
            raise DamagedSave(f"{arg}: damaged save: {file} is not the file the save wrote (its SHA-256 differs "
                              f"from the one in {NAME}); {again}")  # fmt: skip
    return record


def seal_existing(folder: Path) -> dict:
    """Seal a save written before saves were sealed (the committed ones): every file as it is now, the machine
    taken from its tolerance.json's provenance. Only for a save known to be as its writer left it."""
    provenance = read_json_object(Path(folder) / "tolerance.json").get("provenance")
    if not isinstance(provenance, dict):
        raise InputError(f"{folder}/tolerance.json records no provenance: its machine is unknown")
    return write(folder, machine_=machine(provenance))
