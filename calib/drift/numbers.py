"""Numbers: the embedded random-weight model of every family, run vanilla and recorded, summarised small.

For each family's embedded model (``teacache/models/tiny_*.py``) in float32 and in bfloat16: one vanilla
generation and one recorded one (``apply_teacache(calibrate=True)``, the recorder of ``teacache-calib
record``). What is kept is small: per final latent its shape, sha256, mean, std, abs-max, L2 norm and a
64-number sketch (a fixed +-1 random projection, so the L2 distance of two latents can be estimated from
their sketches alone); per trace the recorded ``x_rel_l1`` and ``y_rel_l1`` of every step and branch.
Every parameter a builder leaves at zero (Z-Image's pad tokens) is drawn here, keyed by its name, so a
parameter that a release starts to read or load moves the numbers (a norm_out bias is already drawn: the
builders draw every Linear's bias).
``--fullsize`` runs each family's full-size random-weight model (``random-<variant>``) instead.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import math
import os
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from calib.run.arguments import CommandParser

DTYPES = ("float32", "bfloat16")
SKETCH_SIZE = 64
PROMPT = "a red teapot on a wooden table"
SEED = 0
TINY = {"steps": 4, "width": 64, "height": 64}  # a few seconds per family on 2 CPU cores
FULLSIZE = {"steps": 4, "width": 1024, "height": 1024}
TRACE_FIELDS = ("x_rel_l1", "y_rel_l1")
RESULT_FORMAT = 1


def embedded_variants() -> tuple[str, ...]:
    """One embedded random-weight model per family, from the registry (the builders in teacache/models/tiny_*)."""
    from teacache import variants

    found = {}
    for spec in variants.all_specs():
        if spec.embedded and not spec.trained and spec.family not in found:
            found[spec.family] = spec.name
    return tuple(found.values())


def fullsize_variants() -> tuple[str, ...]:
    """One full-size random-weight model per family: the family's first variant in the registry that has one."""
    from teacache import variants

    found = {}
    for spec in variants.all_specs():
        if spec.mflux_config is not None and spec.family not in found:
            found[spec.family] = spec.name
    return tuple(found.values())


def run_key(variant: str, dtype: str) -> str:
    return f"{variant}/{dtype}"


# ------------------------------------------------------------------------------------------ summaries


def _splitmix(values: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        z = values + np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


def projection(size: int, length: int) -> np.ndarray:
    """A fixed (size, length) matrix of +-1/sqrt(size), the same on every machine and numpy version."""
    bits = _splitmix(np.arange(size * length, dtype=np.uint64)) >> np.uint64(63)
    return (bits.astype(np.float64) * 2.0 - 1.0).reshape(size, length) / math.sqrt(size)


def summarize(values: np.ndarray, dtype: str) -> dict:
    """What is kept of a final latent: enough to say whether and how far it moved, not the latent itself."""
    flat = np.asarray(values, dtype=np.float32).ravel()
    wide = flat.astype(np.float64)
    return {
        "shape": list(np.shape(values)),
        "dtype": dtype,
        "sha256": hashlib.sha256(flat.tobytes()).hexdigest(),
        "mean": float(wide.mean()),
        "std": float(wide.std()),
        "abs_max": float(np.abs(wide).max()),
        "norm": float(np.linalg.norm(wide)),
        "sketch": [float(v) for v in projection(SKETCH_SIZE, wide.size) @ wide],
    }


def trace_summary(rows: list[dict]) -> list[dict]:
    branch = {0: "cond", 1: "uncond"}
    return [
        {"step": int(r["step"]), "branch": branch.get(r["branch"], str(r["branch"])),
         **{f: (None if r.get(f) is None or math.isnan(r[f]) else float(r[f])) for f in TRACE_FIELDS}}
        for r in rows
    ]  # fmt: skip


# ------------------------------------------------------------------------------------------ distances


def latent_distance(current: dict, reference: dict) -> float:
    """Relative L2 distance estimated from the sketches (exact 0 for identical latents; inf for another shape)."""
    if current["shape"] != reference["shape"]:
        return math.inf
    if current["sha256"] == reference["sha256"]:
        return 0.0
    diff = np.linalg.norm(np.subtract(current["sketch"], reference["sketch"]))
    return float(diff / max(reference["norm"], 1e-30))


def trace_distance(current: list[dict], reference: list[dict]) -> float:
    """Largest relative difference of the recorded signals, step by step (inf when the steps differ)."""
    key = lambda r: (r["step"], r["branch"])  # noqa: E731
    ref = {key(r): r for r in reference}
    if {key(r) for r in current} != set(ref):
        return math.inf
    worst = 0.0
    for row in current:
        for field in TRACE_FIELDS:
            a, b = row[field], ref[key(row)][field]
            if a is None or b is None:
                if (a is None) != (b is None):
                    return math.inf
                continue
            worst = max(worst, abs(a - b) / max(abs(b), 1e-30))
    return worst


METRICS = ("vanilla", "recorded", "trace")


def comparable(run: dict, reference: dict | None) -> bool:
    """Both runs exist and finished: a run that raised has no numbers to measure a distance on."""
    return reference is not None and "error" not in run and "error" not in reference


def distances(current: dict, reference: dict) -> dict[str, float]:
    """Per metric, how far one run (variant, dtype) lies from its reference."""
    return {
        "vanilla": latent_distance(current["vanilla"], reference["vanilla"]),
        "recorded": latent_distance(current["recorded"], reference["recorded"]),
        "trace": trace_distance(current["trace"], reference["trace"]),
    }


# ------------------------------------------------------------------------------------------ running


@contextlib.contextmanager
def model_precision(dtype: str) -> Iterator[None]:
    """mflux builds and runs in ``ModelConfig.precision``: set it for one build and its runs."""
    import mlx.core as mx
    from mflux.models.common.config.model_config import ModelConfig

    saved = ModelConfig.precision
    ModelConfig.precision = getattr(mx, dtype)
    try:
        yield
    finally:
        ModelConfig.precision = saved


def draw_zero_parameters(module, seed: int) -> list[str]:
    """Draw every all-zero parameter uniform in +-0.1 from a key derived from ``seed`` and its name (so a new
    parameter never shifts the others); returns their names."""
    import mlx.core as mx
    from mlx.utils import tree_flatten, tree_unflatten

    drawn = []
    for name, value in tree_flatten(module.parameters()):
        if value.size and not mx.any(value != 0).item():
            salt = int.from_bytes(hashlib.sha256(name.encode("utf-8")).digest()[:4], "little")
            key = mx.random.key((seed * 1_000_003 + salt) % 2**32)
            drawn.append((name, mx.random.uniform(-0.1, 0.1, value.shape, key=key).astype(value.dtype)))
    if drawn:
        module.update(tree_unflatten(drawn))
        mx.eval(module.parameters())
    return [name for name, _ in drawn]


def build(variant: str, fullsize: bool = False, blocks: int | None = None):
    """The model of ``variant`` (embedded, or ``random-<variant>`` at full size; ``blocks``: a smoke test with that
    many blocks of each kind, NOT full size) in ``ModelConfig.precision``."""
    from teacache import variants

    spec = variants.get(variant)
    if fullsize:
        model = variants.random_builder(spec.family)(variant, seed=SEED, blocks=blocks)
    else:
        model = variants.zoo(spec.builder)(seed=SEED)
    drawn = draw_zero_parameters(model.transformer, SEED)
    return model, drawn


def run_variant(variant: str, dtype: str, settings: dict, fullsize: bool = False) -> dict:
    """One vanilla and one recorded generation of ``variant`` in ``dtype``, summarised."""
    import mlx.core as mx

    from calib.run.generation import generate
    from teacache import apply_teacache, variants

    guidance = variants.get(variant).generation.guidance
    args = (PROMPT, SEED, settings["steps"], settings["width"], settings["height"], guidance)
    start = time.perf_counter()
    with model_precision(dtype):
        model, drawn = build(variant, fullsize, settings.get("blocks"))
        vanilla = generate(model, *args)
        with apply_teacache(model, calibrate=True) as handle:
            recorded = generate(model, *args)
        rows = handle.records

    def values(latents) -> np.ndarray:
        return np.asarray(latents.astype(mx.float32))

    return {
        "variant": variant,
        "model": f"random-{variant}" if fullsize else variant,
        "dtype": dtype,
        "guidance": guidance,
        "drawn_zero_parameters": drawn,
        "vanilla": summarize(values(vanilla.latents), dtype),
        "recorded": summarize(values(recorded.latents), dtype),
        "trace": trace_summary(rows),
        "seconds": time.perf_counter() - start,
    }


def plan(variants_: tuple[str, ...], dtypes: tuple[str, ...], order: int = 0) -> list[tuple[str, str]]:
    """The (variant, dtype) runs; ``order`` rotates and reverses them (the noise floor runs several orders)."""
    runs = [(v, d) for v in variants_ for d in dtypes]
    if order % 2:
        runs.reverse()
    shift = (order // 2) % max(len(runs), 1)
    return runs[shift:] + runs[:shift]


def run_numbers(
    fullsize: bool = False,
    dtypes: tuple[str, ...] = DTYPES,
    order: int = 0,
    progress=None,
    overrides: dict | None = None,
    only: tuple[str, ...] | None = None,
) -> dict:
    """Every family's model (or ``only`` those variants) in every dtype.

    Returns {"settings", "runs": {variant/dtype: summary, or {"error"}}}.

    ``overrides`` (steps, width, height, blocks) change the full-size settings, for smoke tests."""
    settings = {**(FULLSIZE if fullsize else TINY), **(overrides or {})}
    names = fullsize_variants() if fullsize else embedded_variants()
    if only:
        names = tuple(name for name in names if name in only)
    runs = {}
    for variant, dtype in plan(names, dtypes, order):
        if progress:
            progress(f"{variant} {dtype}")
        try:
            runs[run_key(variant, dtype)] = run_variant(variant, dtype, settings, fullsize)
        except Exception as exc:  # noqa: BLE001 - a release that breaks a family is a finding, not a crash
            runs[run_key(variant, dtype)] = {
                "variant": variant,
                "dtype": dtype,
                "error": f"{type(exc).__name__}: {exc}",
            }
    return {
        "format_version": RESULT_FORMAT,
        "settings": {
            **settings,
            "prompt": PROMPT,
            "seed": SEED,
            "fullsize": fullsize,
            "order": order,
            "sketch_size": SKETCH_SIZE,
        },  # fmt: skip
        "runs": dict(sorted(runs.items())),
    }


def setup_arg_parser() -> argparse.ArgumentParser:
    """``teacache-calib drift-numbers --out FILE``: the numbers alone, with their provenance. The noise floor runs
    this once per process; a committed reference is this, run under its release:
    ``--out calib/drift/data/references/<hardware>/mflux-<release>.json``."""
    parser = CommandParser(prog="teacache-calib drift-numbers", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--order", type=int, default=0)
    parser.add_argument("--fullsize", action="store_true", help="random-<variant> at full size (default: bfloat16)")
    parser.add_argument("--dtypes", help="comma-separated: float32,bfloat16")
    parser.add_argument("--steps", type=int, help="full size: steps (default 4)")
    parser.add_argument("--size", type=int, help="full size: width and height (default 1024)")
    parser.add_argument("--blocks", type=int, help="full size smoke test: N blocks of each kind (NOT full size)")
    parser.add_argument("--variants", help="comma-separated: only these of the families' variants")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = setup_arg_parser()
    args = parser.parse_args(argv)
    dtypes = tuple(args.dtypes.split(",")) if args.dtypes else (("bfloat16",) if args.fullsize else DTYPES)
    if any(d not in DTYPES for d in dtypes):
        parser.error(f"--dtypes: expected a comma-separated list of {', '.join(DTYPES)}")
    overrides = {k: v for k, v in (("steps", args.steps), ("width", args.size), ("height", args.size),
                                   ("blocks", args.blocks)) if v is not None}  # fmt: skip
    if overrides and not args.fullsize:
        parser.error("--steps, --size and --blocks: only with --fullsize (the embedded models' settings are fixed)")
    only = tuple(v.strip() for v in args.variants.split(",")) if args.variants else None
    known = fullsize_variants() if args.fullsize else embedded_variants()
    if only and not set(only) <= set(known):
        parser.error(f"--variants: expected a comma-separated list of {', '.join(known)}, got {args.variants!r}")
    os.environ.setdefault("TQDM_DISABLE", "1")
    import teacache  # noqa: F401  (OpenBLAS before MLX)
    from teacache.io import write_json
    from teacache.provenance import collect, hardware_slug

    result = run_numbers(fullsize=args.fullsize, dtypes=dtypes, order=args.order, overrides=overrides, only=only)
    write_json(args.out, {**result, "provenance": collect(hardware=hardware_slug())})
    return 0
