"""The checks :func:`calib.traces.reader.load_traces` runs on the concatenated tables, in order: column types, the
variant and CFG branch kept, num_steps per run, a finite signal, every step of a run when a replay needs it. Each
refusal is a TraceError naming the column, the rows and what was expected."""

from __future__ import annotations

import numpy as np
import pandas as pd

from calib.traces.errors import TraceError
from calib.traces.runs import NUM_STEPS_TABLE

DEFAULT_BRANCH = "cond"
NUM_STEPS_INFERRED = "inferred"
# The longest schedule a trace table may claim: far beyond any sampler's, and a bound on what a replay or a
# decision score allocates (one table of num_steps x runs x num_steps values).
MAX_NUM_STEPS = 1000
# The largest rel-L1 change a row may hold. A step's change is mean|a - b| / mean|b|: every committed table
# stays under 0.5. 1e6, an output a million times its own size in one step, is a broken recording; and a fit of
# degree 4 raises x to the 4th and 8th powers (its normal equations), so values far above it overflow float64
# or drown every other row in rounding (LAPACK's "SVD did not converge"), without naming the row.
MAX_REL_L1 = 1e6


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


def typed(data: pd.DataFrame, source: str) -> pd.DataFrame:
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


def keep_variant(
    data: pd.DataFrame, files: list[dict], variant: str | None, warnings: list[str]
) -> tuple[pd.DataFrame, list[str]]:
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


def keep_branch(data: pd.DataFrame, branch: str | None) -> tuple[pd.DataFrame, str | None]:
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


def checked_signal(data: pd.DataFrame, key: list[str], source: str, warnings: list[str]) -> tuple[pd.DataFrame, int]:
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


def resolve_num_steps(
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
    if ((data["num_steps"] < 2) | (data["num_steps"] > MAX_NUM_STEPS)).any():
        raise TraceError(f"column 'num_steps' in {source}: expected an integer from 2 to {MAX_NUM_STEPS} on every row")
    beyond = data["step"] >= data["num_steps"]
    if beyond.any():
        raise TraceError(
            f"column 'step' in {source}: {int(beyond.sum())} row(s) at or beyond num_steps "
            f"(steps run 0..num_steps-1): {_describe(data, beyond)}"
        )
    return data, "+".join(sources), notes


def check_every_step(data: pd.DataFrame, key: list[str]) -> None:
    """Refuse a run that lacks the signal at a step after the first: a replay places the gate at every step."""
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
