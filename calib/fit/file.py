"""fit.json's sections that describe the data (``data``) and compare two fits' selections; the file itself is
read and written by :mod:`calib.fit.result`."""

from __future__ import annotations

from collections.abc import Mapping

from calib.fit.result import FUNCTION_KEYS, thaw
from calib.run.fingerprint import close
from calib.traces.runs import Traces, run_key_columns

SELECTION_KEYS = ("label", *FUNCTION_KEYS)


def same_selection(a: Mapping, b: Mapping) -> bool:
    """Two fits select the same function: the same candidate, its numbers within the refit tolerance
    (``calib.run.fingerprint.FIT_RTOL``: a refit of the same traces elsewhere is not bit-identical)."""
    first, second = thaw(a["selected"]), thaw(b["selected"])
    return all(close(first.get(k), second.get(k)) for k in SELECTION_KEYS)


def describe_data(traces: Traces) -> dict:
    """The "data" section of fit.json: what the fit saw, including where num_steps came from."""
    frame = traces.frame
    x = frame["x_rel_l1"].to_numpy(dtype=float)
    y = frame["y_rel_l1"].to_numpy(dtype=float)
    data = {
        "n_pairs": len(frame),
        "n_prompts": traces.n_prompts,
        "prompts": sorted(frame["prompt_id"].unique().tolist()),
        "n_runs": int(frame.groupby(run_key_columns(frame), sort=False).ngroups),
        "steps": sorted(int(s) for s in frame["step"].unique()),
        "x_range": [float(x.min()), float(x.max())],
        "y_range": [float(y.min()), float(y.max())],
        "branch": traces.branch,
        "dropped_first_step_rows": traces.dropped_first_steps,
        "warnings": list(traces.warnings),
    }
    if "seed" in frame.columns:
        data["seeds"] = sorted({_plain(s) for s in frame["seed"].unique()}, key=str)
    data["num_steps"] = sorted(int(n) for n in frame["num_steps"].unique())
    data["num_steps_source"] = traces.num_steps_source
    data["notes"] = list(traces.notes)
    if "sigma" in frame.columns:
        data["sigma_range"] = [float(frame["sigma"].min()), float(frame["sigma"].max())]
    return data


def _plain(value):
    return value.item() if hasattr(value, "item") else value
