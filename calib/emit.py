"""``teacache-calib emit``: turn a fit.json into the packaged coefficient module of a variant.

The module is generated text: ``RESCALE`` and ``RECIPE`` with the measurement's provenance as comments
next to each. Everything comes from the fit file (no clock, no environment), so the same fit always gives
the same bytes and a diff of the module shows exactly what a refit changed.
"""

from __future__ import annotations

import argparse
import ast
import sys
import textwrap
from collections.abc import Mapping
from pathlib import Path

from calib import pyliteral
from calib.emit_calibration import emit_calibration
from calib.emit_changes import describe_changes, max_curve_difference  # noqa: F401  (re-exported)
from calib.emit_checks import check_emittable
from calib.emit_notes import GENERATED, lookup, rescale_notes, when_where
from calib.fit import safety
from calib.fit.coefficient_sources import import_module_from_path
from calib.fit.errors import FitError
from calib.fit.result import FitResult
from calib.run.arguments import CommandParser, check_out_file, path_argument
from calib.run.command import command, parsed
from teacache import variants
from teacache.coefficients import PACKAGED_MODULES, module_name
from teacache.errors import InputError
from teacache.io import project_root, write_text
from teacache.outputs import Writes
from teacache.rescale import FORM_MONO_STEP, FORM_POLY_STEP, RescaleFunction
from teacache.variants import dtype_name

COEFFICIENTS_DIR = project_root() / "teacache" / "coefficients"
_WIDTH = 108


def _is_emitted(path: Path) -> bool:
    """A coefficient module this command wrote (its header says so): rewritten without --force."""
    try:
        with path.open(encoding="utf-8") as handle:
            return GENERATED in handle.read(2000)
    except (OSError, UnicodeDecodeError):
        return False


# One module: new, one it emitted, or --force; teacache/coefficients/ is what it exists to regenerate.
WRITES = Writes("teacache-calib emit", is_own=_is_emitted, regenerates=("teacache/coefficients",))


def target_path(variant: str) -> Path:
    """Where the packaged module of ``variant`` lives (teacache/coefficients/<module>.py)."""
    return COEFFICIENTS_DIR / f"{module_name(variant)}.py"


def importers(module: str) -> dict[str, set[str]]:
    """{file name: names} of the coefficient modules that import names from ``module``: rewriting it must keep
    those names, or they stop importing (and every variant served through them with them)."""
    found: dict[str, set[str]] = {}
    for path in sorted(COEFFICIENTS_DIR.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module == f"teacache.coefficients.{module}":
                found.setdefault(path.name, set()).update(alias.name for alias in node.names)
    return found


def served_variants(module: str) -> list[str]:
    """Every variant whose packaged function comes from ``module``: its spec names it, or names a module that
    imports from it (tiny-flux1's once took FLUX.1-dev's this way)."""
    modules, todo = {module}, [module]
    while todo:
        for name in importers(todo.pop()):
            stem = name.removesuffix(".py")
            if stem not in modules:
                modules.add(stem)
                todo.append(stem)
    return sorted(v for v, m in PACKAGED_MODULES.items() if m in modules)


def check_importers(module: str, text: str) -> None:
    """Refuse a new text for ``module`` that lacks a name another coefficient module imports from it."""
    defined = set()
    for node in ast.parse(text).body:
        if isinstance(node, ast.Assign):
            defined.update(target.id for target in node.targets if isinstance(target, ast.Name))
        elif isinstance(node, ast.ImportFrom):
            defined.update(alias.asname or alias.name for alias in node.names)
    for name, names in importers(module).items():
        missing = sorted(names - defined)
        if missing:
            raise InputError(
                f"--variant: {name} imports {', '.join(missing)} from module {module}, which this fit's module "
                f"would not define; make {name} import from a module emit does not rewrite (or write with --out)"
            )


def check_variant(variant: str) -> str:
    """The coefficient module ``variant``'s spec names; a known variant without one is told how to name it."""
    spec = variants.find(variant)
    if spec is not None and spec.supported and spec.coefficients is None:
        suggested = spec.name.replace("-", "_")
        raise InputError(
            f"--variant: {spec.name} has no coefficient module yet; name one in its VariantSpec "
            f'(coefficients="{suggested}" in teacache/variants/{spec.family}.py), then emit writes it'
        )
    return module_name(variant)


def emit_module(fit: Mapping, variant: str) -> str:
    """The text of the coefficient module for ``variant`` (raises ValueError for an unknown variant)."""
    module = check_variant(variant)
    result = FitResult.from_json(fit)
    fit = result.to_json()
    fit_variants = (fit.get("input") or {}).get("variants") or []
    if fit_variants and variant not in fit_variants:
        raise InputError(f"--variant {variant!r} disagrees with the fit, which was made on {', '.join(fit_variants)}")
    rescale = result.rescale
    trace = (fit.get("input") or {}).get("provenance") or {}
    shared = served_variants(module)
    rescale_lines = rescale_notes(fit, variant, module, shared, rescale)
    recipe = recipe_from_fit(fit)
    recipe_notes = [
        GENERATED,
        "the generation settings the traces were recorded with "
        + (f"({when_where(trace)})" if trace else "(no provenance.json: num_steps from the tables)"),
    ]
    interaction = (  # only where the selected form has x*u terms, so other modules keep their bytes
        ["    interaction_coefficients=" + _tuple(rescale.interaction_coefficients, 4) + ","]
        if rescale.interaction_coefficients
        else []
    )
    region = _region_lines(rescale)  # likewise only for functions fitted with a region
    knots = [f"    {k}=" + _tuple(getattr(rescale, k), 4) + "," for k in ("knots", "time_knots") if rescale.knots]
    lines = [
        f'"""Rescale function for {", ".join(shared)}: {GENERATED}.',
        "",
        "Refit after a new mflux release: teacache-calib record / fit / emit (see docs/refit-and-drift.md).",
        '"""',
        "",
        "from teacache.coefficients import FittedOn",
        "from teacache.rescale import Region, RescaleFunction"
        if region
        else "from teacache.rescale import RescaleFunction",
        "",
        *_comment(rescale_lines),
        "RESCALE = RescaleFunction(",
        "    coefficients=" + _tuple(rescale.coefficients, 4) + ",",
        f"    x_range=({_float(rescale.x_range[0])}, {_float(rescale.x_range[1])}),",
        f"    form={pyliteral.string(rescale.form)},",
        "    time_coefficients=" + _tuple(rescale.time_coefficients, 4) + ",",
        *interaction,
        *region,
        *knots,
        "    provenance=" + _dict(rescale.provenance, 4) + ",",
        ")",
        *_unsafe_lines(rescale),
        "",
        *_comment(recipe_notes),
        "RECIPE = " + _dict(recipe, 0),
        "",
        *_comment([GENERATED, "the mflux release and dtype the traces were recorded with (their provenance.json)"]),
        "FITTED_ON = " + fitted_on_from_fit(fit),
        "",
    ]
    return "\n".join(lines)


def fitted_on_from_fit(fit: dict) -> str:
    """The ``FittedOn(...)`` of the traces a fit was made on: their mflux release and dtype, when recorded."""
    trace = (fit.get("input") or {}).get("provenance") or {}
    release = (trace.get("versions") or {}).get("mflux")
    if release is None:
        return 'FittedOn(evidence="no provenance.json beside the traces: mflux release unknown")'
    dtype = lookup(trace, "dtype")
    fields = [f"mflux={pyliteral.string(release)}"]
    if dtype is not None:
        fields.append(f"dtype={pyliteral.string(dtype_name(dtype))}")
    fields.append('evidence="the traces\' provenance.json"')
    return "FittedOn(" + ", ".join(fields) + ")"


def _unsafe_lines(rescale: RescaleFunction) -> list[str]:
    """``UNSAFE_X`` (x intervals where the function decreases or is <= 0) with its comment; none when safe."""
    flags = safety.flagged_intervals(rescale)
    if flags is None:
        return []
    where = safety.describe_intervals({k: [list(v) for v in spans] for k, spans in flags.items()})
    note = (
        f"this function {where} (checked on {safety.check(rescale)['grid']}), where a larger change "
        "predicts less or nothing; the gate evaluates it there as it is (max(0, f)). Fitted with --allow-unsafe "
        "or before fits checked safety."
    )
    spans = {
        k: "(" + ", ".join(f"({a!r}, {b!r})" for a, b in v) + ("," if len(v) == 1 else "") + ")"
        for k, v in flags.items()
    }
    return [
        "",
        *_comment([GENERATED, note]),
        "UNSAFE_X = {" + ", ".join(f"{pyliteral.string(k)}: {v}" for k, v in spans.items()) + "}",
    ]


def _region_lines(rescale: RescaleFunction) -> list[str]:
    """``region=Region(...)`` with one line per part of the schedule, its time inputs as a comment."""
    if rescale.region is None:
        return []
    edges = rescale.region.time_edges
    name = "step fraction" if rescale.form in (FORM_POLY_STEP, FORM_MONO_STEP) else "sigma"
    lines = ["    region=Region(", "        time_edges=" + _tuple(edges, 8) + ",", "        x_ranges=("]
    for (a, b), (lo, hi) in zip(zip(edges, edges[1:], strict=False), rescale.region.x_ranges, strict=True):
        lines.append(f"            ({_float(lo)}, {_float(hi)}),  # {name} {a:.3g}..{b:.3g}")
    return [*lines, "        ),", "    ),"]


def recipe_from_fit(fit: dict) -> dict:
    """num_steps, guidance, resolution, quantization from the traces' provenance (num_steps also or rows)."""
    trace = (fit.get("input") or {}).get("provenance") or {}
    steps = lookup(trace, "num_steps", "steps")
    if steps is None:
        found = (fit.get("data") or {}).get("num_steps") or []
        steps = found[0] if len(found) == 1 else (found or None)
    resolution = lookup(trace, "resolution")
    if resolution is None and lookup(trace, "width") is not None and lookup(trace, "height") is not None:
        resolution = f"{lookup(trace, 'width')}x{lookup(trace, 'height')}"
    quantization = lookup(trace, "quantization", "quantize")
    return {
        "num_steps": steps,
        "guidance": lookup(trace, "guidance"),
        "resolution": resolution,
        "quantization": quantization,
    }


def _comment(notes: list[str]) -> list[str]:
    out = []
    for note in notes:
        out += textwrap.wrap(
            note,
            _WIDTH - 2,
            initial_indent="# ",
            subsequent_indent="#   ",
            break_long_words=True,
            break_on_hyphens=False,
        )
    return out


def _float(value: float) -> str:
    return pyliteral.scalar(float(value))


def _scalar(value) -> str:
    if value is None or isinstance(value, bool):
        return repr(value)
    if isinstance(value, int):
        return repr(value)
    if isinstance(value, float):
        return _float(value)
    if isinstance(value, str):
        return pyliteral.string(value)
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_scalar(v) for v in value) + "]"
    return pyliteral.string(str(value))


def _tuple(values, indent: int) -> str:
    """A tuple of floats, one per line with a trailing comma (repr: round-trips exactly, ruff keeps it)."""
    if not values:
        return "()"
    if len(values) == 1:
        return f"({_float(values[0])},)"
    pad = " " * (indent + 4)
    return "(\n" + "".join(f"{pad}{_float(v)},\n" for v in values) + " " * indent + ")"


def _dict(mapping: dict, indent: int) -> str:
    if not mapping:
        return "{}"
    pad = " " * (indent + 4)
    body = "".join(f"{pad}{pyliteral.string(str(k))}: {_scalar(v)},\n" for k, v in mapping.items())
    return "{\n" + body + " " * indent + "}"


def setup_arg_parser() -> argparse.ArgumentParser:
    parser = CommandParser(
        prog="teacache-calib emit",
        description="Write the packaged coefficient module of a variant from a fit.json, or an mlx-teacache "
        "calibration file (--format mlx-teacache).",
    )
    parser.add_argument("fit", metavar="FIT", help="fit.json written by teacache-calib fit (or its folder)")
    parser.add_argument(
        "--variant",
        help="module: required, a variant whose VariantSpec names a coefficient module: "
        f'{", ".join(sorted(PACKAGED_MODULES))} (a new one: set coefficients="<module>" in its spec first); '
        "mlx-teacache: default the fit's",
    )
    parser.add_argument(
        "--format",
        choices=("module", "mlx-teacache"),
        default="module",
        help="module: teacache/coefficients/<module>.py; mlx-teacache: its _calibration_<variant>.json (c4..c0, x "
        "range, R^2, the raw pairs). A time-aware fit, which mlx-teacache cannot express, is written as the best "
        "x-only candidate of the same fit (by cv R^2), said in the file's 'note' and on stdout",
    )
    parser.add_argument(
        "--polynomial",
        action="store_true",
        help="mlx-teacache: when the fit selected a mono+step function (refused: the format holds a polynomial), "
        "write the fit's best safe polynomial in x instead",
    )
    parser.add_argument(
        "--traces", nargs="+", metavar="TABLE", help="mlx-teacache: the fitted traces (default: the fit's inputs)"
    )
    parser.add_argument(
        "--out",
        type=path_argument,
        metavar="PATH",
        help="write here instead of teacache/coefficients/<module>.py (mlx-teacache: FIT's folder/_calibration_*.json)",
    )
    parser.add_argument(
        "--allow-unsafe",
        action="store_true",
        help="write a fit whose function is <= 0 everywhere on its range (refused otherwise); one unsafe somewhere "
        "only warns",
    )
    parser.add_argument("--force", action="store_true", help="replace --out even if this command did not write it")
    return parser


@command("teacache-calib emit")
def main(argv: list[str] | None = None) -> int:
    argv, args = parsed(setup_arg_parser(), argv)
    if isinstance(args, int):
        return args
    if args.format == "mlx-teacache":
        return emit_calibration(args)
    if args.variant is None:
        raise InputError("--variant: required with --format module")
    if args.traces:
        raise InputError("--traces: only --format mlx-teacache writes the raw pairs")
    if args.polynomial:
        raise InputError("--polynomial: only with --format mlx-teacache (a module holds every form)")
    if args.out is not None:
        check_out_file(args.out, what="coefficient module", writes=WRITES, force=args.force)
    result = FitResult.read(args.fit)
    check_emittable(result, "teacache-calib emit", args.allow_unsafe)
    fit = result.to_json()
    text = emit_module(result, args.variant)
    if args.out is None:
        check_importers(module_name(args.variant), text)
    path = args.out if args.out is not None else target_path(args.variant)
    if path.exists() and path.read_text(encoding="utf-8") == text:
        print(f"unchanged: {path} already holds this fit")
        return 0
    old, old_recipe, unreadable = None, None, None
    if path.exists():
        try:
            previous = import_module_from_path(path)
            old, old_recipe = getattr(previous, "RESCALE", None), getattr(previous, "RECIPE", None)
        except FitError as exc:
            unreadable = str(exc)
        if not isinstance(old, RescaleFunction):
            old = None
    print(f"{path}:")
    if path.exists() and old is None:
        print(f"  previous module: {unreadable or 'no RESCALE = RescaleFunction(...) in it'}; replacing it")
    else:
        for line in describe_changes(old, result.rescale, fit):
            print(f"  {line}")
        new_recipe = recipe_from_fit(fit)
        if old is not None and old_recipe != new_recipe:
            print(f"  recipe: {old_recipe} -> {new_recipe}")
    shared = served_variants(module_name(args.variant))
    if len(shared) > 1:
        print(f"  note: module {module_name(args.variant)} serves {', '.join(shared)}")
    write_text(path, text)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
