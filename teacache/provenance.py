"""Where a measurement came from: recorded with every trace, fit, sweep, report and constant."""

from __future__ import annotations

import datetime as _dt
import os
import platform
import shlex
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import mlx.core as mx

from teacache.io import FORMAT_VERSION, project_root

DISTRIBUTION = "teacache-lab"  # the name on the package index (mflux-teacache belongs to another project)

_PROJECT_ROOT = project_root()


def installed_version(dist: str) -> str | None:
    """The installed version of a distribution, or None where it is not installed."""
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


CHANGED_SHOWN = 20  # the uncommitted paths a provenance block names (n_changed counts them all)
# Measured data, not code: a run writes here (a campaign's sweep finds its own record and fit uncommitted), and a
# run that reads data names it by its own fingerprint, so changes under these folders leave the code clean.
DATA_FOLDERS = ("results/",)
NO_CHECKOUT = {"commit": None, "dirty": None, "changed": None}


def git_commit() -> dict:
    """Commit of this project and what was uncommitted in its work tree (tracked files outside ``DATA_FOLDERS``),
    so a reader sees whether the change could matter; nulls where the sources are not the root of a checkout
    (copied into a folder of another one, or installed)."""

    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=_PROJECT_ROOT, capture_output=True, text=True, check=True).stdout

    try:
        if Path(git("rev-parse", "--show-toplevel").strip()).resolve() != _PROJECT_ROOT.resolve():
            return dict(NO_CHECKOUT)
        head = git("rev-parse", "HEAD").strip()
        status = git("status", "--porcelain", "--untracked-files=no").splitlines()
    except (OSError, subprocess.CalledProcessError):
        return dict(NO_CHECKOUT)
    changed = [path for path in (line[3:] for line in status if line.strip()) if not path.startswith(DATA_FOLDERS)]
    return {"commit": head, "dirty": bool(changed), "changed": changed[:CHANGED_SHOWN], "n_changed": len(changed)}


def describe_git(git: dict | None) -> str:
    """A provenance block's git state in words: the commit, and what was uncommitted only when something was."""
    git = git or {}
    commit = git.get("commit")
    if not commit:  # a record from before "changed" was recorded says None, as it always did
        return "unknown (not run from a git checkout of this project)" if "changed" in git else "None"
    if not git.get("dirty"):
        return commit
    if "changed" not in git:  # recorded before the changes were: said as it always was
        return f"{commit} (dirty work tree)"
    shown, count = list(git["changed"]), int(git.get("n_changed", len(git["changed"])))
    more = f", and {count - len(shown)} more" if count > len(shown) else ""
    return (
        f"{commit} (uncommitted changes to {count} tracked file{'s' if count != 1 else ''}: {', '.join(shown)}{more})"
    )


def device_info() -> dict:
    """MLX backend and a human name for the device (Apple chip, GPU or CPU model)."""
    backend = "cpu"
    if mx.metal.is_available():
        backend = "metal"
    elif hasattr(mx, "cuda") and mx.cuda.is_available():
        backend = "cuda"
    name = None
    try:
        info = mx.device_info() if backend != "cpu" else {}
        name = info.get("device_name") or info.get("architecture")
    except Exception:  # noqa: BLE001 - best effort, older MLX builds lack device_info
        name = None
    if name is None:
        name = _cpu_name()

    return {"backend": backend, "device": str(mx.default_device()), "device_name": name, "cpu_count": os.cpu_count()}


def _cpu_name() -> str:
    if sys.platform == "darwin":
        try:
            return subprocess.run(
                ["sysctl", "-n", "machdep.cpu.brand_string"], capture_output=True, text=True, check=True
            ).stdout.strip()
        except (OSError, subprocess.CalledProcessError):
            pass
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def hardware_slug(info: dict | None = None) -> str:
    """A folder name for results/<hardware>/: backend plus a short device name."""
    info = info or device_info()
    name = "".join(c if c.isalnum() else "-" for c in str(info["device_name"]).lower())
    name = "-".join(part for part in name.split("-") if part and part not in ("r", "tm", "cpu", "processor"))

    cores = info.get("cpu_count") or os.cpu_count() or 0
    suffix = f"-{cores}c" if info["backend"] == "cpu" else ""
    return f"{info['backend']}-{name[:40]}{suffix}"


def tolerance_module_name(slug: str) -> str:
    """The Python module name of a hardware's generated tolerances (tests/tolerances/<name>.py)."""
    return slug.replace("-", "_").replace(".", "_")


SCRIPTS = {"bench": "teacache-bench", "calib": "teacache-calib"}


def _console_argv(argv: list[str]) -> list[str]:
    """The command as a user types it: ``python -m bench.cli`` (mlx.launch runs that) and the console script's
    full path both read ``teacache-bench``."""
    if not argv:
        return list(argv)
    first = Path(argv[0])
    if first.name == "cli.py" and first.parent.name in SCRIPTS:
        return [SCRIPTS[first.parent.name], *argv[1:]]
    if first.name in (*SCRIPTS.values(), "teacache-demo"):
        return [first.name, *argv[1:]]
    return list(argv)


def collect(argv: list[str] | None = None, **fields) -> dict:
    """The provenance block of DESIGN.md, plus whatever the caller adds (model, steps, prompts...)."""
    return {
        "format_version": FORMAT_VERSION,
        "date_utc": _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "command": shlex.join(_console_argv(sys.argv if argv is None else argv)),
        "git": git_commit(),
        "versions": {
            "mlx": mx.__version__,
            "mflux": installed_version("mflux"),
            "numpy": installed_version("numpy"),
            "python": platform.python_version(),
            "teacache": installed_version(DISTRIBUTION),
        },
        **device_info(),
        "os": f"{platform.system()} {platform.release()} {platform.machine()}",
        **fields,
    }


AUTHOR_FIELDS = ("command", "date_utc", "git", "versions")


def _author(provenance: dict) -> dict:
    return {key: provenance.get(key) for key in AUTHOR_FIELDS}


def authorship(previous: dict | None, current: dict, added: int, total: int) -> dict:
    """``recorded_by`` (the run that recorded the first rows) and ``resumed_by`` (every later run that added
    rows, in order), separately: a resumed folder's provenance names today's command at its top, but its rows
    were recorded by others, maybe at another commit. ``previous`` is the folder's provenance.json before this
    run (None for a new folder); ``added`` of ``total`` units (runs, pairs) are this run's."""
    if previous is None:
        first = {**_author(current), "units": added, "of": total}
        if added < total:  # an earlier, interrupted run recorded the others and wrote no provenance
            first["note"] = f"{total - added} units were recorded by an earlier run that did not finish"
        return {"recorded_by": first, "resumed_by": []}
    first = previous.get("recorded_by") or {**_author(previous), "units": None, "note": "as its provenance said"}
    later = list(previous.get("resumed_by") or [])
    if added:
        later.append({**_author(current), "units": added, "of": total})
    return {"recorded_by": first, "resumed_by": later}


def read_previous(path: Path) -> dict | None:
    """A folder's provenance.json before this run rewrites it (None when missing or unreadable)."""
    import json

    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None
