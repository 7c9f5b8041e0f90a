"""``teacache-bench fullsize``: what TeaCache costs and gains at real size, on full-size random-weight models.

Each ``random-<variant>`` is mflux's own transformer at its real config with weights drawn from a seed
(``teacache.models.fullsize``), so the figures are those of the real architecture on this hardware; the
images mean nothing. Per model, after warm-up (the first GPU steps JIT-compile), in one process,
paired and interleaved (the order reverses every repeat), ``--repeats`` times: vanilla; the proxy with
every step computed (``proxy-all``: signal, decision and host read-back each step, nothing skipped;
its cost is ``proxy_overhead_pct``); optionally threshold 0 (``fast-path``); and the gate at thresholds
chosen to skip about ``--skip-fractions`` of the steps. Random weights have no calibration, so the gate
accumulates the raw signal (identity rescale, unless ``--coefficients packaged``) and each threshold is
found by replaying the signal of the proxy-all run through the gate (``teacache.gate.replay``); the
skipped count in the table is the one the run took. Times are the denoising loop (callbacks
before_loop -> after_loop, ``mx.eval`` each step); speedups are medians over repeats of
vanilla / arm of the same repeat, with min and max; ideal is N / (N - skipped).

Writes ``OUT/summary.csv`` (one row per model, quantization and arm), ``OUT/runs.csv`` (one row per
generation) and ``OUT/provenance.json``, merged with what OUT already holds and rewritten after each
model, so an interrupted campaign keeps the models it finished. Default OUT:
``results/<hardware>/fullsize``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import statistics
import sys
import time
import traceback
import warnings
from pathlib import Path

import pandas as pd

from calib.arguments import CommandParser, check_out_dir, path_argument

PROJECT_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_MODELS = "random-flux1-dev,random-flux2-klein-base-4b,random-qwen-image,random-z-image"
PROMPT = "a red apple on a wooden table in soft morning light"
SEED = 3
WARMUP_STEPS = 3  # the JIT sees every shape in a few steps; the full-length warm-ups follow
PROXY_ALL_THRESHOLD = 1.0  # any positive value: with skip_first_n_steps = steps nothing is skipped
SUMMARY_COLUMNS = (
    "family", "model", "variant", "params_b", "dtype", "quantize", "resolution", "steps", "guidance", "branches",
    "arm", "threshold", "skipped", "predicted_skipped", "speedup", "speedup_min", "speedup_max", "ideal",
    "ratio_to_ideal", "vanilla_ms_per_step", "vanilla_ms_per_step_min", "vanilla_ms_per_step_max",
    "arm_ms_per_step", "proxy_overhead_pct", "proxy_overhead_pct_min", "proxy_overhead_pct_max",
    "peak_memory_gib", "vanilla_peak_memory_gib", "cache_memory_mib", "noop_exact", "max_abs_diff", "repeats",
    "full_size", "rescale", "tag", "hardware",
)  # fmt: skip
CONFIG_KEY = ("model", "quantize", "resolution", "steps", "tag")


def setup_arg_parser() -> argparse.ArgumentParser:
    parser = CommandParser(prog="teacache-bench fullsize", description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default=DEFAULT_MODELS, help="comma-separated random-<variant> names")
    parser.add_argument("--size", type=int, default=None, help="image side in pixels; default: each variant's")
    parser.add_argument("--steps", type=int, default=None, help="default: each variant's")
    parser.add_argument("--guidance", type=float, default=None, help="default: each variant's usual guidance")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--skip-fractions", default="0.35,0.7", help="targets for the gate rows, of the steps")
    parser.add_argument("--thresholds", default=None, help="explicit thresholds instead of --skip-fractions")
    parser.add_argument("--coefficients", choices=("identity", "packaged"), default="identity")
    parser.add_argument("--fast-path", action="store_true", help="add threshold-0 rows (the no-proxy fast path)")
    parser.add_argument("--quantize", type=int, choices=(4, 8), default=None)
    parser.add_argument(
        "--blocks", type=int, default=None, help="smoke tests: build N blocks of each kind (NOT full size)"
    )
    parser.add_argument("--seed", type=int, default=0, help="the weights' seed")
    parser.add_argument("--budget-s", type=float, default=None, help="start no repeat that would end after this")
    parser.add_argument("--tag", default="", help="a label kept in every row (part of the merge key)")
    parser.add_argument("--out", type=path_argument, default=None, help="default: results/<hardware>/fullsize")
    return parser


def parse_fractions(text: str) -> list[float]:
    values = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        try:
            value = float(part)
        except ValueError:
            raise ValueError(f"--skip-fractions: {part!r} is not a number") from None
        if not 0 < value < 1:
            raise ValueError(f"--skip-fractions: {part} is outside (0, 1); fractions of the steps to skip")
        values.append(value)
    if not values:
        raise ValueError("--skip-fractions: expected at least one fraction, like 0.35,0.7")
    return sorted(set(values))


def validate(args) -> dict:
    """Every argument checked before anything loads; a ValueError names the argument."""
    from bench.common import parse_thresholds
    from teacache.models.fullsize import parse_random_name

    try:
        variants = [parse_random_name(name.strip()) for name in args.models.split(",") if name.strip()]
    except ValueError as exc:
        raise ValueError(f"--models: {str(exc).removeprefix('model: ')}") from None
    if not variants:
        raise ValueError("--models: expected at least one random-<variant> name")
    if args.size is not None and (args.size < 16 or args.size % 16):
        raise ValueError(f"--size: expected a positive multiple of 16, got {args.size}")
    if args.steps is not None and args.steps < 3:
        raise ValueError(
            f"--steps: expected at least 3 (the first and last steps are always computed), got {args.steps}"
        )
    if args.repeats < 1:
        raise ValueError(f"--repeats: expected at least 1, got {args.repeats}")
    if args.blocks is not None and args.blocks < 1:
        raise ValueError(f"--blocks: expected at least 1, got {args.blocks}")
    if args.blocks is not None and args.out is None:
        raise ValueError("--out: --blocks builds models that are not full size; name a folder outside results/")
    if args.out is not None:
        check_out_dir(args.out)
    if args.guidance is not None and (math.isnan(args.guidance) or args.guidance < 0):
        raise ValueError(f"--guidance: expected a number >= 0, got {args.guidance}")
    if args.budget_s is not None and not args.budget_s > 0:
        raise ValueError(f"--budget-s: expected seconds > 0, got {args.budget_s}")
    thresholds = None if args.thresholds is None else [t for t in parse_thresholds(args.thresholds) if t > 0]
    if thresholds == []:
        raise ValueError("--thresholds: expected at least one threshold > 0 (use --fast-path for threshold 0)")
    fractions = parse_fractions(args.skip_fractions) if thresholds is None else []
    return {"variants": variants, "thresholds": thresholds, "fractions": fractions}


# --- measuring ----------------------------------------------------------------------------------


class Session:
    """One model under measurement: a generation per call, timed, with its final latents."""

    def __init__(self, model, steps: int, size: int, guidance: float) -> None:
        self.model, self.steps, self.size, self.guidance = model, steps, size, guidance

    def run(self, settings: dict | None, steps: int | None = None) -> dict:
        """One generation; ``settings`` are apply_teacache's arguments (None: vanilla)."""
        import mlx.core as mx

        from calib.generation import generate
        from teacache import apply_teacache

        steps = steps or self.steps
        kwargs = {"prompt": PROMPT, "seed": SEED, "steps": steps, "width": self.size, "height": self.size}
        mx.synchronize()
        mx.reset_peak_memory()
        if settings is None:
            out = generate(self.model, guidance=self.guidance, **kwargs)
            extra = {"skipped": 0, "cache_bytes": 0, "branches": None, "log": []}
        else:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                with apply_teacache(self.model, **settings) as handle:
                    out = generate(self.model, guidance=self.guidance, **kwargs)
                    ctl = handle.controller
                    cached = list(ctl.residuals.values()) + ([ctl.anchor] if ctl.anchor is not None else [])
                    extra = {
                        "skipped": handle.stats.skipped,
                        "cache_bytes": sum(a.nbytes for a in cached),
                        "branches": len(ctl.residuals) or None,
                        "log": list(handle.stats.log),
                    }
        mx.synchronize()
        peak = mx.get_peak_memory()
        return {"loop_s": out.loop_s, "total_s": out.total_s, "latents": out.latents, "peak_bytes": peak, **extra}


def choose_threshold(xs: list[float | None], steps: int, target: int, rescale) -> tuple[float, int]:
    """The smallest threshold (4 significant digits) whose replayed schedule skips >= ``target`` steps
    (else the one skipping most), and its predicted skip count."""
    import numpy as np

    from teacache.gate import GateConfig, replay

    def predicted(threshold: float) -> int:
        log = replay(GateConfig(threshold, rescale), xs, num_steps=steps)
        return sum(not d.compute for d in log)

    values = [rescale(x) for x in xs if x is not None and math.isfinite(x)]
    positive = [v for v in values if v > 0]
    if not positive:
        return PROXY_ALL_THRESHOLD, 0
    best = (0, PROXY_ALL_THRESHOLD)
    for threshold in np.geomspace(min(positive) / 4, sum(positive) * 1.5, 800):
        threshold = float(f"{threshold:.4g}")
        k = predicted(threshold)
        if k >= target:
            return threshold, k
        if k > best[0]:
            best = (k, threshold)
    return best[1], best[0]


def _max_abs(a, b) -> float:
    import mlx.core as mx

    return float(mx.max(mx.abs(a.astype(mx.float32) - b.astype(mx.float32))).item())


def _exact(a, b) -> bool:
    import mlx.core as mx

    return a.shape == b.shape and a.dtype == b.dtype and bool(mx.array_equal(a, b).item())


def measure_model(variant: str, args, plan: dict, deadline: float | None, say) -> tuple[list[dict], list[dict], dict]:
    """Build, warm up and measure one model; returns (summary rows, run rows, provenance)."""
    import mlx.core as mx
    from mflux.models.common.config.model_config import ModelConfig

    from teacache import variants
    from teacache.models import fullsize
    from teacache.rescale import RescaleFunction

    spec = variants.get(variant)
    label = fullsize.model_label(variant, args.blocks)
    guidance = spec.generation.guidance if args.guidance is None else args.guidance
    steps = args.steps or spec.generation.steps
    size = args.size or spec.generation.width
    params = fullsize.parameter_count(fullsize.full_transformer(variant, args.blocks))
    start = time.perf_counter()
    model = fullsize.build_random(variant, seed=args.seed, quantize=args.quantize, blocks=args.blocks)
    build_s = time.perf_counter() - start
    say(f"{label}: {params / 1e9:.2f} B params, built in {build_s:.1f} s ({fullsize.MEANINGLESS})")
    if args.coefficients == "identity":
        rescale = RescaleFunction((1.0, 0.0), provenance={"source": "identity: random weights have no calibration"})
        rescale_name = "identity"
    else:
        from teacache.coefficients import load_packaged

        rescale, rescale_name = load_packaged(variant), "packaged"
    session = Session(model, steps, size, guidance)
    proxy_all = {"rel_l1_thresh": PROXY_ALL_THRESHOLD, "coefficients": rescale, "skip_first_n_steps": steps}
    warmup = {}
    t = time.perf_counter()
    session.run(None, steps=min(WARMUP_STEPS, steps))
    warmup["vanilla_short_s"] = time.perf_counter() - t
    trace = session.run(proxy_all)  # also the eager path's full-length warm-up
    warmup["proxy_all_s"] = trace["total_s"]
    warmup["vanilla_s"] = session.run(None)["total_s"]  # a compiled run after the eager one
    xs = [d.x for d in trace["log"]]
    if plan["thresholds"] is not None:
        chosen = [(t, None) for t in plan["thresholds"]]
    else:
        chosen = [choose_threshold(xs, steps, round(f * steps), rescale) for f in plan["fractions"]]
        chosen = list(dict.fromkeys(chosen))  # two targets can land on one threshold
    arms = [("proxy-all", None, proxy_all, None)]
    if args.fast_path:
        arms.append(("fast-path", 0.0, {"rel_l1_thresh": 0.0}, None))
    for threshold, predicted in chosen:
        arms.append(("gate", threshold, {"rel_l1_thresh": threshold, "coefficients": rescale}, predicted))
    if len(arms) > 1 and arms[-1][0] == "gate":
        t = time.perf_counter()
        session.run(arms[-1][2], steps=min(WARMUP_STEPS + 2, steps))  # the skip path's kernels
        warmup["gate_short_s"] = time.perf_counter() - t
    say(f"  warm-up {', '.join(f'{k} {v:.1f} s' for k, v in warmup.items())}; thresholds "
        f"{', '.join(f'{t:g} (predicted {k} skipped)' for t, k in chosen)}")  # fmt: skip

    names = ["vanilla"] + [_arm_key(a) for a in arms]
    settings = {"vanilla": None, **{_arm_key(a): a[2] for a in arms}}
    results: dict[str, list[dict]] = {name: [] for name in names}
    run_rows = []
    repeat_s = None
    for repeat in range(args.repeats):
        if deadline is not None and repeat > 0 and time.perf_counter() + repeat_s > deadline:
            say(f"  budget: stopping after {repeat} repeat(s)")
            break
        t = time.perf_counter()
        order = names if repeat % 2 == 0 else names[::-1]
        for name in order:
            result = session.run(settings[name])
            results[name].append(result)
            run_rows.append({
                "model": label, "quantize": args.quantize, "resolution": f"{size}x{size}", "steps": steps,
                "tag": args.tag, "repeat": repeat, "position": order.index(name), "arm": name,
                "loop_s": result["loop_s"], "total_s": result["total_s"], "skipped": result["skipped"],
                "peak_memory_gib": result["peak_bytes"] / 2**30, "cache_memory_mib": result["cache_bytes"] / 2**20,
            })  # fmt: skip
        repeat_s = time.perf_counter() - t
        say(f"  repeat {repeat + 1}/{args.repeats} in {repeat_s:.1f} s")
    done = len(results["vanilla"])
    if done == 0:
        return [], run_rows, {}
    for name in names[1:]:  # exactness against the vanilla of the same repeat
        for result, vanilla in zip(results[name], results["vanilla"], strict=True):
            result["exact"] = _exact(result["latents"], vanilla["latents"])
            result["max_abs"] = _max_abs(result["latents"], vanilla["latents"])
            del result["latents"]
    for vanilla in results["vanilla"]:
        del vanilla["latents"]

    vanilla_loops = [r["loop_s"] for r in results["vanilla"]]
    overheads = [100 * (p["loop_s"] / v - 1) for p, v in zip(results["proxy-all"], vanilla_loops, strict=True)]
    branches = results["proxy-all"][0]["branches"]
    common = {
        "family": spec.family, "model": label, "variant": variant, "params_b": round(params / 1e9, 3),
        "dtype": str(ModelConfig.precision).removeprefix("mlx.core."), "quantize": args.quantize,
        "resolution": f"{size}x{size}", "steps": steps, "guidance": guidance, "branches": branches,
        "vanilla_ms_per_step": 1000 * statistics.median(vanilla_loops) / steps,
        "vanilla_ms_per_step_min": 1000 * min(vanilla_loops) / steps,
        "vanilla_ms_per_step_max": 1000 * max(vanilla_loops) / steps,
        "proxy_overhead_pct": statistics.median(overheads), "proxy_overhead_pct_min": min(overheads),
        "proxy_overhead_pct_max": max(overheads),
        "vanilla_peak_memory_gib": max(r["peak_bytes"] for r in results["vanilla"]) / 2**30,
        "repeats": done, "full_size": args.blocks is None, "rescale": rescale_name, "tag": args.tag,
    }  # fmt: skip
    rows = []
    for kind, threshold, _, predicted in arms:
        runs = results[_arm_key((kind, threshold, None, None))]
        ratios = [v / r["loop_s"] for r, v in zip(runs, vanilla_loops, strict=True)]
        skipped = int(statistics.median(r["skipped"] for r in runs))
        ideal = steps / (steps - skipped)
        speedup = statistics.median(ratios)
        rows.append({
            **common, "arm": kind, "threshold": threshold, "skipped": skipped, "predicted_skipped": predicted,
            "speedup": speedup, "speedup_min": min(ratios), "speedup_max": max(ratios), "ideal": ideal,
            "ratio_to_ideal": speedup / ideal,
            "arm_ms_per_step": 1000 * statistics.median(r["loop_s"] for r in runs) / steps,
            "peak_memory_gib": max(r["peak_bytes"] for r in runs) / 2**30,
            "cache_memory_mib": max(r["cache_bytes"] for r in runs) / 2**20,
            "noop_exact": all(r["exact"] for r in runs) if skipped == 0 else None,
            "max_abs_diff": max(r["max_abs"] for r in runs),
        })  # fmt: skip
    provenance = {
        "model": label, "variant": variant, "seed": args.seed, "prompt": PROMPT, "generation_seed": SEED,
        "build_s": build_s, "warmup": warmup, "signal_trace": xs, "skip_fractions": plan["fractions"],
        "thresholds": [{"threshold": t, "predicted_skipped": k} for t, k in chosen], "rescale": rescale.to_dict(),
        "repeats_done": done, "skipped_steps": {name: [d.step for d in runs[0]["log"] if not d.compute]
                                                 for name, runs in results.items() if runs and runs[0]["log"]},
    }  # fmt: skip
    for runs in results.values():
        for r in runs:
            r.pop("log", None)
    del session, model
    mx.clear_cache()
    return rows, run_rows, provenance


def _arm_key(arm) -> str:
    kind, threshold = arm[0], arm[1]
    return kind if kind != "gate" else f"gate {threshold:g}"


# --- output -------------------------------------------------------------------------------------


def code_digest() -> str:
    """sha256 of the Python sources of teacache, bench and calib as imported: which tree measured, also
    where no git checkout travels with the code."""
    import calib
    import teacache

    digest = hashlib.sha256()
    for package in (teacache, sys.modules["bench"], calib):
        root = Path(package.__file__).parent
        for path in sorted(root.rglob("*.py")):
            digest.update(str(path.relative_to(root.parent)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def _key_text(value) -> str:
    """One spelling per key value, whether it comes from this run or back from a CSV (4, 4.0, "" or NaN)."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def config_keys(frame: pd.DataFrame) -> list[tuple[str, ...]]:
    return [tuple(_key_text(v) for v in row) for row in frame[list(CONFIG_KEY)].itertuples(index=False, name=None)]


def _merge(path: Path, new: pd.DataFrame, columns) -> pd.DataFrame:
    """OUT's rows with those of the configurations in ``new`` replaced by ``new``'s."""
    if path.exists():
        old = pd.read_csv(path, keep_default_na=False, na_values=[""], dtype={"tag": str})
        replaced = set(config_keys(new))
        keep = [key not in replaced for key in config_keys(old)]
        new = pd.concat([old[keep], new], ignore_index=True)
    return new.reindex(columns=list(columns) or list(new.columns))


def checkout_of_this_code(git: dict) -> dict:
    """The git fields, when the sources are the root of their checkout; else nulls (code copied into a
    folder of another checkout: that checkout's commit says nothing about this code; code_sha256 does)."""
    import subprocess

    try:
        top = subprocess.run(
            ["git", "rev-parse", "--show-toplevel"], cwd=PROJECT_ROOT, capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return {"commit": None, "dirty": None}
    return git if Path(top).resolve() == PROJECT_ROOT.resolve() else {"commit": None, "dirty": None}


def write_outputs(out: Path, rows: list[dict], run_rows: list[dict], models: dict[str, dict]) -> None:
    """Merge into OUT's files: rows of the same (model, quantize, resolution, steps, tag) are replaced."""
    from teacache.io import write_json, write_text

    summary = _merge(out / "summary.csv", pd.DataFrame(rows, columns=SUMMARY_COLUMNS), SUMMARY_COLUMNS)
    runs = _merge(out / "runs.csv", pd.DataFrame(run_rows), ())
    write_text(out / "summary.csv", summary.to_csv(index=False, float_format="%.6g"))
    write_text(out / "runs.csv", runs.to_csv(index=False, float_format="%.6g"))
    from teacache.io import FORMAT_VERSION
    from teacache.models.fullsize import MEANINGLESS

    existing = {}
    if (out / "provenance.json").exists():
        existing = json.loads((out / "provenance.json").read_text(encoding="utf-8")).get("models", {})
    existing.update(models)
    write_json(out / "provenance.json", {"format_version": FORMAT_VERSION, "note": MEANINGLESS, "models": existing})


def main(argv: list[str] | None = None) -> int:
    args = setup_arg_parser().parse_args(argv)
    try:
        plan = validate(args)
    except ValueError as exc:
        print(f"teacache-bench fullsize: {exc}", file=sys.stderr)
        return 2
    from calib.interrupts import interruptions
    from teacache import provenance as prov
    from teacache._compat import check_mflux_version
    from teacache._platform import use_float32_on_cpu
    from teacache.models.fullsize import MEANINGLESS

    check_mflux_version()
    use_float32_on_cpu()
    hardware = prov.hardware_slug()
    out = args.out or PROJECT_ROOT / "results" / hardware / "fullsize"
    try:
        check_out_dir(out)
    except ValueError as exc:
        print(f"teacache-bench fullsize: {exc}", file=sys.stderr)
        return 2
    deadline = None if args.budget_s is None else time.perf_counter() + args.budget_s
    finished: list[str] = []
    failed: list[str] = []
    stopped = interruptions()  # Ctrl-C, also as mflux's StopImageGenerationException inside its loop

    def say(line: str) -> None:
        print(line, flush=True)

    setting = f"{args.size or 'default'} px, {args.steps or 'default'} steps"
    say(f"teacache-bench fullsize on {hardware}: {setting}, {args.repeats} interleaved repeats after warm-up; "
        f"{MEANINGLESS}")  # fmt: skip
    try:
        for variant in plan["variants"]:
            if deadline is not None and time.perf_counter() > deadline:
                say(f"budget: {variant} not started")
                continue
            try:
                rows, run_rows, model_prov = measure_model(variant, args, plan, deadline, say)
            except stopped:
                raise
            except Exception:  # noqa: BLE001 - one family's failure must not lose the others' measurements
                traceback.print_exc()
                say(f"{variant}: failed (traceback above); nothing written for it")
                failed.append(variant)
                continue
            if not rows:
                say(f"{variant}: no repeat finished inside the budget; nothing written")
                continue
            for row in rows:
                row["hardware"] = hardware
            key = "|".join(_key_text(rows[0][k]) for k in CONFIG_KEY)
            provenance = prov.collect(argv if argv is None else ["teacache-bench", "fullsize", *argv])
            provenance.update(
                git=checkout_of_this_code(provenance["git"]),
                code_sha256=code_digest(),
                timing="denoising loop: before_loop -> after_loop callbacks, mx.eval per step",
                cache_memory="the cached residuals of every branch plus the anchor (previous modulated input)",
                **model_prov,
            )
            write_outputs(out, rows, run_rows, {key: provenance})
            finished.append(variant)
            for row in rows:
                say(_row_line(row))
            say(f"  wrote {out / 'summary.csv'}")
    except stopped:
        saved = ", ".join(finished) or "no model"
        print(f"\ninterrupted: {out / 'summary.csv'} holds the rows of {saved}", file=sys.stderr)
        return 130
    return 1 if failed else 0


def _row_line(row: dict) -> str:
    threshold = "" if row["threshold"] is None or pd.isna(row["threshold"]) else f" {row['threshold']:g}"
    exact = "" if row["noop_exact"] is None else f", bit-exact {row['noop_exact']}"
    return (
        f"  {row['arm']}{threshold}: {row['skipped']}/{row['steps']} skipped, {row['speedup']:.3f}x "
        f"[{row['speedup_min']:.3f}, {row['speedup_max']:.3f}] of ideal {row['ideal']:.3f}x "
        f"(ratio {row['ratio_to_ideal']:.3f}), vanilla {row['vanilla_ms_per_step']:.1f} ms/step, proxy "
        f"{row['proxy_overhead_pct']:+.2f}%, peak {row['peak_memory_gib']:.1f} GiB, cache "
        f"{row['cache_memory_mib']:.1f} MiB{exact}"
    )


if __name__ == "__main__":
    sys.exit(main())
