"""A fit.json written as an mlx-teacache calibration file (``_calibration_<variant>.json``).

mlx-teacache's calibration scripts write one JSON object per variant: the polynomial as
``coefficients_c4_to_c0`` (five numbers, highest power first: the tuple its ``apply_teacache(coefficients=...)``
takes), the x range it was fitted on (``x_min``/``x_max``), ``fit_r_squared``, the recording's settings
(``num_inference_steps``, ``width``, ``height``, ``guidance``, ``seed``) and the raw pairs
(``x_values``/``y_values``), prompt by prompt, each prompt's steps 1..N-1 in order. This module writes
that object from a fit and the traces it was made on; :mod:`calib.traces.mlx_teacache` reads it back.

mlx-teacache's gate takes a polynomial in x only, of degree 4 at most. A fit whose selected form is
time-aware (``poly+step``/``poly+sigma``) cannot be expressed: the best x-only candidate of the same fit
(highest cross-validated R^2) is written instead, and the file and the command say so.
"""

from __future__ import annotations

import math
from pathlib import Path

from calib.traces.errors import TraceError
from calib.traces.reader import load_traces
from calib.traces.runs import run_key_columns
from teacache.errors import TeaCacheError
from teacache.io import file_sha256, project_root

DEGREES = 4  # mlx-teacache's poly_eval unpacks exactly five coefficients (c4..c0)
PROJECT_ROOT = project_root()  # where "./" in an artifact's paths points (teacache.io.portable)
GENERATED_BY = "teacache-calib emit --format mlx-teacache"


class FormatError(TeaCacheError, ValueError):
    """A fit that cannot become an mlx-teacache calibration file; the message says why."""


def default_name(variant: str) -> str:
    """mlx-teacache's file name for a variant: ``_calibration_<variant with underscores>.json``."""
    return f"_calibration_{variant.replace('-', '_')}.json"


def choose_candidate(fit: dict, polynomial: bool = False) -> tuple[dict, str | None]:
    """The candidate to write and, when it is not the selected one, why it replaced it.

    A selected mono+step function (not a polynomial at all) is refused unless ``polynomial``: the refusal
    names the best safe polynomial in x the fit holds, which ``polynomial`` writes instead."""
    selected = fit["selected"]
    if selected["form"] == "poly" and selected["degree"] <= DEGREES:
        return selected, None
    if selected["form"] == "mono+step":
        return _best_safe_polynomial(fit, polynomial)
    x_only = [c for c in fit.get("candidates") or [] if c.get("form") == "poly" and c.get("degree", 99) <= DEGREES]
    x_only = [c for c in x_only if isinstance(c.get("cv_r2"), int | float) and math.isfinite(c["cv_r2"])]
    label = selected.get("label", selected["form"])
    if not x_only:
        raise FormatError(
            f"FIT: the selected {label} is {selected['form']} (time-aware), which mlx-teacache's gate cannot "
            f"express (a polynomial in x of degree <= {DEGREES}), and the fit holds no x-only candidate to write "
            "instead; refit with --form poly"
        )
    best = max(x_only, key=lambda c: c["cv_r2"])
    note = (
        f"the fit selected {label} ({selected['form']}: a time-aware form mlx-teacache's gate cannot express); "
        f"written instead: its best x-only candidate {best.get('label', 'poly')} by cv R^2 "
        f"({best['cv_r2']:.4f} against the selected {selected['cv_r2']:.4f})"
    )
    return best, note


def _best_safe_polynomial(fit: dict, write: bool) -> tuple[dict, str]:
    selected = fit["selected"]
    label = selected.get("label", selected["form"])
    safe = [
        c
        for c in fit.get("candidates") or []
        if c.get("form") == "poly"
        and c.get("degree", 99) <= DEGREES
        and (c.get("safety") or {}).get("safe")
        and isinstance(c.get("cv_r2"), int | float)
        and math.isfinite(c["cv_r2"])
    ]
    what = f"the selected {label} is mono+step, which mlx-teacache's format (a polynomial in x of degree <= {DEGREES})"
    if not safe:
        raise FormatError(f"FIT: {what} cannot hold, and the fit holds no safe polynomial in x; refit with --form poly")
    best = max(safe, key=lambda c: c["cv_r2"])
    scores = f"cv R^2 {best['cv_r2']:.4f} against the selected {selected['cv_r2']:.4f}"
    if not write:
        raise FormatError(
            f"FIT: {what} cannot hold; the best safe polynomial it could write is {best['label']} ({scores}): "
            "pass --polynomial to write it"
        )
    return (
        best,
        f"{what} cannot hold; written instead (--polynomial): its best safe polynomial {best['label']} ({scores})",
    )


def five_coefficients(coefficients) -> list[float]:
    """A polynomial's coefficients (highest power first) as c4..c0, padded with leading zeros."""
    values = [float(c) for c in coefficients]
    if len(values) > DEGREES + 1:
        raise FormatError(f"FIT: degree {len(values) - 1} is above mlx-teacache's {DEGREES}")
    return [0.0] * (DEGREES + 1 - len(values)) + values


def trace_paths(fit: dict, given: list[str] | None) -> list[str]:
    """The trace tables to take the raw pairs from: ``given`` (moved copies), else the fit's inputs.

    Either way each table must be one the fit read (same sha256), so the pairs written are the fitted ones.
    """
    files = (fit.get("input") or {}).get("files") or []
    if not files and not given:
        raise FormatError("--traces: the fit names no input tables; give the traces it was fitted on")
    fitted = {info.get("sha256") for info in files if info.get("sha256")}
    paths = [Path(p) for p in given] if given else [_local(info.get("path", "")) for info in files]
    for path in paths:
        if not path.is_file():
            raise FormatError(f"--traces: {path} is not here; give the traces the fit was made on")
        if fitted and file_sha256(path) not in fitted:
            raise FormatError(f"--traces: {path} is not a table the fit read (sha256 differs); give the fitted traces")
    return [str(p) for p in paths]


def _local(text: str) -> Path:
    """A path as artifacts store it (``teacache.io.portable``: ".", "$TMPDIR", "~") on this machine."""
    import tempfile

    for name, prefix in ((".", PROJECT_ROOT), ("$TMPDIR", Path(tempfile.gettempdir())), ("~", Path.home())):
        if text == name or text.startswith(name + "/"):
            return prefix / text[len(name) + 1 :]
    return Path(text)


def calibration_object(
    fit: dict, given_traces: list[str] | None, variant: str | None = None, polynomial: bool = False
) -> tuple[dict, str | None]:
    """The mlx-teacache calibration object of ``fit`` (pairs from ``given_traces``, else the fit's inputs) and a
    note when another candidate than the selected one was written (``polynomial``: see :func:`choose_candidate`)."""
    candidate, note = choose_candidate(fit, polynomial)
    data = fit.get("data") or {}
    fit_variants = (fit.get("input") or {}).get("variants") or []
    if variant is None:
        if len(fit_variants) != 1:
            raise FormatError("--variant: the fit does not name one variant; give --variant")
        variant = fit_variants[0]
    elif fit_variants and variant not in fit_variants:
        raise FormatError(f"--variant {variant!r} disagrees with the fit, which was made on {', '.join(fit_variants)}")
    traces_paths = trace_paths(fit, given_traces)
    try:
        traces = load_traces(traces_paths, branch=data.get("branch"), variant=variant)
    except TraceError as exc:
        raise FormatError(str(exc)) from None
    frame = traces.frame
    steps = sorted(int(s) for s in frame["num_steps"].unique())
    if len(steps) != 1:
        raise FormatError(f"TRACES: runs of {'/'.join(map(str, steps))} steps; the format holds one step count")
    num_steps = steps[0]
    runs = list(frame.groupby(run_key_columns(frame), sort=False))
    xs: list[float] = []
    ys: list[float] = []
    prompts: list[str] = []
    for key, run in runs:
        if run["step"].tolist() != list(range(1, num_steps)):
            raise FormatError(
                f"TRACES: run {key} lacks some of steps 1..{num_steps - 1}; the format places pairs by position"
            )
        xs += run["x_rel_l1"].astype(float).tolist()
        ys += run["y_rel_l1"].astype(float).tolist()
        text = run["prompt"].iloc[0] if "prompt" in run.columns else run["prompt_id"].iloc[0]
        prompts.append(str(text))
    if len(xs) != candidate["n_pairs"]:
        raise FormatError(
            f"TRACES: {len(xs)} pairs, but the fit was made on {candidate['n_pairs']}; give the traces it was fitted on"
        )
    lo, hi = (float(v) for v in candidate["x_range"])
    prov = traces.provenance or {}
    width, height = _resolution(prov)
    seeds = sorted({int(s) for s in frame["seed"].unique()}) if "seed" in frame.columns else []
    out = {
        "variant": variant,
        "num_inference_steps": num_steps,
        "height": height,
        "width": width,
        "guidance": prov.get("guidance"),
        "num_prompts": len(runs),
        "num_pairs": len(xs),
        "fit_mode": candidate.get("mode"),
        "coefficients_c4_to_c0": five_coefficients(candidate["coefficients"]),
        "fit_r_squared": candidate["r2"],
        "heldout_r_squared": candidate["cv_r2"],
        "calibration_prompts": prompts,
        "x_values": xs,
        "y_values": ys,
        "x_min": lo,
        "x_max": hi,
        "y_min": min(ys),
        "y_max": max(ys),
        "generated_by": GENERATED_BY,
        "fitted_model": candidate.get("label"),
        "fit_date_utc": (fit.get("provenance") or {}).get("date_utc"),
        "fit_git_commit": ((fit.get("provenance") or {}).get("git") or {}).get("commit"),
    }
    if len(seeds) == 1:
        out["seed"] = seeds[0]
    elif seeds:
        out["seeds"] = seeds  # one prompt entry per (prompt, seed) run, in calibration_prompts' order
    if prov.get("quantization") is not None:
        out["quantize"] = prov["quantization"]
    if note:
        out["note"] = note
    return {k: v for k, v in out.items() if v is not None}, note


def _resolution(prov: dict) -> tuple[int | None, int | None]:
    text = prov.get("resolution")
    if isinstance(text, str) and "x" in text:
        width, height = text.split("x", 1)
        if width.isdigit() and height.isdigit():
            return int(width), int(height)
    return prov.get("width"), prov.get("height")
