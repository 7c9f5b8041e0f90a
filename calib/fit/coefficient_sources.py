"""Where a rescale function to use or score comes from: one resolver for ``fit --compare``, ``replay
--coefficients`` and ``sweep --coefficients``.

Accepted: ``packaged`` (the variant's module), a fit.json (or its folder), an mlx-teacache calibration
(``_calibration_<variant>.json``, ``PATH#SIGNAL`` for one of several signals), a coefficient module (.py
defining ``RESCALE``), or numbers highest power first (``c4,...,c0``) with an optional ``--x-range LO,HI``.
Files carry their calibrated range; bare numbers get theirs from ``--x-range`` or are unbounded.
"""

from __future__ import annotations

import errno
import importlib.util
import json
import math
import os
from pathlib import Path

from calib.fit.errors import FitError
from calib.fit.result import FitResult
from calib.run.arguments import shown
from calib.traces import mlx_teacache
from calib.traces.table_files import split_signal
from teacache.coefficients import load_packaged, module_name
from teacache.rescale import RescaleFunction

PACKAGED = "packaged"


def parse_x_range(text: str | None, arg: str = "--x-range") -> tuple[float, float] | None:
    """'LO,HI' with 0 <= LO < HI (HI may be 'inf'); None when not given."""
    if text is None:
        return None
    parts = [p.strip() for p in str(text).split(",")]
    try:
        lo, hi = (float(p) for p in parts)
    except ValueError:
        raise FitError(f"{arg}: expected LO,HI (two numbers, 0 <= LO < HI), got {text!r}") from None
    if math.isnan(lo) or math.isnan(hi) or math.isinf(lo) or not 0 <= lo < hi:
        raise FitError(f"{arg}: expected LO,HI with 0 <= LO < HI, got {text!r}")
    return lo, hi


def _kind(path: Path, arg: str) -> str | None:
    """'dir', 'file', 'other' or None (nothing there). A name the system cannot hold (over 255 bytes: a long
    list of numbers reads as one) names nothing; another failure to look is one line about ``arg``."""
    try:
        if path.is_dir():
            return "dir"
        if path.exists():
            return "file" if path.is_file() else "other"
    except OSError as exc:
        if exc.errno == errno.ENAMETOOLONG:
            return None
        raise FitError(f"{arg}: cannot look at {shown(path)} ({exc.strerror or exc})") from None
    return None


def resolve_coefficients(
    source: str,
    variant: str | None,
    x_range: tuple[float, float] | None = None,
    arg: str = "--coefficients",
) -> tuple[RescaleFunction, str]:
    """The rescale function ``source`` names and a short description of it; FitError says what is wrong."""
    source = str(source)
    if not source.strip():  # Path("") is the current folder, which would be read as a fit folder
        raise FitError(
            f"{arg}: expected {PACKAGED}, a fit.json (or its folder), a coefficient module (.py) or numbers "
            "highest power first (c4,...,c0), got an empty string"
        )
    if source == PACKAGED:
        _no_range(x_range, arg, "packaged coefficients")
        return _packaged(variant, arg)
    path, signal = split_signal(source)
    kind = _kind(path, arg)
    if path.suffix == ".json" or kind == "dir":
        _no_range(x_range, arg, str(path))
        return _from_json(path, signal, arg, kind)
    if path.suffix == ".py":
        _no_range(x_range, arg, str(path))
        if kind != "file":
            raise FitError(f"{arg}: {shown(path)} does not exist")
        module = import_module_from_path(path)
        rescale = getattr(module, "RESCALE", None)
        if not isinstance(rescale, RescaleFunction):
            raise FitError(f"{arg}: {path} defines no RESCALE = RescaleFunction(...)")
        return rescale, f"module {path}"
    fields = source.split(",")
    if len(fields) > 1 and any(not v.strip() for v in fields):
        raise FitError(
            f"{arg}: an empty field in {shown(source)}; expected comma-separated numbers highest power first, "
            "one in each field (c4,...,c0)"
        )
    try:
        numbers = tuple(float(v) for v in fields if v.strip())
    except ValueError:
        raise FitError(
            f"{arg}: expected 'packaged', a fit.json path, an mlx-teacache calibration .json, a coefficient "
            f"module (.py) or comma-separated numbers highest power first; got {shown(source)}"
        ) from None
    try:
        rescale = RescaleFunction(
            coefficients=numbers,
            x_range=x_range or (0.0, math.inf),
            provenance={"source": arg, "x_range_from": "--x-range" if x_range else "none (unbounded)"},
        )
    except ValueError as exc:
        raise FitError(f"{arg}: {exc}") from None
    where = f", x range {x_range[0]:g}..{x_range[1]:g}" if x_range else ", unbounded x range"
    return rescale, f"coefficients {source}{where}"


def _no_range(x_range, arg: str, what: str) -> None:
    if x_range is not None:
        raise FitError(f"--x-range: {what} carry their own calibrated range; give --x-range with numbers for {arg}")


def _packaged(variant: str | None, arg: str) -> tuple[RescaleFunction, str]:
    if variant is None:
        raise FitError(f"{arg} packaged: no variant known; pass --variant (the traces have no variant column)")
    try:
        module = module_name(variant)
    except ValueError as exc:
        raise FitError(f"{arg} packaged: {exc}") from None
    try:
        return load_packaged(variant), f"packaged teacache.coefficients.{module} ({variant})"
    except ModuleNotFoundError:
        raise FitError(
            f"{arg} packaged: variant {variant!r} has no module teacache/coefficients/{module}.py yet; "
            "emit one with teacache-calib emit"
        ) from None


def packaged_numeric_change(variant: str | None, trace_provenance: dict | None) -> str | None:
    """The sentence saying the traces ran on another numeric path than the packaged fit; None when they did not
    or it cannot be known. The traces' mflux release and dtype come from their provenance, else the installed
    release stands in for theirs (and the sentence says so)."""
    from teacache.coefficients import numeric_change_note

    if variant is None:
        return None
    prov = trace_provenance or {}
    release = (prov.get("versions") or {}).get("mflux")
    note = numeric_change_note(variant, release, prov.get("dtype"))
    if note is not None and release is None:
        note += " [the traces name no mflux release: this compares with the installed one]"
    return note


def _from_json(path: Path, signal: str | None, arg: str, kind: str | None) -> tuple[RescaleFunction, str]:
    """A fit.json (or folder holding one) or an mlx-teacache calibration, told apart by content."""
    if kind == "file":
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise FitError(f"{arg}: cannot read {path} as JSON: {exc}") from None
        if mlx_teacache.is_calibration(data):
            try:
                rescale = mlx_teacache.calibration_rescale(data, signal, path.name)
            except ValueError as exc:
                raise FitError(f"{arg}: {path.name}: {exc}") from None
            return rescale, rescale.provenance["source"]
    elif kind is None:
        raise FitError(f"{arg}: {shown(path)} does not exist")
    if signal is not None:
        raise FitError(f"{arg}: '#{signal}' names a signal of an mlx-teacache calibration; {path} is not one")
    try:
        return FitResult.read(path).rescale, f"fit {path}"
    except FitError as exc:
        raise FitError(f"{arg}: {exc}") from None


def import_module_from_path(path: str | os.PathLike):
    """Import a Python file under a private name (never registered in sys.modules)."""
    path = Path(path)
    spec = importlib.util.spec_from_file_location(f"_teacache_coeffs_{abs(hash(str(path.resolve())))}", path)
    if spec is None or spec.loader is None:
        raise FitError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception as exc:  # noqa: BLE001 - report any failure of a user file as one message
        raise FitError(f"cannot import {path}: {type(exc).__name__}: {exc}") from None
    return module
