"""fit.json: what ``teacache-calib fit`` writes, read back as data or as the selected rescale function.

Files written before the time-aware interaction terms existed load unchanged (no interaction fields), and
so do files from before regions: their time-aware functions hold their one x range at every time input.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from calib.fit.candidates import CandidateSpec
from calib.fit.errors import FitError
from calib.run.fingerprint import close
from calib.traces.runs import Traces, run_key_columns
from teacache.io import FORMAT_VERSION
from teacache.rescale import Region, RescaleFunction

FIT_KIND = "teacache-calib fit"


def read_fit(path: str | os.PathLike) -> dict:
    """Load and check a fit.json (or a folder holding one)."""
    p = Path(path)
    if p.is_dir():
        p = p / "fit.json"
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise FitError(f"FIT: {p} does not exist") from None
    except (OSError, ValueError) as exc:
        raise FitError(f"FIT: cannot read {p} as JSON: {exc}") from None
    if not isinstance(data, dict) or "selected" not in data:
        raise FitError(f"FIT: {p} is not a fit.json written by teacache-calib fit (no 'selected' field)")
    if data.get("format_version") != FORMAT_VERSION:
        raise FitError(
            f"FIT: {p} has format_version {data.get('format_version')!r}; this toolkit reads {FORMAT_VERSION}"
        )
    return data


def rescale_from_fit(fit: dict | str | os.PathLike) -> RescaleFunction:
    """The selected candidate of a fit.json (dict, file or folder holding fit.json) as a RescaleFunction."""
    data = read_fit(fit) if not isinstance(fit, dict) else fit
    try:
        return _rescale(data)
    except KeyError as exc:  # a fit.json edited by hand, or written by another tool
        raise FitError(f"FIT: selected: missing field {exc}") from exc
    except (TypeError, ValueError) as exc:
        raise FitError(f"FIT: selected: {exc}") from exc


def _rescale(data: dict) -> RescaleFunction:
    sel = data["selected"]
    prov = data.get("provenance") or {}
    variants = (data.get("input") or {}).get("variants") or []
    label = (
        sel.get("label")
        or CandidateSpec(
            sel["form"], sel["degree"], sel["mode"], sel.get("time_degree", 0), sel.get("interaction_degree", 0)
        ).label
    )
    provenance = {
        "source": FIT_KIND,
        "fitted_model": label,
        "r2": sel["r2"],
        "cv_r2": sel["cv_r2"],
        "rmse_cv": sel["rmse"],
        "n_prompts": sel["n_prompts"],
        "n_pairs": sel["n_pairs"],
        "date_utc": prov.get("date_utc"),
        "git_commit": (prov.get("git") or {}).get("commit"),
        "variant": variants[0] if len(variants) == 1 else (variants or None),
    }
    return RescaleFunction(
        coefficients=tuple(sel["coefficients"]),
        x_range=tuple(sel["x_range"]),
        form=sel["form"],
        time_coefficients=tuple(sel.get("time_coefficients") or ()),
        interaction_coefficients=tuple(sel.get("interaction_coefficients") or ()),
        region=Region.from_dict(sel["region"]) if sel.get("region") else None,
        knots=tuple(sel.get("knots") or ()),
        time_knots=tuple(sel.get("time_knots") or ()),
        provenance=provenance,
    )


SELECTION_KEYS = (
    "label", "form", "coefficients", "time_coefficients", "interaction_coefficients", "x_range", "region", "knots",
    "time_knots",
)  # fmt: skip


def same_selection(a: dict, b: dict) -> bool:
    """Two fits select the same function: the same candidate, its numbers within the refit tolerance
    (``calib.run.fingerprint.FIT_RTOL``: a refit of the same traces elsewhere is not bit-identical)."""
    first, second = a["selected"], b["selected"]
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
