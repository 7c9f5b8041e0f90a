"""One trace file read by its suffix (Parquet, CSV, JSON, JSONL, mlx-teacache calibrations ``PATH#SIGNAL``), and
the provenance.json the recorder writes beside it; :func:`calib.traces.reader.load_traces` checks what they hold."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pandas as pd

from calib.traces import mlx_teacache
from calib.traces.errors import TraceError

PROVENANCE_NAME = "provenance.json"
_FORMATS = {".csv": "csv", ".parquet": "parquet", ".pq": "parquet", ".json": "json", ".jsonl": "jsonl"}


def split_signal(path: str | os.PathLike) -> tuple[Path, str | None]:
    """``PATH#SIGNAL`` -> (PATH, SIGNAL) unless PATH#SIGNAL is itself a file."""
    text = str(path)
    if "#" in text and not _exists(Path(text)):
        base, signal = text.rsplit("#", 1)
        return Path(base), signal
    return Path(text), None


def _exists(path: Path) -> bool:
    """Path.exists, False for a name the system cannot hold (over 255 bytes), which names no file."""
    try:
        return path.exists()
    except OSError:
        return False


def read_table(path: str | os.PathLike) -> tuple[pd.DataFrame, dict | None]:
    """One trace table by suffix, and the provenance embedded in it (mlx-teacache calibrations carry theirs)."""
    p, signal = split_signal(path)
    kind = _FORMATS.get(p.suffix.lower())
    if kind is None:
        raise TraceError(
            f"TRACES: cannot tell the format of {p} from its suffix; expected one of {', '.join(_FORMATS)}"
        )
    if not p.is_file():
        raise TraceError(f"TRACES: {p} does not exist or is not a file")
    if signal is not None and kind != "json":
        raise TraceError(f"TRACES: {path}: '#{signal}' names a signal of an mlx-teacache calibration (.json) only")
    try:
        if kind == "csv":
            return pd.read_csv(p), None
        if kind == "parquet":
            return pd.read_parquet(p), None
        text = p.read_text(encoding="utf-8")
        if kind == "jsonl":
            records = [json.loads(line) for line in text.splitlines() if line.strip()]
        else:
            records = json.loads(text)
            if mlx_teacache.is_calibration(records):
                try:
                    return mlx_teacache.calibration_traces(records, signal, p.name)
                except ValueError as exc:
                    raise TraceError(f"TRACES: {p.name}: {exc}") from None
            if signal is not None:
                raise TraceError(f"TRACES: {path}: '#{signal}' given, but {p.name} is not an mlx-teacache calibration")
            if isinstance(records, dict):
                records = records.get("rows", records.get("records"))
        if not isinstance(records, list) or not all(isinstance(r, dict) for r in records):
            raise TraceError(f"TRACES: {p} is not a JSON list of records (objects with one field per column)")
        return pd.DataFrame.from_records(records), None
    except TraceError:
        raise
    except pd.errors.EmptyDataError:
        return pd.DataFrame(), None
    except Exception as exc:  # noqa: BLE001 - any reader failure is one clear message
        raise TraceError(f"TRACES: cannot read {p} as {kind}: {type(exc).__name__}: {exc}") from None


def read_provenance_beside(path: str | os.PathLike) -> dict | None:
    """``<stem>.provenance.json`` or ``provenance.json`` beside a table, as the recorder writes it.

    For the recorder's per-run parts (``<out>/runs/<run>.parquet``) the file one folder up is used.
    """
    p = split_signal(path)[0]
    candidates = [p.with_name(f"{p.stem}.provenance.json"), p.with_name(PROVENANCE_NAME)]
    if p.parent.name == "runs":
        candidates.append(p.parent.parent / PROVENANCE_NAME)
    for candidate in candidates:
        if candidate.is_file() and candidate != p:
            try:
                data = json.loads(candidate.read_text(encoding="utf-8"))
            except (OSError, ValueError) as exc:
                raise TraceError(f"TRACES: cannot read {candidate} (provenance beside {p.name}): {exc}") from None
            if not isinstance(data, dict):
                raise TraceError(f"TRACES: {candidate} is not a JSON object")
            return data
    return None
