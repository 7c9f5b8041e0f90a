"""The one reader of trace tables: ``teacache-calib fit``, ``teacache-bench replay``, ``sweep --traces`` and
``compare-hardware`` all read traces through :func:`load_traces`, so they accept the same inputs and refuse
the same bad ones.

Inputs: Parquet, CSV, JSON (a list of records, or ``{"rows": [...]}``), JSONL, and mlx-teacache calibration
files (``_calibration_<variant>.json``; a file with several signals is named ``PATH#SIGNAL``). A run is
identified by ``run_id``, else by ``prompt_id`` (+ ``seed`` when present); rows are placed by their
``step`` column. ``num_steps`` comes from the table, else from ``--num-steps``, else is inferred per run as
max(step) + 1, and the source is kept (:attr:`Traces.num_steps_source`) so it reaches the provenance.

A bad table stops the command with one message that names the file, the column and what was expected,
before anything is computed or written. Pure pandas/numpy: no MLX, no mflux.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from calib.run.prompts import pair_id
from calib.traces import mlx_teacache
from teacache.io import file_sha256  # noqa: F401  (re-exported: the traces tables and formats import it from here)

REQUIRED_COLUMNS = ("prompt_id", "step", "x_rel_l1", "y_rel_l1")  # a fit needs all four
REPLAY_COLUMNS = ("prompt_id", "step", "x_rel_l1")  # a replay needs the signal only
OPTIONAL_COLUMNS = ("num_steps", "sigma", "seed", "branch", "variant", "run_id")
DEFAULT_BRANCH = "cond"
PROVENANCE_NAME = "provenance.json"
NUM_STEPS_TABLE = "table"
NUM_STEPS_ARGUMENT = "--num-steps"  # the default name of the argument that gives num_steps
NUM_STEPS_INFERRED = "inferred"
# The largest rel-L1 change a row may hold. A step's change is mean|a - b| / mean|b|: every committed table
# stays under 0.5. 1e6, an output a million times its own size in one step, is a broken recording; and a fit of
# degree 4 raises x to the 4th and 8th powers (its normal equations), so values far above it overflow float64
# or drown every other row in rounding (LAPACK's "SVD did not converge"), without naming the row.
MAX_REL_L1 = 1e6
_FORMATS = {".csv": "csv", ".parquet": "parquet", ".pq": "parquet", ".json": "json", ".jsonl": "jsonl"}


class TraceError(ValueError):
    """Unusable trace input; the message says which argument or column and what was expected."""


@dataclass(frozen=True)
class RunTrace:
    """One generation's signal, placed by step: ``x[s]`` is the signal at step s (None where not recorded)."""

    run_id: str
    prompt_id: str
    seed: int | None
    num_steps: int
    x: list[float | None]
    sigma: list[float] | None  # NaN where not recorded; None without a sigma column


@dataclass
class Traces:
    """Validated calibration rows plus what is known about where they came from."""

    frame: pd.DataFrame  # one row per (run, step) pair with finite x (and y), sorted by run and step
    files: list[dict]  # per input: path, name, sha256, rows, provenance (or None)
    variants: list[str]  # variants named by the tables and provenance files
    branch: str | None  # branch kept (None: the tables have no branch column)
    dropped_first_steps: int  # rows with no previous step (NaN x/y on a run's first step)
    warnings: list[str] = field(default_factory=list)
    num_steps_source: str = NUM_STEPS_TABLE  # table, the argument's name, inferred, or several joined by '+'
    notes: list[str] = field(default_factory=list)  # what was inferred, to print

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

    @property
    def num_steps(self) -> dict:
        """Where num_steps came from and the values it took, for provenance files."""
        values = sorted(int(n) for n in self.frame["num_steps"].unique())
        return {"source": self.num_steps_source, "values": values}

    def runs(self) -> list[RunTrace]:
        """Each run's signal placed by its step column (a trace starting at step 1 keeps step 1 at index 1)."""
        frame = self.frame
        key = run_key_columns(frame)
        has_sigma = "sigma" in frame.columns
        out = []
        for _, group in frame.groupby(key, sort=False):
            n = int(group["num_steps"].iloc[0])
            steps = group["step"].to_numpy()
            x: list[float | None] = [None] * n
            for s, v in zip(steps, group["x_rel_l1"].to_numpy(dtype=float), strict=True):
                x[int(s)] = float(v)
            sigma = None
            if has_sigma:
                sigma = [float("nan")] * n
                for s, v in zip(steps, group["sigma"].to_numpy(dtype=float), strict=True):
                    sigma[int(s)] = float(v)
            first = group.iloc[0]
            seed = _seed(first["seed"]) if "seed" in frame.columns else None
            out.append(RunTrace(run_label(first, frame.columns, seed), str(first["prompt_id"]), seed, n, x, sigma))
        return out


def run_label(row, columns, seed: int | None) -> str:
    """run_id when the table has one, else the recorder's convention: prompt_id-s<seed> (or prompt_id)."""
    if "run_id" in columns:
        return str(row["run_id"])
    if "seed" in columns:
        return pair_id(row["prompt_id"], seed if seed is not None else row["seed"])
    return str(row["prompt_id"])


def _seed(value) -> int | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return int(number) if np.isfinite(number) and number == round(number) else None


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


def load_traces(
    paths: list[str | os.PathLike],
    branch: str | None = None,
    variant: str | None = None,
    *,
    num_steps: int | None = None,
    require: tuple[str, ...] = REQUIRED_COLUMNS,
    every_step: bool = False,
    num_steps_arg: str = NUM_STEPS_ARGUMENT,
) -> Traces:
    """Read, concatenate and validate trace tables; raise TraceError on anything unusable.

    ``require``: the columns the command needs (a fit needs y, a replay does not); every column present
    is validated either way. ``num_steps``: the schedule length of runs without a num_steps column, given by
    the argument ``num_steps_arg`` (it must agree with the table where both exist). ``every_step``: each run must
    have a row for every step from 1 to num_steps - 1 (a replay places the gate at every step).
    Rows with NaN x or y on the first step of a run (no previous step) are dropped; any other
    non-finite x or y is an error, because it means the recording went wrong.
    """
    if not paths:
        raise TraceError("TRACES: expected at least one trace table")
    if num_steps is not None and (isinstance(num_steps, bool) or not isinstance(num_steps, int) or num_steps < 2):
        raise TraceError(f"{num_steps_arg}: expected an integer >= 2, got {num_steps!r}")
    frames, files = _read_files(paths, require)
    data = pd.concat(frames, ignore_index=True, sort=False)
    source = ", ".join(f["name"] for f in files)
    warnings: list[str] = []
    data = _typed(data, source)
    data, variants = _keep_variant(data, files, variant, warnings)
    data, kept_branch = _keep_branch(data, branch)
    key = run_key_columns(data)
    data, num_steps_source, notes = _resolve_num_steps(data, key, num_steps, num_steps_arg, source)
    data, dropped = _checked_signal(data, key, source, warnings)
    data = data.sort_values([*key, "step"], kind="stable").reset_index(drop=True)
    if every_step:
        _check_every_step(data, key)
    return Traces(
        frame=data,
        files=files,
        variants=variants,
        branch=kept_branch,
        dropped_first_steps=dropped,
        warnings=warnings,
        num_steps_source=num_steps_source,
        notes=notes,
    )


def _read_files(paths, require: tuple[str, ...]) -> tuple[list[pd.DataFrame], list[dict]]:
    """Each table with the columns ``require`` names (its rows tagged with its file name), and what the
    provenance keeps of each file: path, SHA-256, rows, the provenance it carries or has beside it."""
    frames, files = [], []
    for path in paths:
        frame, embedded = read_table(path)
        name = Path(str(path)).name
        missing = [c for c in require if c not in frame.columns]
        if len(frame.columns) and missing:
            raise TraceError(
                f"TRACES: {name} lacks column(s) {', '.join(missing)} "
                f"(required: {', '.join(require)}); "
                f"columns found: {', '.join(map(str, frame.columns)) or '(none)'}"
            )
        real = split_signal(path)[0]
        files.append(
            {
                "path": str(path),
                "name": name,
                "sha256": file_sha256(real),
                "rows": len(frame),
                "provenance": embedded if embedded is not None else read_provenance_beside(path),
            }
        )
        if len(frame):
            frames.append(frame.assign(_source=name))
    if not frames:
        raise TraceError(f"TRACES: empty input: no rows in {', '.join(f['name'] for f in files)}")
    return frames, files


def _typed(data: pd.DataFrame, source: str) -> pd.DataFrame:
    """Every known column in its type: ids and labels as text, steps as integers >= 0, signals as numbers."""
    if data["prompt_id"].isna().any():
        raise TraceError(f"column 'prompt_id' in {source}: {int(data['prompt_id'].isna().sum())} empty value(s)")
    data["prompt_id"] = data["prompt_id"].astype(str)
    data["step"] = _integers(data, "step", source)
    if (data["step"] < 0).any():
        raise TraceError(f"column 'step' in {source}: expected steps >= 0: {_describe(data, data['step'] < 0)}")
    data["x_rel_l1"] = _numeric(data, "x_rel_l1", source)
    if "y_rel_l1" in data.columns:
        data["y_rel_l1"] = _numeric(data, "y_rel_l1", source)
    if "sigma" in data.columns:
        data["sigma"] = _numeric(data, "sigma", source)
    for col in ("branch", "variant", "run_id"):
        if col in data.columns:
            data[col] = data[col].astype(str)
    return data


def _keep_variant(data: pd.DataFrame, files: list[dict], variant: str | None, warnings: list[str]):
    """The rows of ``variant`` (or of the one variant the tables hold) and the variants they are of."""
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
        return data, [variant]
    if len(table_variants) > 1:
        raise TraceError(
            f"column 'variant': the tables hold several variants ({', '.join(table_variants)}); "
            "choose one with --variant"
        )
    return data, table_variants or prov_variants


def _keep_branch(data: pd.DataFrame, branch: str | None) -> tuple[pd.DataFrame, str | None]:
    """The rows of one CFG branch (``branch``, else the default one) where the tables have a branch column."""
    if "branch" in data.columns:
        kept_branch = branch or DEFAULT_BRANCH
        found = sorted(data["branch"].unique())
        data = data[data["branch"] == kept_branch]
        if data.empty:
            raise TraceError(f"--branch {kept_branch!r}: no rows with that branch; branches found: {', '.join(found)}")
        return data, kept_branch
    if branch is not None:
        raise TraceError(
            f"--branch {branch!r}: the tables have no 'branch' column; columns found: {', '.join(_cols(data))}"
        )
    return data, None


def _checked_signal(data: pd.DataFrame, key: list[str], source: str, warnings: list[str]) -> tuple[pd.DataFrame, int]:
    """Drop each run's first step where its signal is NaN (no previous step); refuse any other non-finite or
    negative signal and any (run, step) twice. Returns the rows and how many first steps were dropped."""
    first_step = data.groupby(key, sort=False, dropna=False)["step"].transform("min")
    signal_columns = ["x_rel_l1"] + (["y_rel_l1"] if "y_rel_l1" in data.columns else [])
    expected_nan = (data["step"] == first_step) & data[signal_columns].isna().any(axis=1)
    data = data[~expected_nan]
    dropped = int(expected_nan.sum())
    if data.empty:
        raise TraceError(f"TRACES: empty input: no rows with finite {' and '.join(signal_columns)} in {source}")

    bad = ~np.isfinite(data[signal_columns]).all(axis=1)
    if bad.any():
        raise TraceError(
            f"columns {'/'.join(signal_columns)}: {int(bad.sum())} row(s) with NaN or inf "
            "besides the first step of a run "
            f"(expected finite numbers): {_describe(data, bad)}"
        )
    huge = (data[signal_columns] > MAX_REL_L1).any(axis=1)
    if huge.any():
        raise TraceError(
            f"columns {'/'.join(signal_columns)}: {int(huge.sum())} row(s) above {MAX_REL_L1:g} (expected a "
            f"relative L1 change of one step, at most {MAX_REL_L1:g}): {_describe(data, huge)}"
        )
    negative = (data[signal_columns] < 0).any(axis=1)
    if negative.any():
        raise TraceError(
            f"columns {'/'.join(signal_columns)}: {int(negative.sum())} negative value(s) "
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
    return data, dropped


def _resolve_num_steps(
    data: pd.DataFrame, key: list[str], argument: int | None, arg: str, source: str
) -> tuple[pd.DataFrame, str, list[str]]:
    """Fill num_steps per run: the table's value, else the argument ``arg``, else max(step) + 1; check it fits."""
    data = data.copy()
    given = pd.Series(False, index=data.index)
    if "num_steps" in data.columns:
        given = data["num_steps"].notna()
        data.loc[given, "num_steps"] = _integers(data.loc[given], "num_steps", source)
    else:
        data["num_steps"] = np.nan
    sources, notes = [], []
    if given.any():
        sources.append(NUM_STEPS_TABLE)
        if argument is not None:
            table_values = sorted(int(v) for v in data.loc[given, "num_steps"].unique())
            if table_values != [argument]:
                raise TraceError(
                    f"{arg} {argument} disagrees with column 'num_steps' in {source} "
                    f"({', '.join(map(str, table_values))}): the traces come from schedules of another length"
                )
    missing = ~given
    if missing.any():
        runs = data.loc[missing].groupby(key, sort=False, dropna=False).ngroups
        if argument is not None:
            data.loc[missing, "num_steps"] = argument
            sources.append(arg)
            notes.append(f"num_steps: {argument} from {arg} for {runs} run(s) without a 'num_steps' column")
        else:
            inferred = data.loc[missing].groupby(key, sort=False, dropna=False)["step"].transform("max") + 1
            data.loc[missing, "num_steps"] = inferred
            values = sorted(int(v) for v in inferred.unique())
            sources.append(NUM_STEPS_INFERRED)
            notes.append(
                f"num_steps: no 'num_steps' column; inferred per run as max(step) + 1 = "
                f"{', '.join(map(str, values))} ({runs} run(s)); pass --num-steps N if the runs were longer"
            )
    data["num_steps"] = data["num_steps"].astype(np.int64)
    per_run = data.groupby(key, sort=False, dropna=False)["num_steps"].nunique()
    if (per_run > 1).any():
        run = ", ".join(map(str, np.atleast_1d(per_run[per_run > 1].index[0])))
        raise TraceError(f"column 'num_steps' in {source}: run {run} has several values; expected one per run")
    if (data["num_steps"] < 2).any():
        raise TraceError(f"column 'num_steps' in {source}: expected an integer >= 2 on every row")
    beyond = data["step"] >= data["num_steps"]
    if beyond.any():
        raise TraceError(
            f"column 'step' in {source}: {int(beyond.sum())} row(s) at or beyond num_steps "
            f"(steps run 0..num_steps-1): {_describe(data, beyond)}"
        )
    return data, "+".join(sources), notes


def _check_every_step(data: pd.DataFrame, key: list[str]) -> None:
    for run, group in data.groupby(key, sort=False):
        n = int(group["num_steps"].iloc[0])
        missing = sorted(set(range(1, n)) - set(group["step"].tolist()))
        if missing:
            shown = ", ".join(map(str, missing[:8])) + (f", ... ({len(missing) - 8} more)" if len(missing) > 8 else "")
            name = "/".join(map(str, np.atleast_1d(run)))
            raise TraceError(
                f"run {name}: no finite x_rel_l1 at step(s) {shown} of 1..{n - 1}; a replay needs the signal "
                "at every step after the first"
            )


def _cols(frame: pd.DataFrame) -> list[str]:
    return [str(c) for c in frame.columns if not str(c).startswith("_")]


def step_fraction(frame: pd.DataFrame) -> np.ndarray:
    """step / (num_steps - 1), exactly as :meth:`teacache.rescale.RescaleFunction.time_input` computes it."""
    steps = frame["step"].to_numpy(dtype=float)
    denom = np.maximum(frame["num_steps"].to_numpy(dtype=float) - 1.0, 1.0)
    return steps / denom
