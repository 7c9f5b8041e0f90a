"""Code: AST fingerprints of the mflux functions the adapters depend on, against the verified releases' table.

A fingerprint is the sha256 of ``ast.unparse`` of the function with every docstring stripped: comments,
docstrings and formatting do not count, any change to the code does (``ast.unparse`` rather than
``ast.dump``, whose fields differ between Python versions). The table (``data/code.json``) holds each
function's fingerprint in every verified release, read from the wheels:
``teacache-calib drift-code --wheels DIR`` (``DIR`` holding ``mflux-<version>-py3-none-any.whl`` for each,
from ``pip download --no-deps mflux==<version>``).
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import importlib.util
import sys
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from calib.drift import hooked
from calib.run.arguments import CommandParser
from teacache.errors import InputError

TABLE = Path(__file__).with_name("data") / "code.json"
TABLE_FORMAT = 1
ABSENT = None  # the fingerprint of a function a release does not define


def parse_version(version: str) -> tuple[int, ...]:
    parts = []
    for piece in version.split(".")[:3]:
        digits = "".join(ch for ch in piece if ch.isdigit())
        parts.append(int(digits) if digits else 0)
    return tuple(parts)


def _strip_docstrings(node: ast.AST) -> ast.AST:
    for item in ast.walk(node):
        if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef | ast.Module):
            body = item.body
            first = body[0].value if body and isinstance(body[0], ast.Expr) else None
            if isinstance(first, ast.Constant) and isinstance(first.value, str):
                item.body = body[1:] or [ast.Pass()]
    return node


def find_definition(source: str, qualname: str) -> ast.AST | None:
    """The ``def`` of ``Class.method`` or ``function`` at the top level of a module's source."""
    definitions = ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef
    scope: list[ast.stmt] = ast.parse(source).body
    node = None
    for part in qualname.split("."):
        node = next((n for n in scope if isinstance(n, definitions) and n.name == part), None)
        if node is None:
            return None
        scope = node.body
    return node


def fingerprint(source: str | None, qualname: str) -> str | None:
    """sha256 (16 hex digits) of the function's code without docstrings; None where it is not defined."""
    if source is None:
        return ABSENT
    node = find_definition(source, qualname)
    if node is None:
        return ABSENT
    text = ast.unparse(_strip_docstrings(node))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def module_path(module: str) -> str:
    return module.replace(".", "/") + ".py"


def installed_reader() -> Callable[[str], str | None]:
    """Reads the source of the mflux modules that an import would run (the first mflux on the path, which need
    not be the distribution's own folder), importing nothing."""
    found = importlib.util.find_spec("mflux")
    if found is not None and found.submodule_search_locations:
        root = Path(next(iter(found.submodule_search_locations))).parent
    else:
        root = Path(metadata.distribution("mflux").locate_file(""))

    def read(module: str) -> str | None:
        path = root / module_path(module)
        return path.read_text(encoding="utf-8") if path.is_file() else None

    return read


def wheel_reader(wheel: Path) -> Callable[[str], str | None]:
    archive = zipfile.ZipFile(wheel)
    names = set(archive.namelist())

    def read(module: str) -> str | None:
        path = module_path(module)
        return archive.read(path).decode("utf-8") if path in names else None

    return read


def fingerprints(functions: set[str], read_source) -> dict[str, str | None]:
    result = {}
    for function in sorted(functions):
        module, qualname = function.split(":")
        result[function] = fingerprint(read_source(module), qualname)
    return result


def all_functions(hooked_by_family: dict[str, set[str]]) -> set[str]:
    return set().union(*hooked_by_family.values())


# ------------------------------------------------------------------------------------------ the table


def build_table(wheels: dict[str, Path]) -> dict:
    """Fingerprints of every hooked function (derived against each release) in every release's wheel."""
    readers = {version: wheel_reader(path) for version, path in wheels.items()}
    functions = set()
    for read in readers.values():
        functions |= all_functions(hooked.hooked_functions(read))
    by_release = {version: fingerprints(functions, read) for version, read in readers.items()}
    present = sorted(f for f in functions if any(by_release[v][f] is not ABSENT for v in by_release))
    releases = sorted(wheels, key=parse_version)
    return {
        "format_version": TABLE_FORMAT,
        "releases": releases,
        "functions": {f: {v: by_release[v][f] for v in releases} for f in present},
        "provenance": {
            "command": "teacache-calib drift-code --wheels DIR",
            "wheels": {v: wheels[v].name for v in releases},
            "wheel_sha256": {v: hashlib.sha256(wheels[v].read_bytes()).hexdigest() for v in releases},
            "python": ".".join(map(str, sys.version_info[:3])),
            "fingerprint": "sha256 of ast.unparse(def) with docstrings stripped, first 16 hex digits",
        },
    }


def load_table(path: Path = TABLE) -> dict:
    from teacache.io import read_json_object

    table = read_json_object(path)
    if table.get("format_version") != TABLE_FORMAT:
        raise InputError(f"{path}: format_version {table.get('format_version')}, expected {TABLE_FORMAT}")
    return table


# ------------------------------------------------------------------------------------------ comparison


def nearest_release(version: str, releases: list[str]) -> str:
    """The verified release itself, else the newest one below it, else the oldest one (an older release)."""
    if version in releases:
        return version
    ordered = sorted(releases, key=parse_version)
    below = [r for r in ordered if parse_version(r) < parse_version(version)]
    return below[-1] if below else ordered[0]


def last_change(history: dict[str, str | None], releases: list[str], upto: str) -> str | None:
    """The verified release (up to ``upto``) in which a function last changed; None: the same in all of them."""
    ordered = [r for r in sorted(releases, key=parse_version) if parse_version(r) <= parse_version(upto)]
    changed = None
    for previous, current in zip(ordered, ordered[1:], strict=False):
        if history.get(previous) != history.get(current):
            changed = current
    return changed


@dataclass(frozen=True)
class FunctionChange:
    function: str
    families: list[str]
    installed: str | None
    nearest: str | None
    same_as: list[str]  # verified releases whose fingerprint equals the installed one
    last_changed: str | None  # within the verified range, up to the nearest release

    def describe(self, nearest_release: str) -> str:
        if self.installed is ABSENT:
            what = f"absent here, defined in {nearest_release}"
        elif self.nearest is ABSENT:
            what = f"new: not defined in {nearest_release}"
        else:
            what = f"differs from {nearest_release}"
        same = f"; the same as in {', '.join(self.same_as)}" if self.same_as else ""
        last = f"; last changed in {self.last_changed}" if self.last_changed else "; unchanged across the table"
        return f"{self.function}: {what}{same}{last}"

    def as_dict(self) -> dict:
        return {
            "function": self.function, "families": self.families, "installed": self.installed,
            "nearest": self.nearest, "same_as": self.same_as, "last_changed": self.last_changed,
        }  # fmt: skip


def compare(installed: dict[str, str | None], table: dict, version: str, hooked_by_family: dict) -> dict:
    """What differs from the nearest verified release, per function and per family."""
    releases = table["releases"]
    nearest = nearest_release(version, releases)
    changes = []
    untracked = []
    for function, value in sorted(installed.items()):
        history = table["functions"].get(function)
        if history is None:
            if value is not ABSENT:
                untracked.append(function)
            continue
        if history.get(nearest) == value:
            continue
        changes.append(
            FunctionChange(
                function=function,
                families=hooked.families_of(function, hooked_by_family),
                installed=value,
                nearest=history.get(nearest),
                same_as=[r for r in releases if r != nearest and history.get(r) == value],
                last_changed=last_change(history, releases, nearest),
            )
        )
    families = [fam for fam in hooked_by_family if fam != hooked.ALL_FAMILIES]
    return {
        "version": version,
        "verified": version in releases,
        "nearest": nearest,
        "releases": releases,
        "functions_checked": len(installed),
        "changed": [c.as_dict() for c in changes],
        "lines": [c.describe(nearest) for c in changes],
        "untracked": untracked,  # read by the adapters now, missing from the table: regenerate it
        "families": {fam: sorted({c.function for c in changes if fam in c.families}) for fam in families},
    }


def installed_report(table: dict | None = None) -> dict:
    """The code half of the drift verdict for the installed mflux."""
    table = table if table is not None else load_table()
    read = installed_reader()
    by_family = hooked.hooked_functions(read)
    functions = all_functions(by_family) | set(table["functions"])
    return compare(fingerprints(functions, read), table, metadata.version("mflux"), by_family)


def setup_arg_parser() -> argparse.ArgumentParser:
    parser = CommandParser(prog="teacache-calib drift-code", description=__doc__.split("\n\n")[0])
    parser.add_argument("--wheels", type=Path, required=True, help="folder of mflux-<version>-py3-none-any.whl")
    parser.add_argument("--out", type=Path, default=TABLE, help="default: calib/drift/data/code.json")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = setup_arg_parser().parse_args(argv)
    wheels = {path.name.split("-")[1]: path for path in sorted(args.wheels.glob("mflux-*-py3-none-any.whl"))}
    if not wheels:
        raise InputError(f"--wheels: no mflux-<version>-py3-none-any.whl in {args.wheels}")
    from teacache.io import write_json

    table = build_table(wheels)
    write_json(args.out, table)
    print(f"wrote {args.out}: {len(table['functions'])} functions x {len(table['releases'])} releases")
    return 0
