"""``teacache-bench step-cost``'s raw records: its two tables, and the JSON files of the scripts before it.

A run folder holds ``generations.csv`` (one row per generation: mixed ones, whose steps alternate between
vanilla's and the arm's call in blocks, and whole ones, every step one side, with the allocator's readings per
phase) and ``steps.csv`` (one row per step of every generation: its seconds, and in whole runs the peak of its
evaluation). Both are declared here, written only by :func:`write_tables` and read only by :func:`read_folder`.

The summary reads any folder holding such records (:func:`read_sources`): this command's run folders, and the
JSON files that ``results/cuda-nvidia-h200/proxy-cost-flux1`` kept from the scripts before it (format 0: an
object with ``_meta`` and ``raw_mixed``, each generation's ``schedule`` and ``steps_s``, and ``whole`` runs; or
``_meta`` and ``runs`` of phase peaks per arm and round, round 0 the warm-up). Both become :class:`Generation`
records, so one summary serves both.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from bench.sweep.records import RecordError
from bench.sweep.schema import Column, Table
from teacache.io import write_text

PROG = "teacache-bench step-cost"
MIXED, WHOLE = "mixed", "whole"  # a generation's kind
REFERENCE, ARM = "reference", "arm"  # a whole run's role: vanilla of its repeat, or the arm under test

_WHO = (Column("kind", "str"), Column("arm", "str"), Column("role", "str"), Column("index", "int"))
GENERATIONS = Table(
    "generations.csv",
    _WHO
    + (
        Column("position", "int"),  # in its round's interleaved order
        Column("schedule", "str"),  # per step: v (vanilla's call) or p (the arm's)
        Column("block", "int"),
        Column("loop_s", "float"),
        Column("total_s", "float"),
        Column("exact", "bool"),  # final latents equal to the reference vanilla run's
        Column("max_abs", "float"),
        Column("cache_bytes", "int"),  # what the arm's cache holds at the end of the generation
        Column("reasons", "str"),  # JSON: how many of the arm's decisions had each reason
        Column("base_bytes", "int"),  # whole runs: active memory at the start; the peaks below are absolute
        Column("before_loop_peak_bytes", "int"),
        Column("loop_peak_bytes", "int"),
        Column("decode_peak_bytes", "int"),
        Column("held_after_loop_bytes", "int"),
    ),
)
STEPS = Table("steps.csv", _WHO + (Column("step", "int"), Column("seconds", "float"), Column("peak_bytes", "int")))
TABLES = (GENERATIONS, STEPS)


@dataclass(frozen=True)
class Phases:
    """A whole run's memory above what was in use when it started, in bytes."""

    loop_peak: int  # the highest step evaluation
    decode_peak: int
    held_after_loop: int
    cache: int


@dataclass(frozen=True)
class Generation:
    """One generation of a record, whatever wrote it."""

    kind: str  # MIXED or WHOLE
    arm: str
    role: str  # ARM, or REFERENCE (whole runs: the vanilla run of the same repeat)
    index: int  # the arm's generation number (mixed) or the repeat (whole), from 0
    schedule: str = ""
    block: int = 0
    seconds: tuple[float, ...] = ()
    loop_s: float | None = None
    max_abs: float | None = None
    peak_gib: float | None = None  # the whole generation's allocator peak (absolute)
    phases: Phases | None = None


@dataclass(frozen=True)
class Source:
    """One record: a run folder of this command, or one file of the earlier scripts."""

    name: str  # its path under the summarized folder
    group: str  # the folder it sits in: records of one group and arm are also pooled
    generations: tuple[Generation, ...]
    meta: dict


# ----------------------------------------------------------------------------------------------- this command


def _frame(table: Table, rows: list[dict]) -> pd.DataFrame:
    frame = pd.DataFrame(rows)
    unknown = [c for c in frame.columns if c not in table.names]
    if unknown:
        raise RecordError(f"{table.file}: the writer got undeclared columns {', '.join(map(str, unknown))}")
    frame = frame.reindex(columns=list(table.names))
    for column in table.columns:  # whole numbers stay whole where a column has empty cells
        if column.dtype == "int":
            frame[column.name] = frame[column.name].astype("Int64")
    return frame


def write_tables(out: Path, generations: list[dict], steps: list[dict]) -> None:
    """Both tables, atomically each, at full precision."""
    for table, rows in ((GENERATIONS, generations), (STEPS, steps)):
        write_text(out / table.file, _frame(table, rows).to_csv(index=False))


def read_table(path: Path, table: Table) -> pd.DataFrame:
    """A table this command wrote, every declared column present; RecordError naming the file otherwise."""
    if not path.is_file():
        return pd.DataFrame(columns=list(table.names))
    try:
        frame = pd.read_csv(path, keep_default_na=False, na_values=[""], dtype={"schedule": str, "reasons": str})
    except (ValueError, UnicodeDecodeError) as exc:
        raise RecordError(f"{path} is not a readable CSV file ({exc})") from None
    missing = [c for c in table.names if c not in frame.columns]
    if missing:
        raise RecordError(f"{path}: no column {missing[0]!r}; expected {PROG}'s {table.file}")
    return frame


def read_rows(out: Path) -> tuple[list[dict], list[dict]]:
    """The rows of both tables as written (empty lists for a new folder)."""
    frames = [read_table(out / table.file, table) for table in TABLES]
    return [[_plain(row) for row in frame.to_dict("records")] for frame in frames]


def _plain(row: dict) -> dict:
    return {k: None if isinstance(v, float) and math.isnan(v) else v for k, v in row.items()}


def _int(value) -> int | None:
    return None if value is None or (isinstance(value, float) and math.isnan(value)) else int(value)


def generations_of(generations: list[dict], steps: list[dict]) -> tuple[Generation, ...]:
    """The :class:`Generation` records of a run folder's rows."""
    seconds: dict[tuple, list] = {}
    peaks: dict[tuple, list] = {}
    for row in sorted(steps, key=lambda r: r["step"]):
        key = (row["kind"], row["arm"], row["role"], int(row["index"]))
        seconds.setdefault(key, []).append(float(row["seconds"]))
        peaks.setdefault(key, []).append(_int(row["peak_bytes"]))
    found = []
    for row in generations:
        key = (row["kind"], row["arm"], row["role"], int(row["index"]))
        phases = peak_gib = None
        if _int(row["base_bytes"]) is not None:
            base, cache = int(row["base_bytes"]), int(row["cache_bytes"] or 0)
            phases = Phases(int(row["loop_peak_bytes"]) - base, int(row["decode_peak_bytes"]) - base,
                            int(row["held_after_loop_bytes"]) - base, cache)  # fmt: skip
            top = max(int(row[k]) for k in ("before_loop_peak_bytes", "loop_peak_bytes", "decode_peak_bytes"))
            peak_gib = top / 2**30
        found.append(Generation(
            kind=row["kind"], arm=row["arm"], role=row["role"], index=int(row["index"]),
            schedule=row["schedule"] or "", block=_int(row["block"]) or 0, seconds=tuple(seconds.get(key, ())),
            loop_s=row["loop_s"], max_abs=row["max_abs"], peak_gib=peak_gib, phases=phases,
        ))  # fmt: skip
    return tuple(found)


def read_folder(folder: Path) -> tuple[Generation, ...]:
    return generations_of(*read_rows(folder))


# ----------------------------------------------------------------------------------- the earlier scripts' files


def _legacy_mixed(data: dict) -> list[Generation]:
    """measure3.py / measure4.py: mixed generations (arm ``forced`` where the file names none: measure3's
    proxy had every decision forced) and their whole runs, each against the vanilla run of its repeat."""
    meta = data["_meta"]
    arm = meta.get("arm", "forced")
    found = [
        Generation(MIXED, arm, ARM, g, schedule=r["schedule"], block=int(meta["block"]),
                   seconds=tuple(r["steps_s"]), max_abs=r.get("max_abs_vs_vanilla"))
        for g, r in enumerate(data["raw_mixed"])
    ]  # fmt: skip
    for name, runs in (data.get("whole") or {}).items():
        role = REFERENCE if name == "vanilla" else ARM
        label = "vanilla" if role == REFERENCE else arm
        for r, (loop, peak, max_abs) in enumerate(zip(runs["loop_s"], runs["peak_gib"], runs["max_abs_vs_vanilla"],
                                                      strict=True)):  # fmt: skip
            found.append(Generation(WHOLE, label, role, r, loop_s=loop, max_abs=max_abs, peak_gib=peak))
    return found


def _legacy_peaks(data: dict) -> list[Generation]:
    """peaks.py: whole runs per arm and round with peaks above the run's base; round 0 (the warm-up) left out.
    Arm ``v`` is vanilla; the others keep their names."""
    found = []
    for name, runs in data["runs"].items():
        role = REFERENCE if name == "v" else ARM
        for r in runs:
            if r["round"] == 0:
                continue
            phases = Phases(max(r["step_peaks"]), r["decode_peak"], r["active_between"][-1], r["cache_bytes"])
            found.append(Generation(WHOLE, "vanilla" if role == REFERENCE else name, role, r["round"] - 1,
                                    loop_s=r["loop_s"], max_abs=r["max_abs_vs_vanilla"], phases=phases))  # fmt: skip
    return found


def legacy_kind(data: object) -> str | None:
    """Which of the earlier scripts' records a JSON value is: "mixed", "peaks" or None (neither)."""
    if not isinstance(data, dict) or not isinstance(data.get("_meta"), dict):
        return None
    if isinstance(data.get("raw_mixed"), list):
        return "mixed"
    runs = data.get("runs")
    if isinstance(runs, dict) and all(isinstance(v, list) and all("step_peaks" in r for r in v) for v in runs.values()):
        return "peaks"
    return None


# ------------------------------------------------------------------------------------------------ any folder


def _owned_by(folder: Path) -> str | None:
    """The command that wrote ``folder`` (its fingerprint.json says), None where none did."""
    try:
        data = json.loads((folder / "fingerprint.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data.get("command") if isinstance(data, dict) else None


MAX_DEPTH = 1  # folders below the summarized one that are searched: a folder of run folders, or of sessions


def read_sources(root: Path) -> tuple[list[Source], list[tuple[str, str]]]:
    """Every record in ``root`` and its subfolders (``root`` itself may be one run folder), in path order; and the
    JSON files and folders there that hold none, each with why."""
    sources: list[Source] = []
    skipped: list[tuple[str, str]] = []
    _walk(root, root, sources, skipped, 0)
    return sources, skipped


def _walk(root: Path, folder: Path, sources: list[Source], skipped: list[tuple[str, str]], depth: int) -> None:
    relative = root.name if folder == root else folder.relative_to(root).as_posix()
    owner = _owned_by(folder)
    if owner == PROG:
        group = "." if folder == root else folder.parent.relative_to(root).as_posix()
        meta = json.loads((folder / "fingerprint.json").read_text(encoding="utf-8")).get("settings", {})
        sources.append(Source(relative, group, read_folder(folder), meta))
        return
    if owner is not None:
        skipped.append((relative, f"a folder of {owner}"))
        return
    for path in sorted(folder.iterdir()):
        if path.is_dir() and not path.name.startswith(".") and depth < MAX_DEPTH:
            _walk(root, path, sources, skipped, depth + 1)
        elif path.suffix == ".json":
            _read_json(root, path, sources, skipped)


def _read_json(root: Path, path: Path, sources: list[Source], skipped: list[tuple[str, str]]) -> None:
    name = path.relative_to(root).as_posix()
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        skipped.append((name, f"not readable JSON ({exc})"))
        return
    kind = legacy_kind(data)
    if kind is None:
        skipped.append((name, "no raw step times and no phase peaks"))
        return
    generations = _legacy_mixed(data) if kind == "mixed" else _legacy_peaks(data)
    group = path.parent.relative_to(root).as_posix()
    sources.append(Source(name, group, tuple(generations), dict(data["_meta"])))
