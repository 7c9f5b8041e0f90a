"""The quantized no-op bounds of full-size FLUX.1-dev, derived from the files of ``quantized-noop/measure.py``.

On CUDA, quantized FLUX.1 is not bit-exact even vanilla against vanilla (results/cuda-nvidia-h200/quantized-noop/
RUN.md), so there the no-op oracle is a measured bound rather than bit-exactness. ``measure.py`` builds the
full-size random FLUX.1-dev (``random-flux1-dev``, weights from seed 0), quantizes it as mflux does, keeps the
linears it names in bfloat16 (``teacache.models.fullsize.keep_bfloat16``), runs vanilla and the proxy with every
step computed, interleaved after a warm-up of each, and writes every run's final latents against every other's.
``read_measurements`` is the one reader of those files. ``derive`` gives, per bit width, the settings, an upper
bound on max-abs and on relative RMS from the proxy / vanilla pairs (the margin rule of ``bounds``) and the
files they came from. ``module_blocks`` keeps earlier constants as they are written when a derivation is not
given their files.
"""

from __future__ import annotations

import functools
import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from bench.tolerances.bounds import CALIBRATED_MIN_PAIRS, MARGIN, upper_bound
from bench.tolerances.module import PROJECT_ROOT, ModuleSource, block
from bench.tolerances.noop_pairs import PROXY_VANILLA, RUN_NAME, VANILLA_VANILLA, Pair, distribution, of_kind
from calib.run.arguments import check_input_file
from teacache.errors import InputError
from teacache.io import portable

ARG = "--quantized-noop"
SCRIPT = "results/cuda-nvidia-h200/quantized-noop/measure.py"
WHY = "results/cuda-nvidia-h200/quantized-noop/RUN.md"
PREFIX = "FULLSIZE_FLUX1_DEV"
KINDS = ("SETTINGS", "MAX_ABS", "REL_RMS", "INPUTS")  # each bit width's constants, in the module's order
NAME = re.compile(rf"^{PREFIX}_Q(\d+)_NOOP_({'|'.join(KINDS)})$")
# What measure.py runs with and does not write into its files (prompt and seed: bench.timing.fullsize_measure's).
MEASURE_PY = {"model": "random-flux1-dev", "model_seed": 0, "guidance": 3.5}
META_NUMBERS = ("steps", "size", "repeats", "quantize", "group_size")
SHARED = ("steps", "size", "group_size", "kept_bfloat16", "mlx", "device")  # one bit width's files must agree
WHY_KEPT = {
    "x_embedder": "x_embedder (64 -> 3072, K equal to the group size) because MLX's CUDA quantized matmul with "
    "K = 64 reads output memory it never wrote: quantized, vanilla differs from itself by whatever the allocator "
    "hands back, which no bound can be measured for",
}


def constant_name(bits: int, kind: str) -> str:
    """FULLSIZE_FLUX1_DEV_Q8_NOOP_MAX_ABS and the like: ``kind`` one of KINDS."""
    assert kind in KINDS, kind
    return f"{PREFIX}_Q{bits}_NOOP_{kind}"


@dataclass(frozen=True)
class Measurement:
    """One file of measure.py: its settings (``_meta``) and its pairs of runs."""

    path: str  # as the module records it (``recorded_path``)
    meta: dict
    pairs: tuple[Pair, ...]
    given: str  # as the command line gave it: what a refusal names


def recorded_path(path: Path) -> str:
    """A file's name as the module records it: relative to the project root, else as given with the temp and home
    folders named as every artifact names them (``teacache.io.portable``): no path of one machine."""
    try:
        return path.resolve().relative_to(PROJECT_ROOT).as_posix()
    except ValueError:
        return portable(path.as_posix())


def _refusal(path: Path, what: str) -> InputError:
    return InputError(f"{ARG}: {path}: {what}; expected a file that {SCRIPT} wrote (_meta and pairs)")


def read_measurement(path: str | Path) -> Measurement:
    """One measure.py file, checked whole: a missing key or a value of the wrong kind is one line naming both."""
    path = check_input_file(path, ARG)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise _refusal(path, f"not JSON ({exc})") from None
    if not isinstance(data, dict) or not all(key in data for key in ("_meta", "pairs")):
        raise _refusal(path, "no _meta and pairs at its top")
    meta = _meta(path, data["_meta"])
    if not isinstance(data["pairs"], list):
        raise _refusal(path, "pairs is not a list")
    pairs = tuple(_pair(path, i, item) for i, item in enumerate(data["pairs"]))
    for kind in (PROXY_VANILLA, VANILLA_VANILLA):
        if not of_kind(pairs, kind):
            raise _refusal(path, f"no {kind} pair")
    return Measurement(recorded_path(path), meta, pairs, str(path))


def _meta(path: Path, meta: object) -> dict:
    if not isinstance(meta, dict):
        raise _refusal(path, "_meta is not an object")
    for key in (*META_NUMBERS, "kept_bfloat16", "blocks", "mlx", "device"):
        if key not in meta:
            raise _refusal(path, f"_meta has no {key!r}")
    for key in META_NUMBERS:
        if isinstance(meta[key], bool) or not isinstance(meta[key], int) or meta[key] < 1:
            raise _refusal(path, f"_meta.{key}: expected a whole number >= 1, got {meta[key]!r}")
    for key in ("mlx", "device"):
        if not isinstance(meta[key], str) or not meta[key]:
            raise _refusal(path, f"_meta.{key}: expected a name, got {meta[key]!r}")
    kept = meta["kept_bfloat16"]
    if not isinstance(kept, list) or not all(isinstance(name, str) and name for name in kept):
        raise _refusal(path, f"_meta.kept_bfloat16: expected a list of layer names, got {kept!r}")
    if meta["blocks"] is not None:
        raise _refusal(path, f"_meta.blocks {meta['blocks']!r}: a smoke test of a cut-down model, not full size")
    for key in ("mflux", "measured_at"):  # written by measure.py since they were missed; optional in older files
        if key in meta and (not isinstance(meta[key], str) or not meta[key]):
            raise _refusal(path, f"_meta.{key}: expected a string, got {meta[key]!r}")
    dated = {"measured_at": meta["measured_at"], "dated_by": "file"} if "measured_at" in meta else _added_at(path)
    return {key: meta[key] for key in (*META_NUMBERS, "mlx", "device")} | {
        "kept_bfloat16": tuple(kept), "mflux": meta.get("mflux"), **dated
    }  # fmt: skip


def _added_at(path: Path) -> dict:
    """A file that records no date is dated by the commit that added it (measured no later than that), UTC."""
    import datetime as dt
    import subprocess

    try:
        done = subprocess.run(["git", "log", "--diff-filter=A", "--format=%cI", "--", str(path.resolve())],
                              cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=30)  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return {"measured_at": None, "dated_by": None}
    lines = done.stdout.split() if done.returncode == 0 else []
    if not lines:
        return {"measured_at": None, "dated_by": None}
    when = dt.datetime.fromisoformat(lines[-1]).astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {"measured_at": when, "dated_by": "commit"}


def _when(group: list[Measurement]) -> str:
    """When a bit width's files were measured, and by what that is known."""
    dates = sorted({m.meta["measured_at"] for m in group if m.meta["measured_at"]})
    by = {m.meta["dated_by"] for m in group}
    if not dates or None in by:
        return "the date unknown (a file records none and is not committed)"
    if by == {"file"}:
        return f"measured {', '.join(dates)}"
    return (f"measured no later than {', '.join(dates)} (the files record no date: the commit that added them, "
            "git log --diff-filter=A)")  # fmt: skip


def _mflux(group: list[Measurement]) -> str:
    versions = {m.meta["mflux"] for m in group}
    return f"mflux {versions.pop()}" if len(versions) == 1 and None not in versions else "mflux not recorded"


def _pair(path: Path, index: int, item: object) -> Pair:
    where = f"pairs[{index}]"
    if not isinstance(item, dict):
        raise _refusal(path, f"{where} is not an object")
    for key in ("a", "b", "equal", "max_abs", "rel_rms"):
        if key not in item:
            raise _refusal(path, f"{where} has no {key!r}")
    for key in ("a", "b"):
        if not isinstance(item[key], str) or not RUN_NAME.match(item[key]):
            raise _refusal(
                path, f"{where}.{key}: expected a run vanilla-N or proxy-all-N (or -warm), got {item[key]!r}"
            )
    if not isinstance(item["equal"], bool):
        raise _refusal(path, f"{where}.equal: expected true or false, got {item['equal']!r}")
    for key in ("max_abs", "rel_rms"):
        value = item[key]
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
            raise _refusal(path, f"{where}.{key}: expected a finite number >= 0, got {value!r}")
    return Pair(item["a"], item["b"], item["equal"], float(item["max_abs"]), float(item["rel_rms"]))


def read_measurements(paths: Sequence[str | Path], backend: str) -> list[Measurement]:
    """Every file, read and checked before anything is derived: a file given twice, files of one bit width that
    differ in a setting, or a device of another kind than the sweeps' ``backend`` is refused."""
    measurements, seen = [], {}
    for path in paths:
        key = Path(path).resolve()
        if key in seen:
            raise InputError(f"{ARG}: {path} is given twice (as {seen[key]} too)")
        seen[key] = path
        measurements.append(read_measurement(path))
    device_kind = "cpu" if backend == "cpu" else "gpu"
    for m in measurements:
        if not m.meta["device"].startswith(f"Device({device_kind}"):
            raise InputError(f"{ARG}: {m.given} ran on {m.meta['device']}, the sweeps (RUNS) on {backend}: one module "
                             "per hardware")  # fmt: skip
    for bits in {m.meta["quantize"] for m in measurements}:
        first, *others = [m for m in measurements if m.meta["quantize"] == bits]
        for m, key in ((m, key) for m in others for key in SHARED):
            if m.meta[key] != first.meta[key]:
                raise InputError(
                    f"{ARG}: {m.given} has {key} {_shown(m.meta[key])}, {first.given} {_shown(first.meta[key])}: the "
                    f"{bits}-bit files of one derivation must share {', '.join(SHARED)}"
                )
    return sorted(measurements, key=lambda m: (-m.meta["quantize"], m.path))


def _shown(value: object) -> str:
    if isinstance(value, tuple):  # kept_bfloat16
        return f"({', '.join(value)})"
    return str(value)


def derive(measurements: Sequence[Measurement], hardware: str) -> dict[str, tuple[object, list[str]]]:
    """Each bit width's constants (name -> (value, comment lines)), the widest bit width first."""
    out: dict[str, tuple[object, list[str]]] = {}
    for bits in sorted({m.meta["quantize"] for m in measurements}, reverse=True):
        out.update(_bit_width(bits, [m for m in measurements if m.meta["quantize"] == bits], hardware))
    return out


def _bit_width(bits: int, group: list[Measurement], hardware: str) -> dict[str, tuple[object, list[str]]]:
    meta = group[0].meta
    pairs = [p for m in group for p in m.pairs]
    proxy_vanilla, vanilla = of_kind(pairs, PROXY_VANILLA), of_kind(pairs, VANILLA_VANILLA)
    settings = {**MEASURE_PY, "group_size": meta["group_size"], "kept_bfloat16": meta["kept_bfloat16"],
                "quantize": bits, "size": meta["size"], "steps": meta["steps"]}  # fmt: skip
    kept = meta["kept_bfloat16"]
    what = (
        f"full-size random FLUX.1-dev ({MEASURE_PY['model']}, weights from seed {MEASURE_PY['model_seed']}) quantized "
        f"to {bits} bits as mflux does (group size {meta['group_size']}), "
        + (f"{', '.join(kept)} kept in bfloat16 (teacache.models.fullsize.keep_bfloat16)" if kept else "every linear")
        + f"; {meta['steps']} steps, {meta['size']}x{meta['size']}, guidance {MEASURE_PY['guidance']}"
    )
    why_kept = [f"kept in bfloat16: {WHY_KEPT[name]}" for name in kept if name in WHY_KEPT]
    repeats = " and ".join(str(m.meta["repeats"]) for m in group)
    origin = (
        f"measured on {hardware} (the files record {meta['device']}), mlx {meta['mlx']}, {_mflux(group)} in the "
        f"files; {_when(group)}; {len(group)} files of {SCRIPT}, {repeats} interleaved repeats after a "
        f"warm-up of each arm, every run against every other: {', '.join(m.path for m in group)}"
    )
    unequal = sum(not p.equal for p in vanilla)
    oracle = (
        f"not bit-exact as the oracle: vanilla differs from vanilla in {unequal} of {len(vanilla)} pairs of these "
        "files (quantized kernels on CUDA are not reproducible from run to run), so the oracle is proxy / vanilla "
        f"within this bound, with vanilla / vanilla beside it ({WHY})"
    )
    status = (
        f"provisional: one prompt and seed, n counts pairs of repeated runs (calibrated needs {CALIBRATED_MIN_PAIRS} "
        "prompt x seed pairs)"
    )
    name = functools.partial(constant_name, bits)
    out: dict[str, tuple[object, list[str]]] = {
        name("SETTINGS"): (
            dict(sorted(settings.items())),
            [
                f"the settings the {bits}-bit quantized no-op bounds below were measured at; tests/gpu/"
                "test_quantized_noop.py runs these (prompt and seed: bench.timing.fullsize_measure's, as measure.py)",
                what,
                origin,
                status,
            ],
        )  # fmt: skip
    }
    for kind, key, label in (("MAX_ABS", "max_abs", "max-abs"), ("REL_RMS", "rel_rms", "relative RMS")):
        bound, _ = upper_bound([getattr(p, key) for p in proxy_vanilla])
        figures = [distribution(PROXY_VANILLA, proxy_vanilla, key),
                   distribution(f"{VANILLA_VANILLA} in the same files", vanilla, key)]  # fmt: skip
        out[name(kind)] = (
            bound,
            [f"quantized no-op, {bits} bits: the proxy with every step computed against vanilla, final latents "
             f"{label}", what, *why_kept, origin, *figures, MARGIN, oracle, status],
        )  # fmt: skip
    out[name("INPUTS")] = (
        tuple(m.path for m in group),
        [f"the files the {bits}-bit bounds above were derived from (teacache-bench tolerances {ARG}); "
         "tests/test_rebuild.py derives them again from these", status],
    )  # fmt: skip
    return out


def bits_of(name: str) -> int | None:
    """The bit width of a quantized no-op constant's name; None for any other name."""
    match = NAME.match(name)
    return int(match.group(1)) if match else None


def module_blocks(
    derived: dict[str, tuple[object, list[str]]], previous: ModuleSource | None
) -> tuple[list[str], list[int]]:
    """The module's blocks of no variant and the bit widths carried over: the constants derived now, and the
    previous module's ones of a bit width not derived now, as they are written there (byte for byte)."""
    texts = {name: block(name, value, notes) for name, (value, notes) in derived.items()}
    earlier = previous.of_no_variant() if previous is not None else {}
    derived_bits = {bits_of(name) for name in derived}
    carried = {n: t for n, t in earlier.items() if bits_of(n) is None or bits_of(n) not in derived_bits}
    order = list(earlier)

    def place(name: str) -> tuple:
        bits = bits_of(name)
        return (1, order.index(name), 0) if bits is None else (0, -bits, KINDS.index(NAME.match(name).group(2)))

    every = {**carried, **texts}
    kept_bits = sorted({bits_of(n) for n in carried if bits_of(n) is not None}, reverse=True)
    return [every[name] for name in sorted(every, key=place)], kept_bits


def recorded_inputs(module: ModuleSource) -> list[str]:
    """The files a module's quantized no-op constants were derived from, as it records them."""
    names = [n for n in module.constants if bits_of(n) is not None and n.endswith("_INPUTS")]
    return [path for name in names for path in module.constants[name]]
