"""``teacache-bench tolerances``: test tolerances derived from measured sweep distributions.

From one or more sweep folders (one per variant) it writes a Python module of constants, each with
a comment saying what was measured, when, on which hardware and versions, over how many prompts x
seeds, the measured min / p1 / median, the margin and why, and whether it is calibrated or provisional.
With each variant go the (prompt, seed) pairs it was measured on: the tests run on those. The module is
complete: a variant the sweeps did not measure keeps this hardware's earlier constants, or reads another
hardware's measured ones at import, labelled provisional (``bench.tolerances.module``). With ``--quantized-noop``
it also writes the quantized no-op bounds of full-size FLUX.1-dev from the files of that measurement
(``bench.tolerances.quantized_noop``); without it, the module's earlier ones are kept as written. The same input
gives a byte-identical file. The tests load the module of the hardware they run on.

Margin rule, the same for every bound: one median-to-worst spread beyond the worst measured run.
A new prompt or seed from the same distribution lands beyond the worst of n measured runs about once
in n + 1; the margin covers that without reaching the values the gap check shows bugs produce.
"""

from __future__ import annotations

import argparse
import functools
import importlib.util
import math
import sys
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pandas as pd

from bench.sweep.records import NOOP, RecordError, read_sweep
from bench.tolerances import quantized_noop
from bench.tolerances.bounds import CALIBRATED_MIN_PAIRS, MARGIN, lower_bound, upper_bound
from bench.tolerances.bounds import stats as _stats
from bench.tolerances.module import (
    GENERATED,
    PROJECT_ROOT,
    TOLERANCES_DIR,
    complete,
    module_path,
    prefix,
    previous_module,
    render_module,
)
from calib.run.arguments import CommandParser, Writes, check_out_file, path_argument
from calib.run.command import command
from teacache.errors import InputError
from teacache.gate import DEFAULT_SKIP_FIRST
from teacache.io import write_text
from teacache.provenance import hardware_slug

__all__ = ["PROJECT_ROOT", "check_run", "derive", "load_module", "main", "module_text", "prefix", "render_module"]


def derive(sweep_dir: Path, threshold: float | None = None, provisional: bool = False) -> dict:
    """Tolerances of one variant from one sweep folder: a dict of constant name -> (value, comment lines)."""
    sweep_dir = Path(sweep_dir)
    prov, runs, noop = _read(sweep_dir)
    threshold = prov.get("default_threshold") if threshold is None else threshold
    tc = runs[runs["kind"] == "teacache"]
    at = _at_threshold(tc, threshold, sweep_dir)
    variant = prov["variant"]
    p = prefix(variant)
    n_pairs = int(at["pair_id"].nunique())
    status = "calibrated" if n_pairs >= CALIBRATED_MIN_PAIRS and not provisional else "provisional"
    note = functools.partial(_note, origin=_origin(prov), status=status)
    out: dict[str, tuple] = {}
    out[f"{p}_SETTINGS"] = (
        _sorted_keys({"steps": int(prov["steps"]), "threshold": float(threshold), "guidance": float(prov["guidance"]),
         "resolution": prov["resolution"],
         "skip_first_n_steps": int(prov.get("skip_first_n_steps", DEFAULT_SKIP_FIRST)), "rescale": prov["rescale"]}),
        note("the generation settings every constant below was measured with", None),
    )  # fmt: skip
    out[f"{p}_CASES"] = (
        measured_cases(at),
        note("the (prompt id, prompt, seed) pairs the bounds below were measured on; the tests run on these", None),
    )
    out.update(_noop_constants(p, tc[tc["threshold"] == 0.0], noop, note))
    out.update(_quality_constants(p, at, threshold, prov["steps"], note))
    return {"variant": variant, "hardware": _slug(prov), "backend": prov["backend"], "status": status, "constants": out}


def _read(sweep_dir: Path) -> tuple[dict, pd.DataFrame, pd.DataFrame]:
    """A sweep's provenance, runs and noop tables; a folder without them is refused, naming what to run."""
    try:
        records = read_sweep(sweep_dir)
    except RecordError as exc:
        raise InputError(f"RUNS: {exc}") from None
    if records.noop is None:
        raise InputError(f"RUNS: {sweep_dir} has no {NOOP.file}; run teacache-bench sweep into it first")
    return records.provenance, records.runs, records.noop


def _at_threshold(tc: pd.DataFrame, threshold: float, sweep_dir: Path) -> pd.DataFrame:
    """The TeaCache runs at ``threshold``; a threshold the sweep did not measure is refused, naming those it did."""
    available = sorted(tc["threshold"].unique())
    at = tc[np.isclose(tc["threshold"], threshold)]
    if at.empty:
        raise InputError(
            f"--threshold: {threshold:g} was not swept in {sweep_dir}; swept: {', '.join(f'{t:g}' for t in available)}"
        )
    return at


def _origin(prov: dict) -> str:
    """The line every constant's comment carries: when, where, which versions and settings, which commit."""
    return (
        f"measured {prov['date_utc'][:10]} on {prov['backend']} {prov['device_name']} ({prov.get('os', '')}); "
        f"mlx {prov['versions']['mlx']}, mflux {prov['versions']['mflux']}; {prov['variant']}, {prov['steps']} steps, "
        f"{prov['resolution']}, guidance {prov['guidance']}; {len(prov['prompts'])} prompts x {len(prov['seeds'])} "
        f"seeds; sweep commit {(prov.get('git') or {}).get('commit', '?')}"
    )


def _note(
    what: str, s: dict | None, extra: str = "", pairs: int | None = None, *, origin: str, status: str
) -> list[str]:
    """The constant's comment; ``pairs``: the pairs its values come from, when fewer than the sweep's
    (values left out as not finite): below CALIBRATED_MIN_PAIRS the constant is provisional."""
    lines = [what, origin]
    if s is not None:
        lines.append(f"n {s['n']}: min {s['min']:.6g}, p1 {s['p1']:.6g}, median {s['median']:.6g}, max {s['max']:.6g}")
    if extra:
        lines.append(extra)
    if pairs is not None and pairs < CALIBRATED_MIN_PAIRS and status == "calibrated":
        lines.append(f"provisional: from {pairs} pairs, fewer than the {CALIBRATED_MIN_PAIRS} a calibration needs")
    else:
        lines.append(status)
    return lines


def _noop_constants(p: str, zero: pd.DataFrame, noop: pd.DataFrame, note: Callable[..., list[str]]) -> dict:
    """The bounds of the runs that must not change the output: threshold 0, the proxy computing every step, and
    vanilla runs before and after TeaCache runs."""
    out: dict[str, tuple] = {}
    if not zero.empty:
        exact = bool((zero["max_abs"] == 0).all())
        out[f"{p}_NOOP_THRESHOLD0"] = (
            "bit-exact" if exact else float(zero["max_abs"].max()),
            note(
                "threshold 0 against the paired vanilla run, final latents max-abs (the fast path swaps nothing in)",
                _stats(zero["max_abs"]),
                "bit-exact: every run equal to vanilla" if exact else "NOT bit-exact: investigate before trusting",
            ),
        )
    if bool(noop["bit_exact"].all()):
        out[f"{p}_PROXY_NOOP"] = (
            "bit-exact",
            note("proxy active, every step computed, against vanilla: bit-exact in every run (path unchanged)",
                 _stats(noop["max_abs"])),
        )  # fmt: skip
    else:
        bound, s = lower_bound(noop["cosine"])
        out[f"{p}_PROXY_NOOP_MIN_COSINE"] = (
            bound,
            note(
                "proxy active, every step computed (uncompiled path), final latents cosine against vanilla", s, MARGIN
            ),
        )
        bound, s = upper_bound(noop["max_abs"])
        out[f"{p}_PROXY_NOOP_MAX_ABS"] = (
            bound,
            note(
                "proxy active, every step computed (uncompiled path), final latents max-abs against vanilla", s, MARGIN
            ),
        )
    out[f"{p}_RESTORE"] = (
        "bit-exact" if bool(noop["vanilla_repeats_equal"].all()) else "differs",
        note("vanilla runs before and after TeaCache runs in one process: every repeat equal", None),
    )
    return out


def _quality_constants(p: str, at: pd.DataFrame, threshold: float, steps, note: Callable[..., list[str]]) -> dict:
    """The bounds of deliberately approximate output at ``threshold``: SSIM and PSNR floors and the skip band."""
    out: dict[str, tuple] = {}
    finite_ssim = at["ssim"].dropna()
    if not finite_ssim.empty:
        bound, s = lower_bound(finite_ssim)
        pairs = int(at.loc[finite_ssim.index, "pair_id"].nunique())
        out[f"{p}_SSIM_FLOOR"] = (
            bound,
            note(f"SSIM of decoded images against vanilla at threshold {threshold:g}", s, MARGIN, pairs),
        )
    finite_psnr = at["psnr"].replace([np.inf], np.nan).dropna()
    if not finite_psnr.empty:
        bound, s = lower_bound(finite_psnr)
        pairs = int(at.loc[finite_psnr.index, "pair_id"].nunique())
        what = f"PSNR (dB) against vanilla at threshold {threshold:g}"
        out[f"{p}_PSNR_FLOOR"] = (bound, note(what, s, MARGIN, pairs))
    lo, s_lo = lower_bound(at["skipped"])
    hi, _ = upper_bound(at["skipped"])
    band = (max(0, math.floor(lo)), min(int(steps), math.ceil(hi)))
    out[f"{p}_SKIP_BAND"] = (
        band,
        note(f"steps skipped at threshold {threshold:g} (of {steps})", s_lo, MARGIN + "; rounded outward"),
    )
    return out


def _slug(prov: dict) -> str:
    return hardware_slug({k: prov.get(k) for k in ("backend", "device_name", "cpu_count")})


def _sorted_keys(value):
    """Dicts with their keys sorted, at every depth: the settings read the same whatever order the sweep wrote."""
    if isinstance(value, dict):
        return {k: _sorted_keys(value[k]) for k in sorted(value)}
    if isinstance(value, list):
        return [_sorted_keys(v) for v in value]
    return value


def measured_cases(runs: pd.DataFrame) -> tuple[tuple[str, str, int], ...]:
    """The (prompt id, prompt, seed) pairs of a set of runs, in the sweep's order."""
    pairs = runs[["prompt_id", "prompt", "seed"]].drop_duplicates()
    return tuple((str(r.prompt_id), str(r.prompt), int(r.seed)) for r in pairs.itertuples())


def _is_generated(path: Path) -> bool:
    """A module this command generated (its docstring says so): rewriting it keeps its other variants."""
    try:
        with path.open(encoding="utf-8") as handle:
            return GENERATED.lower() in handle.read(2000).lower()
    except (OSError, UnicodeDecodeError):
        return False


# One module: new, one it generated, or --force; tests/tolerances/ in the checkout is what it exists to regenerate.
WRITES = Writes("teacache-bench tolerances", is_own=_is_generated, regenerates=("tests/tolerances",))


def setup_arg_parser() -> argparse.ArgumentParser:
    parser = CommandParser(prog="teacache-bench tolerances", description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", type=Path, metavar="RUNS", help="sweep folders (one per variant)")
    parser.add_argument("--out", type=path_argument, default=None, help="default: tests/tolerances/<hardware>.py")
    parser.add_argument("--threshold", type=float, default=None, help="default: each sweep's default threshold")
    parser.add_argument(
        "--provisional",
        action="store_true",
        help="label every derived constant provisional (whatever the number of pairs measured)",
    )
    parser.add_argument(
        quantized_noop.ARG,
        nargs="+",
        type=path_argument,
        default=[],
        metavar="PAIRS.json",
        help=f"files of {quantized_noop.SCRIPT} (the quantized no-op of full-size FLUX.1-dev on this hardware): "
        "bounds per bit width; without it, the module's earlier ones are kept as written",
    )
    parser.add_argument("--force", action="store_true", help="replace --out even if this command did not write it")
    return parser


def check_run(tol, variant: str, run: dict) -> dict[str, bool]:
    """Which tolerances one measured run satisfies. ``run`` may hold: skipped, ssim, psnr (at the
    tolerance threshold), proxy_noop_bit_exact / proxy_noop_cosine / proxy_noop_max_abs, restore_ok."""
    p = prefix(variant)
    verdict: dict[str, bool] = {}
    if "skipped" in run:
        lo, hi = getattr(tol, f"{p}_SKIP_BAND")
        verdict["skip_band"] = lo <= run["skipped"] <= hi
    if "ssim" in run and hasattr(tol, f"{p}_SSIM_FLOOR"):
        verdict["ssim_floor"] = run["ssim"] >= getattr(tol, f"{p}_SSIM_FLOOR")
    if "psnr" in run and hasattr(tol, f"{p}_PSNR_FLOOR"):
        verdict["psnr_floor"] = run["psnr"] >= getattr(tol, f"{p}_PSNR_FLOOR")
    if "proxy_noop_bit_exact" in run:
        if getattr(tol, f"{p}_PROXY_NOOP", None) == "bit-exact":
            verdict["proxy_noop"] = bool(run["proxy_noop_bit_exact"])
        else:
            verdict["proxy_noop"] = run["proxy_noop_cosine"] >= getattr(tol, f"{p}_PROXY_NOOP_MIN_COSINE") and run[
                "proxy_noop_max_abs"
            ] <= getattr(tol, f"{p}_PROXY_NOOP_MAX_ABS")
    if "restore_ok" in run:
        verdict["restore"] = bool(run["restore_ok"])
    return verdict


def load_module(path: Path, arg: str = "--tolerances"):
    """Import a generated tolerance module from a path; one that does not import (a syntax error, a failing
    statement) is one line about ``arg``, not a traceback."""
    spec = importlib.util.spec_from_file_location(f"_tolerances_{Path(path).stem}", path)
    if spec is None or spec.loader is None or not Path(path).exists():
        raise InputError(f"{arg}: cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except SyntaxError as exc:
        raise InputError(f"{arg}: {path} is not a Python module (line {exc.lineno}: {exc.msg})") from None
    except Exception as exc:  # noqa: BLE001 - any statement of the module may fail
        raise InputError(f"{arg}: {path} fails on import ({type(exc).__name__}: {exc})") from None
    return module


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def check_constants(tol, variant: str, path: Path, arg: str = "--tolerances") -> None:
    """The constants :func:`check_run` reads for ``variant``, checked before any run: each one a number (or the
    pair of a band, or ``"bit-exact"``), so a hand-edited module is refused in one line, not after the runs."""
    p = prefix(variant)
    if not hasattr(tol, f"{p}_SETTINGS"):
        raise InputError(f"{arg}: {path} has no constants for {variant} (variants: {getattr(tol, 'VARIANTS', ())})")
    band = getattr(tol, f"{p}_SKIP_BAND", None)
    if not (isinstance(band, tuple | list) and len(band) == 2 and all(_is_number(v) for v in band)):
        raise InputError(f"{arg}: {p}_SKIP_BAND in {path} is {band!r}; expected a pair of numbers (lo, hi)")
    names = [f"{p}_SSIM_FLOOR", f"{p}_PSNR_FLOOR"]
    if getattr(tol, f"{p}_PROXY_NOOP", None) != "bit-exact":
        names += [f"{p}_PROXY_NOOP_MIN_COSINE", f"{p}_PROXY_NOOP_MAX_ABS"]
    for name in names:
        if name.endswith("_FLOOR") and not hasattr(tol, name):
            continue  # a floor the module does not hold is not checked (check_run skips it)
        value = getattr(tol, name, None)
        if not _is_number(value):
            raise InputError(f"{arg}: {name} in {path} is {value!r}; expected a finite number")


class ModuleText(NamedTuple):
    """A module's source and what the command says about it: the variants kept or read at import, and the bit
    widths of the quantized no-op kept as written."""

    text: str
    kept: dict
    provisional_from: dict[str, str]
    kept_bits: list[int]


def module_text(
    derived: list[dict], target: Path, noop: list | None = None, folder: Path = TOLERANCES_DIR
) -> ModuleText:
    """The module for ``target``: the derived variants, the kept and the provisional ones (``complete``), then the
    quantized no-op constants of ``noop`` (``quantized_noop.Measurement``), with the earlier ones of the bit widths
    it does not hold kept as written."""
    hardware = derived[0]["hardware"]
    kept, provisional_from = complete(derived, target, folder)
    constants = quantized_noop.derive(noop or [], hardware)
    measured, kept_bits = quantized_noop.module_blocks(constants, previous_module(target, hardware))
    return ModuleText(render_module(derived, kept, provisional_from, measured), kept, provisional_from, kept_bits)


@command("teacache-bench tolerances")
def main(argv: list[str] | None = None) -> int:
    args = setup_arg_parser().parse_args(argv)
    if args.out is not None:
        check_out_file(args.out, what=".py module", writes=WRITES, force=args.force)
    derived = [derive(path, args.threshold, args.provisional) for path in args.runs]
    hardware = {d["hardware"] for d in derived}
    if len(hardware) > 1:
        raise InputError(f"RUNS: sweeps from different hardware ({', '.join(sorted(hardware))}); one module each")
    variants = [d["variant"] for d in derived]
    if len(set(variants)) != len(variants):
        raise InputError(f"RUNS: two sweeps of the same variant ({', '.join(variants)})")
    noop = quantized_noop.read_measurements(args.quantized_noop, derived[0]["backend"])
    out = args.out or check_out_file(module_path(derived[0]["hardware"]), what=".py module", writes=WRITES)
    module = module_text(derived, out, noop)
    compile(module.text, "<tolerances>", "exec")
    write_text(out, module.text)
    for d in derived:
        print(f"{d['variant']}: {d['status']}, {len(d['constants'])} constants")
    for variant in module.kept:
        print(f"{variant}: provisional, kept from the previous module (not in these sweeps)")
    for variant, source in module.provisional_from.items():
        print(f"{variant}: provisional, read at import from {source}'s module (not in these sweeps)")
    for bits in sorted({m.meta["quantize"] for m in noop}, reverse=True):
        files = sum(m.meta["quantize"] == bits for m in noop)
        print(f"quantized no-op, {bits} bits: bounds from {files} files")
    for bits in module.kept_bits:
        print(f"quantized no-op, {bits} bits: kept from the previous module as written (no {quantized_noop.ARG} files)")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
