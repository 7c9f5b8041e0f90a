"""Read and validate trace tables (CSV, Parquet or JSON records) for ``teacache-calib fit``.

A bad table stops the fit with one message that names the file, the column and what was expected,
before anything is computed or written. Pure pandas/numpy: no MLX, no mflux.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

REQUIRED_COLUMNS = ("prompt_id", "step", "x_rel_l1", "y_rel_l1")
OPTIONAL_COLUMNS = ("num_steps", "sigma", "seed", "branch", "variant", "run_id")
DEFAULT_BRANCH = "cond"
PROVENANCE_NAME = "provenance.json"
_FORMATS = {".csv": "csv", ".parquet": "parquet", ".pq": "parquet", ".json": "json", ".jsonl": "jsonl"}


class TraceError(ValueError):
    """Unusable trace input; the message says which argument or column and what was expected."""


@dataclass
class Traces:
    """Validated calibration rows plus what is known about where they came from."""

    frame: pd.DataFrame  # one row per (run, step) pair with finite x and y, sorted by run and step
    files: list[dict]  # per input: path, name, sha256, rows, provenance (or None)
    variants: list[str]  # variants named by the tables and provenance files
    branch: str | None  # branch kept (None: the tables have no branch column)
    dropped_first_steps: int  # rows with no previous step (NaN x/y on a run's first step)
    warnings: list[str] = field(default_factory=list)

    @property
    def columns(self) -> list[str]:
        return list(self.frame.columns)

    @property
    def n_prompts(self) -> int:
        return int(self.frame["prompt_id"].nunique())

    @property
    def provenance(self) -> dict | None:
        """The first provenance.json found beside an input (they describe one recording)."""
        for info in self.files:
            if info.get("provenance"):
                return info["provenance"]
        return None


def file_sha256(path: str | os.PathLike) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def read_table(path: str | os.PathLike) -> pd.DataFrame:
    """One trace table, by suffix: .csv, .parquet/.pq, .json (a list of records) or .jsonl."""
    p = Path(path)
    kind = _FORMATS.get(p.suffix.lower())
    if kind is None:
        raise TraceError(
            f"TRACES: cannot tell the format of {p} from its suffix; expected one of {', '.join(_FORMATS)}"
        )
    if not p.is_file():
        raise TraceError(f"TRACES: {p} does not exist or is not a file")
    try:
        if kind == "csv":
            return pd.read_csv(p)
        if kind == "parquet":
            return pd.read_parquet(p)
        text = p.read_text(encoding="utf-8")
        if kind == "jsonl":
            records = [json.loads(line) for line in text.splitlines() if line.strip()]
        else:
            records = json.loads(text)
            if isinstance(records, dict):
                records = records.get("rows", records.get("records"))
        if not isinstance(records, list) or not all(isinstance(r, dict) for r in records):
            raise TraceError(f"TRACES: {p} is not a JSON list of records (objects with one field per column)")
        return pd.DataFrame.from_records(records)
    except TraceError:
        raise
    except pd.errors.EmptyDataError:
        return pd.DataFrame()
    except Exception as exc:  # noqa: BLE001 - any reader failure is one clear message
        raise TraceError(f"TRACES: cannot read {p} as {kind}: {type(exc).__name__}: {exc}") from None


def read_provenance_beside(path: str | os.PathLike) -> dict | None:
    """``<stem>.provenance.json`` or ``provenance.json`` beside a table, as the recorder writes it.

    For the recorder's per-run parts (``<out>/runs/<run>.parquet``) the file one folder up is used.
    """
    p = Path(path)
    candidates = [p.with_name(f"{p.stem}.provenance.json"), p.with_name(PROVENANCE_NAME)]
    if p.parent.name == "runs":
        candidates.append(p.parent.parent / PROVENANCE_NAME)
    for candidate in candidates:
        if candidate.is_file():
            try:
                data = json.loads(candidate.read_text(encoding="utf-8"))
            except (OSError, ValueError) as exc:
                raise TraceError(f"TRACES: cannot read {candidate} (provenance beside {p.name}): {exc}") from None
            if not isinstance(data, dict):
                raise TraceError(f"TRACES: {candidate} is not a JSON object")
            return data
    return None


def _describe(frame: pd.DataFrame, mask, limit: int = 5) -> str:
    rows = frame.loc[mask, ["prompt_id", "step"]].head(limit)
    shown = ", ".join(f"prompt_id={r.prompt_id} step={r.step}" for r in rows.itertuples())
    more = int(np.count_nonzero(mask)) - len(rows)
    return shown + (f", ... ({more} more)" if more > 0 else "")


def _numeric(frame: pd.DataFrame, column: str, source: str) -> pd.Series:
    values = pd.to_numeric(frame[column], errors="coerce")
    bad = values.isna() & frame[column].notna()
    if bad.any():
        sample = ", ".join(repr(v) for v in frame.loc[bad, column].head(3))
        raise TraceError(f"column {column!r} in {source}: expected numbers, found {sample}")
    return values.astype(float)


def _integers(frame: pd.DataFrame, column: str, source: str) -> pd.Series:
    values = _numeric(frame, column, source)
    if values.isna().any() or not np.all(np.isfinite(values)) or not np.all(values == np.round(values)):
        raise TraceError(f"column {column!r} in {source}: expected whole numbers on every row")
    return values.astype(np.int64)


def run_key_columns(frame: pd.DataFrame) -> list[str]:
    """Columns that identify one generation: run_id when present, else prompt_id (+seed), plus branch."""
    cols = ["run_id"] if "run_id" in frame.columns else ["prompt_id"] + (["seed"] if "seed" in frame else [])
    if "variant" in frame.columns and "run_id" not in frame.columns:
        cols.append("variant")
    if "branch" in frame.columns:
        cols.append("branch")
    return cols


def load_traces(paths: list[str | os.PathLike], branch: str | None = None, variant: str | None = None) -> Traces:
    """Read, concatenate and validate trace tables; raise TraceError on anything unusable.

    Rows with NaN x or y on the first step of a run (no previous step) are dropped; any other
    non-finite x or y is an error, because it means the recording went wrong.
    """
    if not paths:
        raise TraceError("TRACES: expected at least one trace table")
    frames, files = [], []
    for path in paths:
        frame = read_table(path)
        name = Path(path).name
        missing = [c for c in REQUIRED_COLUMNS if c not in frame.columns]
        if len(frame.columns) and missing:
            raise TraceError(
                f"TRACES: {name} lacks column(s) {', '.join(missing)} "
                f"(required: {', '.join(REQUIRED_COLUMNS)}); "
                f"columns found: {', '.join(map(str, frame.columns)) or '(none)'}"
            )
        files.append(
            {
                "path": str(path),
                "name": name,
                "sha256": file_sha256(path),
                "rows": len(frame),
                "provenance": read_provenance_beside(path),
            }
        )
        if len(frame):
            frames.append(frame.assign(_source=name))
    if not frames:
        raise TraceError(f"TRACES: empty input: no rows in {', '.join(f['name'] for f in files)}")
    data = pd.concat(frames, ignore_index=True, sort=False)
    source = ", ".join(f["name"] for f in files)
    warnings: list[str] = []

    if data["prompt_id"].isna().any():
        raise TraceError(f"column 'prompt_id' in {source}: {int(data['prompt_id'].isna().sum())} empty value(s)")
    data["prompt_id"] = data["prompt_id"].astype(str)
    data["step"] = _integers(data, "step", source)
    data["x_rel_l1"] = _numeric(data, "x_rel_l1", source)
    data["y_rel_l1"] = _numeric(data, "y_rel_l1", source)
    if "num_steps" in data.columns:
        data["num_steps"] = _integers(data, "num_steps", source)
    if "sigma" in data.columns:
        data["sigma"] = _numeric(data, "sigma", source)
    for col in ("branch", "variant", "run_id"):
        if col in data.columns:
            data[col] = data[col].astype(str)

    table_variants = sorted(data["variant"].unique()) if "variant" in data.columns else []
    prov_variants = sorted({str(f["provenance"]["variant"]) for f in files if (f["provenance"] or {}).get("variant")})
    if variant is not None:
        found = table_variants or prov_variants
        if found and variant not in found:
            where = "variant column" if table_variants else "provenance.json"
            raise TraceError(f"--variant {variant!r} disagrees with the traces: their {where} says {', '.join(found)}")
        if len(table_variants) > 1:
            warnings.append(f"kept variant {variant!r} only; the tables also hold {', '.join(table_variants)}")
            data = data[data["variant"] == variant]
        variants = [variant]
    elif len(table_variants) > 1:
        raise TraceError(
            f"column 'variant': the tables hold several variants ({', '.join(table_variants)}); "
            "choose one with --variant"
        )
    else:
        variants = table_variants or prov_variants

    kept_branch = None
    if "branch" in data.columns:
        kept_branch = branch or DEFAULT_BRANCH
        found = sorted(data["branch"].unique())
        data = data[data["branch"] == kept_branch]
        if data.empty:
            raise TraceError(f"--branch {kept_branch!r}: no rows with that branch; branches found: {', '.join(found)}")
    elif branch is not None:
        raise TraceError(
            f"--branch {branch!r}: the tables have no 'branch' column; columns found: {', '.join(_cols(data))}"
        )

    key = run_key_columns(data)
    first_step = data.groupby(key, sort=False, dropna=False)["step"].transform("min")
    expected_nan = (data["step"] == first_step) & (data["x_rel_l1"].isna() | data["y_rel_l1"].isna())
    data = data[~expected_nan]
    dropped = int(expected_nan.sum())
    if data.empty:
        raise TraceError(f"TRACES: empty input: no rows with finite x_rel_l1 and y_rel_l1 in {source}")

    bad = ~(np.isfinite(data["x_rel_l1"]) & np.isfinite(data["y_rel_l1"]))
    if bad.any():
        raise TraceError(
            f"columns x_rel_l1/y_rel_l1: {int(bad.sum())} row(s) with NaN or inf "
            "besides the first step of a run "
            f"(expected finite numbers): {_describe(data, bad)}"
        )
    negative = (data["x_rel_l1"] < 0) | (data["y_rel_l1"] < 0)
    if negative.any():
        raise TraceError(
            f"columns x_rel_l1/y_rel_l1: {int(negative.sum())} negative value(s) "
            "(a relative L1 change is >= 0): "
            f"{_describe(data, negative)}"
        )
    dup = data.duplicated(subset=[*key, "step"], keep=False)
    if dup.any():
        raise TraceError(
            f"duplicate (run, step) keys: {int(dup.sum())} rows share a step within one run "
            f"(run key: {'+'.join(key)}; the same table passed twice, or repeated prompts without a run_id or "
            f"seed column?): {_describe(data, dup)}"
        )
    zeros = int((data["x_rel_l1"] == 0).sum())
    if zeros:
        warnings.append(f"x_rel_l1 is exactly 0 on {zeros} row(s) (a step identical to the previous one?)")
    if "sigma" in data.columns and not np.all(np.isfinite(data["sigma"])):
        warnings.append("column 'sigma' has missing or non-finite values: poly+sigma candidates are left out")
        data = data.drop(columns="sigma")

    data = data.sort_values([*key, "step"], kind="stable").reset_index(drop=True)
    return Traces(
        frame=data,
        files=files,
        variants=variants,
        branch=kept_branch,
        dropped_first_steps=dropped,
        warnings=warnings,
    )


def _cols(frame: pd.DataFrame) -> list[str]:
    return [str(c) for c in frame.columns if not str(c).startswith("_")]


def step_fraction(frame: pd.DataFrame) -> np.ndarray:
    """step / (num_steps - 1), exactly as :meth:`teacache.rescale.RescaleFunction.time_input` computes it."""
    steps = frame["step"].to_numpy(dtype=float)
    denom = np.maximum(frame["num_steps"].to_numpy(dtype=float) - 1.0, 1.0)
    return steps / denom


def finite_or_none(value: float) -> float | None:
    """JSON has no infinity: an unbounded end of a range is stored as null."""
    return float(value) if math.isfinite(value) else None
