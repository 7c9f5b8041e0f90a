"""Validated traces as the commands use them: the rows and where they came from (:class:`Traces`), each run's
signal placed by step (:class:`RunTrace`), and the columns that name one run."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from calib.run.prompts import pair_id

NUM_STEPS_TABLE = "table"


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
    def loras(self) -> list[dict]:
        """Per input whose provenance names LoRAs (``teacache-calib record --lora-paths``): its name and those
        LoRAs (path, SHA-256, scale). Empty when the traces were recorded without any, or say nothing of them."""
        found = []
        for info in self.files:
            loras = (info.get("provenance") or {}).get("loras")
            if loras:
                found.append({"file": info.get("name"), "loras": loras})
        return found

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


def run_label(row: pd.Series, columns: pd.Index, seed: int | None) -> str:
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


def loras_note(found: list[dict], n_files: int | None = None) -> str | None:
    """The LoRAs traces were recorded with (:attr:`Traces.loras`), in one clause; None when none were."""
    from teacache.lora import describe

    if not found:
        return None
    said = {describe(entry["loras"]) for entry in found}
    if len(said) == 1 and (n_files is None or len(found) == n_files):
        return f"recorded with LoRA {said.pop()}"
    return "recorded with LoRAs per table: " + "; ".join(f"{e['file']}: {describe(e['loras'])}" for e in found)


def run_key_columns(frame: pd.DataFrame) -> list[str]:
    """Columns that identify one generation: run_id when present, else prompt_id (+seed), plus branch."""
    cols = ["run_id"] if "run_id" in frame.columns else ["prompt_id"] + (["seed"] if "seed" in frame else [])
    if "variant" in frame.columns and "run_id" not in frame.columns:
        cols.append("variant")
    if "branch" in frame.columns:
        cols.append("branch")
    return cols


def step_fraction(frame: pd.DataFrame) -> np.ndarray:
    """step / (num_steps - 1), exactly as :meth:`teacache.rescale.RescaleFunction.time_input` computes it."""
    steps = frame["step"].to_numpy(dtype=float)
    denom = np.maximum(frame["num_steps"].to_numpy(dtype=float) - 1.0, 1.0)
    return steps / denom
