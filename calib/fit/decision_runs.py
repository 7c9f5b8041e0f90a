"""Recorded runs as the decision score reads them: dense ``[runs, steps]`` arrays of the gate's signal and of the
change a skipped step leaves uncomputed (the cached residual's drift, else the output's; :mod:`calib.fit.decision`
says why). Pure numpy/pandas."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from calib.fit.errors import FitError
from calib.traces.runs import run_key_columns

CHANGE_RESIDUAL = "residual"
CHANGE_OUTPUT = "output"
_CHANGE_COLUMNS = {CHANGE_RESIDUAL: ("residual_rel_l1", "residual_norm"), CHANGE_OUTPUT: ("y_rel_l1", "y_norm")}


@dataclass(frozen=True)
class RunTable:
    """Recorded runs as dense arrays ``[runs, steps]``, placed by their step column."""

    keys: list[tuple]  # run key per run (calib.traces.runs.run_key_columns)
    prompt_ids: np.ndarray  # [runs]
    x: np.ndarray  # the gate's signal; NaN where there is none (step 0 always: no anchor at run time)
    change: np.ndarray  # a_j: absolute change of the reused tensor at step j (0 where unknown)
    norm: np.ndarray  # size of the reused tensor at each step (1.0 when the table has no norms)
    sigma: np.ndarray | None
    num_steps: np.ndarray  # [runs]
    change_kind: str  # CHANGE_RESIDUAL or CHANGE_OUTPUT
    norm_column: str | None  # the norm column used, None when there was none

    @property
    def n_runs(self) -> int:
        return len(self.keys)

    def prefix(self) -> np.ndarray:
        """``[runs, steps + 1]``: cumulative change, so a stretch a..b costs (P[b+1] - P[a]) / norm[a-1]."""
        return np.concatenate([np.zeros((self.n_runs, 1)), np.cumsum(self.change, axis=1)], axis=1)

    def subset(self, runs: np.ndarray) -> RunTable:
        return RunTable(
            keys=[self.keys[i] for i in np.arange(self.n_runs)[runs]],
            prompt_ids=self.prompt_ids[runs],
            x=self.x[runs],
            change=self.change[runs],
            norm=self.norm[runs],
            sigma=None if self.sigma is None else self.sigma[runs],
            num_steps=self.num_steps[runs],
            change_kind=self.change_kind,
            norm_column=self.norm_column,
        )


def pack_runs(frame: pd.DataFrame, change: str | None = None) -> tuple[RunTable, np.ndarray]:
    """Dense per-run arrays from a validated trace frame, and the run index of every frame row.

    ``change``: CHANGE_RESIDUAL, CHANGE_OUTPUT or None (residual when the table records it on every row).
    num_steps comes from its column, else max(step) + 1 per run.
    """
    kind = change or (CHANGE_RESIDUAL if _usable(frame, "residual_rel_l1") else CHANGE_OUTPUT)
    if kind not in _CHANGE_COLUMNS:
        raise FitError(f"change: expected {CHANGE_RESIDUAL!r} or {CHANGE_OUTPUT!r}, got {change!r}")
    rel_column, norm_column = _CHANGE_COLUMNS[kind]
    if not _usable(frame, rel_column):
        raise FitError(f"change {kind!r}: needs column {rel_column!r} with finite values >= 0 on every row")
    key = run_key_columns(frame)
    run_of_row = frame.groupby(key, sort=False, dropna=False).ngroup().to_numpy()
    n_runs = int(run_of_row.max()) + 1 if len(frame) else 0
    first_row = np.unique(run_of_row, return_index=True)[1]
    keys = [tuple(row) for row in frame[key].iloc[first_row].itertuples(index=False)]
    steps = frame["step"].to_numpy(dtype=np.int64)
    if n_runs == 0 or steps.min() < 0:
        raise FitError("frame: expected rows with steps >= 0")
    counts = "num_steps" in frame.columns
    num_steps = np.zeros(n_runs, dtype=np.int64)
    np.maximum.at(num_steps, run_of_row, frame["num_steps"].to_numpy(dtype=np.int64) if counts else steps + 1)
    width = int(max(num_steps.max(), steps.max() + 1))
    if np.unique(run_of_row * width + steps).size != len(frame):
        raise FitError(f"frame: two rows share a step within one run (run key: {'+'.join(key)})")

    def dense(values: np.ndarray, fill: float) -> np.ndarray:
        out = np.full((n_runs, width), fill)
        out[run_of_row, steps] = values
        return out

    x = dense(frame["x_rel_l1"].to_numpy(dtype=float), np.nan)
    x[:, 0] = np.nan  # no cached residual before step 0: the gate always computes it
    rel = dense(frame[rel_column].to_numpy(dtype=float), np.nan)
    use_norms = _usable(frame, norm_column) and bool(np.all(frame[norm_column].to_numpy(dtype=float) > 0))
    if use_norms:
        norm = _fill_along_steps(dense(frame[norm_column].to_numpy(dtype=float), np.nan))
    else:
        norm = np.ones((n_runs, width))
    previous = np.concatenate([norm[:, :1], norm[:, :-1]], axis=1)
    change_values = np.where(np.isfinite(rel), rel * previous, 0.0)
    sigma = dense(frame["sigma"].to_numpy(dtype=float), np.nan) if "sigma" in frame.columns else None
    prompt_ids = frame["prompt_id"].astype(str).to_numpy()[first_row]
    table = RunTable(
        keys=keys, prompt_ids=prompt_ids, x=x, change=change_values, norm=norm, sigma=sigma, num_steps=num_steps,
        change_kind=kind, norm_column=norm_column if use_norms else None,
    )  # fmt: skip
    return table, run_of_row


def _usable(frame: pd.DataFrame, column: str) -> bool:
    if column not in frame.columns:
        return False
    values = pd.to_numeric(frame[column], errors="coerce").to_numpy(dtype=float)
    return bool(np.all(np.isfinite(values) & (values >= 0)))


def _fill_along_steps(values: np.ndarray) -> np.ndarray:
    """Missing entries take the next recorded value of their run, else the previous one."""
    filled = pd.DataFrame(values).T.bfill().ffill().T.to_numpy()
    return np.where(np.isfinite(filled), filled, 1.0)
