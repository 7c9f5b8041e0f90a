"""``teacache-bench fullsize``: what TeaCache costs and gains at real size, on full-size random-weight models.

Each ``random-<variant>`` is mflux's own transformer at its real config with weights drawn from a seed
(``teacache.models.fullsize``), so the figures are those of the real architecture on this hardware; the
images mean nothing. Per model, after warm-up (the first GPU steps JIT-compile), in one process, paired and
interleaved (``calib.run.interleave``: the order rotates every repeat), ``--repeats`` times: vanilla; the
proxy with every step computed (``proxy-all``: signal, decision and host read-back each step, nothing
skipped; its cost is ``proxy_overhead_pct``); optionally threshold 0 (``fast-path``); and the gate at
thresholds chosen to skip about ``--skip-fractions`` of the steps. Random weights have no calibration, so
the gate accumulates the raw signal (identity rescale, unless ``--coefficients packaged``) and each
threshold is found by replaying the signal of the proxy-all run through the gate (``teacache.gate.replay``);
the skipped count in the table is the one the run took. Times are the denoising loop (callbacks before_loop
-> after_loop, ``mx.eval`` each step); speedups are medians over repeats of vanilla / arm of the same
repeat, with min and max; ideal is N / (N - skipped).

Writes ``OUT/runs.csv`` (the raw table: one row per generation, at full precision, each with its model's
facts and its exactness against the vanilla run of its repeat), ``OUT/summary.csv`` (one row per model,
quantization and arm, rebuilt from runs.csv by :func:`summarize`) and ``OUT/provenance.json``, after each
model: a configuration measured again replaces its runs, others are kept, so an interrupted campaign keeps
the models it finished. Default OUT: ``results/<hardware>/fullsize``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import statistics
import subprocess
import sys
import time
import traceback
import warnings
from dataclasses import dataclass
from pathlib import Path

import mlx.core as mx
import numpy as np
import pandas as pd

import calib
import teacache
from bench.common import parse_numbers, parse_thresholds
from bench.peer import arm as peer
from bench.peer import gate as peer_gate
from calib.run.arguments import CommandParser, Writes, check_guidance, check_out_dir, path_argument
from calib.run.generation import generate
from calib.run.interleave import Turn, interleave
from calib.run.interrupts import interruptions
from calib.run.progress import append_log
from teacache import apply_teacache, variants
from teacache import provenance as prov
from teacache._compat import check_mflux_version
from teacache._platform import use_float32_on_cpu
from teacache.coefficients import load_packaged
from teacache.gate import GateConfig, replay
from teacache.io import FORMAT_VERSION, write_json, write_text
from teacache.models import fullsize
from teacache.models.fullsize import MEANINGLESS, parse_random_name
from teacache.rescale import RescaleFunction

PROJECT_ROOT = Path(__file__).resolve().parents[2]
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
    "full_size", "rescale", "tag", "hardware", "note",
)  # fmt: skip
CONFIG_KEY = ("model", "quantize", "resolution", "steps", "tag")


# runs.csv: one row per generation (or per arm that could not run: note); the columns before "kind" are
# those of campaigns measured before runs.csv held every field the summary is derived from
def _is_fullsize_provenance(path: Path) -> bool:
    try:
        return json.loads(path.read_text(encoding="utf-8")).get("note") == MEANINGLESS
    except (OSError, ValueError, AttributeError):
        return False


# Its tables, merged run after run, in a folder of its own (its provenance.json marks it: RUN.md and logs beside it
# are kept); results/<hardware>/fullsize is what it exists to regenerate.
LOG = "progress.log"  # every line it prints, timestamped (calib.run.progress.append_log)
WRITES = Writes("teacache-bench fullsize", names=("runs.csv", "summary.csv", "provenance.json", LOG),
                marker="provenance.json", is_own=_is_fullsize_provenance, regenerates=("results",))  # fmt: skip
RUN_COLUMNS = (
    "model", "quantize", "resolution", "steps", "tag", "repeat", "position", "arm", "loop_s", "total_s", "skipped",
    "peak_memory_gib", "cache_memory_mib", "kind", "threshold", "predicted_skipped", "exact", "max_abs_diff",
    "branches", "family", "variant", "params_b", "dtype", "guidance", "full_size", "rescale", "hardware", "note",
)  # fmt: skip


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
    parser.add_argument(
        "--peer",
        choices=("mlx-teacache",),
        default=None,
        help="also time mlx-teacache's apply_teacache (the 'peer' extra) in the same loop: with every step computed "
        "(mlx-teacache-all) and at each threshold with the same coefficients; a model it cannot run gets a row "
        "saying why",
    )
    parser.add_argument("--out", type=path_argument, default=None, help="default: results/<hardware>/fullsize")
    return parser


def parse_fractions(text: str) -> list[float]:
    """'0.35,0.7': fractions of the steps to skip, each in (0, 1); returned sorted, once each."""
    values = []
    for part, value in parse_numbers(text, "--skip-fractions", "fraction", "0.35,0.7"):
        if not 0 < value < 1:
            raise ValueError(f"--skip-fractions: {part} is outside (0, 1); fractions of the steps to skip")
        values.append(value)
    return sorted(set(values))


def validate(args) -> dict:
    """Every argument checked before anything loads; a ValueError names the argument."""
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
        check_out_dir(args.out, writes=WRITES)
    if args.guidance is not None:
        check_guidance(args.guidance)
    if args.budget_s is not None and not args.budget_s > 0:
        raise ValueError(f"--budget-s: expected seconds > 0, got {args.budget_s}")
    thresholds = None if args.thresholds is None else [t for t in parse_thresholds(args.thresholds) if t > 0]
    if thresholds == []:
        raise ValueError("--thresholds: expected at least one threshold > 0 (use --fast-path for threshold 0)")
    fractions = parse_fractions(args.skip_fractions) if thresholds is None else []
    if args.peer is not None:
        if peer.version() is None:
            raise ValueError(f"--peer: {peer.PEER} is not installed (the 'peer' extra)")
        refused = [t for t in thresholds or [] if peer.refusal(threshold=t)]
        if refused:
            raise ValueError(f"--peer: {peer.refusal(threshold=refused[0])}")
    return {"variants": variants, "thresholds": thresholds, "fractions": fractions}


# --- measuring ----------------------------------------------------------------------------------


class Session:
    """One model under measurement: a generation per call, timed, with its final latents."""

    def __init__(self, model, steps: int, size: int, guidance: float) -> None:
        self.model, self.steps, self.size, self.guidance = model, steps, size, guidance

    def run(self, settings: dict | None, steps: int | None = None) -> dict:
        """One generation; ``settings`` are apply_teacache's arguments (None: vanilla)."""
        if isinstance(settings, peer.PeerArm):
            return peer.run_in_session(self, settings, PROMPT, SEED, steps)
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
                    extra = {
                        "skipped": handle.stats.skipped,
                        "cache_bytes": handle.cache_bytes,
                        "branches": len(handle.cached_branches) or None,
                        "log": list(handle.stats.log),
                    }
        mx.synchronize()
        peak = mx.get_peak_memory()
        return {"loop_s": out.loop_s, "total_s": out.total_s, "latents": out.latents, "peak_bytes": peak, **extra}


def choose_threshold(xs: list[float | None], steps: int, target: int, rescale) -> tuple[float, int]:
    """The smallest threshold (4 significant digits) whose replayed schedule skips >= ``target`` steps
    (else the one skipping most), and its predicted skip count."""

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
    return float(mx.max(mx.abs(a.astype(mx.float32) - b.astype(mx.float32))).item())


def _exact(a, b) -> bool:
    return a.shape == b.shape and a.dtype == b.dtype and bool(mx.array_equal(a, b).item())


@dataclass
class Prepared:
    """One model built and warmed up, with the arms to time and the facts every row of it carries."""

    session: Session
    arms: list  # (kind, threshold, apply_teacache settings or a peer arm, predicted skipped count)
    facts: dict  # the runs.csv columns shared by every row of this model
    rescale: RescaleFunction
    chosen: list  # (threshold, predicted skipped count)
    signal: list  # the proxy-all warm-up run's signal per step
    warmup: dict  # seconds of each warm-up run
    build_s: float
    peer_plan: dict | None


def prepare(variant: str, args, plan: dict, say) -> Prepared:
    """Build the model, warm every path up and choose the thresholds (replaying the warm-up run's signal)."""
    # heavy (mflux): loaded after the arguments are checked
    from mflux.models.common.config.model_config import ModelConfig

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
    else:
        rescale = load_packaged(variant)
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
    peer_plan = plan_peer(args, model, rescale, chosen, session, warmup) if args.peer else None
    if peer_plan is not None:
        arms += peer_plan["arms"]
    if len(arms) > 1 and arms[-1][0] == "gate":
        t = time.perf_counter()
        session.run(arms[-1][2], steps=min(WARMUP_STEPS + 2, steps))  # the skip path's kernels
        warmup["gate_short_s"] = time.perf_counter() - t
    say(f"  warm-up {', '.join(f'{k} {v:.1f} s' for k, v in warmup.items())}; thresholds "
        f"{', '.join(f'{t:g} (predicted {k} skipped)' for t, k in chosen)}")  # fmt: skip
    facts = {
        "model": label, "quantize": args.quantize, "resolution": f"{size}x{size}", "steps": steps, "tag": args.tag,
        "family": spec.family, "variant": variant, "params_b": round(params / 1e9, 3),
        "dtype": str(ModelConfig.precision).removeprefix("mlx.core."), "guidance": guidance,
        "full_size": args.blocks is None, "rescale": args.coefficients,
    }  # fmt: skip
    return Prepared(session, arms, facts, rescale, chosen, xs, warmup, build_s, peer_plan)


def timed_runs(session, settings: dict, repeats: int, deadline: float | None, say) -> dict[str, list[dict]]:
    """Every arm of ``settings`` (``{name: settings}``, vanilla first) ``repeats`` times, interleaved.

    Returns each arm's results in repeat order, each with its repeat and position; stops early, after a
    whole repeat, when another repeat would pass ``deadline``.
    """
    names = list(settings)

    def run(turn: Turn) -> dict:
        return {**session.run(settings[names[turn.arm]]), "repeat": turn.repeat, "position": turn.position}

    repeat_start = time.perf_counter()

    def after_repeat(done: int) -> bool:
        nonlocal repeat_start
        repeat_s = time.perf_counter() - repeat_start
        say(f"  repeat {done}/{repeats} in {repeat_s:.1f} s")
        if done < repeats and deadline is not None and time.perf_counter() + repeat_s > deadline:
            say(f"  budget: stopping after {done} repeat(s)")
            return False
        repeat_start = time.perf_counter()
        return True

    return dict(zip(names, interleave(run, len(names), repeats, after_repeat), strict=True))


def run_rows(prepared: Prepared, results: dict[str, list[dict]]) -> list[dict]:
    """runs.csv's rows of one model: one per generation, each against the vanilla run of its repeat, and one
    per arm that could not run here (its ``note``)."""
    kinds = {"vanilla": ("vanilla", None, None), **{_arm_key(a): (a[0], a[1], a[3]) for a in prepared.arms}}
    rows = []
    for name, runs in results.items():
        kind, threshold, predicted = kinds[name]
        for result, vanilla in zip(runs, results["vanilla"], strict=True):
            exact = max_abs = None
            if name != "vanilla":  # against the vanilla run of the same repeat
                exact = _exact(result["latents"], vanilla["latents"])
                max_abs = _max_abs(result["latents"], vanilla["latents"])
            rows.append({
                **prepared.facts, "repeat": result["repeat"], "position": result["position"], "arm": name,
                "kind": kind, "threshold": threshold, "predicted_skipped": predicted, "loop_s": result["loop_s"],
                "total_s": result["total_s"], "skipped": result["skipped"],
                "peak_memory_gib": result["peak_bytes"] / 2**30, "cache_memory_mib": result["cache_bytes"] / 2**20,
                "branches": result["branches"], "exact": exact, "max_abs_diff": max_abs,
            })  # fmt: skip
    refused = prepared.peer_plan["refused_rows"] if prepared.peer_plan is not None else []
    rows += [{**prepared.facts, "arm": row["arm"], "kind": row["arm"], **row} for row in refused]
    return sorted(rows, key=lambda r: (r.get("repeat", math.inf), r.get("position", 0)))


def measure_model(variant: str, args, plan: dict, deadline: float | None, say) -> tuple[list[dict], dict]:
    """Build, warm up and measure one model; returns (its runs.csv rows, provenance)."""
    prepared = prepare(variant, args, plan, say)
    settings = {"vanilla": None, **{_arm_key(a): a[2] for a in prepared.arms}}
    results = timed_runs(prepared.session, settings, args.repeats, deadline, say)
    rows = run_rows(prepared, results)
    provenance = {
        "model": prepared.facts["model"], "variant": variant, "seed": args.seed, "prompt": PROMPT,
        "generation_seed": SEED, "build_s": prepared.build_s, "warmup": prepared.warmup,
        "signal_trace": prepared.signal, "skip_fractions": plan["fractions"],
        "thresholds": [{"threshold": t, "predicted_skipped": k} for t, k in prepared.chosen],
        "rescale": prepared.rescale.to_dict(), "repeats_done": len(results["vanilla"]),
        "skipped_steps": {name: [d.step for d in runs[0]["log"] if not d.compute]
                          for name, runs in results.items() if runs and runs[0]["log"]},
    }  # fmt: skip
    if prepared.peer_plan is not None:
        provenance["mlx_teacache"] = peer_record(prepared.peer_plan, results)
    del prepared, results
    mx.clear_cache()
    return rows, provenance


# --- the summary, derived from runs.csv -----------------------------------------------------------


def summarize(runs: pd.DataFrame) -> pd.DataFrame:
    """summary.csv from runs.csv: per configuration, one row per arm (in the order of its first repeat).

    Speedups are medians over repeats of vanilla / arm of the same repeat, with min and max; ideal is
    N / (N - skipped); the proxy's overhead is proxy-all against vanilla of the same repeat.
    """
    runs = runs.assign(_key=config_keys(runs))
    rows = [row for _key, config in runs.groupby("_key", sort=False) for row in _summary_rows(config)]
    return pd.DataFrame(rows, columns=SUMMARY_COLUMNS)


def _summary_rows(config: pd.DataFrame) -> list[dict]:
    timed = config[config["note"].isna()] if "note" in config.columns else config
    refused = config[config["note"].notna()] if "note" in config.columns else config[:0]
    first = timed.iloc[0]
    steps = int(first["steps"])
    by_arm = {name: runs.sort_values("repeat") for name, runs in timed.groupby("arm", sort=False)}
    order = timed[timed["repeat"] == timed["repeat"].min()].sort_values("position")["arm"]
    vanilla_loops = list(by_arm["vanilla"]["loop_s"])
    proxy = by_arm["proxy-all"]
    overheads = [100 * (p / v - 1) for p, v in zip(proxy["loop_s"], vanilla_loops, strict=True)]
    common = {
        **{k: first[k] for k in ("family", "model", "variant", "params_b", "dtype", "quantize", "resolution",
                                 "steps", "guidance", "tag", "hardware")},
        "branches": proxy["branches"].iloc[0],
        "vanilla_ms_per_step": 1000 * statistics.median(vanilla_loops) / steps,
        "vanilla_ms_per_step_min": 1000 * min(vanilla_loops) / steps,
        "vanilla_ms_per_step_max": 1000 * max(vanilla_loops) / steps,
        "proxy_overhead_pct": statistics.median(overheads), "proxy_overhead_pct_min": min(overheads),
        "proxy_overhead_pct_max": max(overheads),
        "vanilla_peak_memory_gib": max(by_arm["vanilla"]["peak_memory_gib"]),
        "repeats": len(vanilla_loops), "full_size": bool(first["full_size"]), "rescale": first["rescale"],
    }  # fmt: skip
    rows = []
    for name in order:
        if name == "vanilla":
            continue
        runs = by_arm[name]
        loops = list(runs["loop_s"])
        ratios = [v / r for r, v in zip(loops, vanilla_loops, strict=True)]
        skipped = int(statistics.median(runs["skipped"]))
        ideal = steps / (steps - skipped)
        speedup = statistics.median(ratios)
        rows.append({
            **common, "arm": runs["kind"].iloc[0], "threshold": runs["threshold"].iloc[0], "skipped": skipped,
            "predicted_skipped": runs["predicted_skipped"].iloc[0], "speedup": speedup, "speedup_min": min(ratios),
            "speedup_max": max(ratios), "ideal": ideal, "ratio_to_ideal": speedup / ideal,
            "arm_ms_per_step": 1000 * statistics.median(loops) / steps,
            "peak_memory_gib": max(runs["peak_memory_gib"]), "cache_memory_mib": max(runs["cache_memory_mib"]),
            "noop_exact": all(_true(v) for v in runs["exact"]) if skipped == 0 else None,
            "max_abs_diff": max(runs["max_abs_diff"]),
        })  # fmt: skip
    rows += [{**common, "arm": r["kind"], "threshold": r["threshold"], "note": r["note"]}
             for r in refused.to_dict("records")]  # fmt: skip
    return rows


def _true(value) -> bool:
    """An ``exact`` cell, from this run (a bool) or read back from runs.csv (a bool or its spelling)."""
    return value is True or value == "True" or (isinstance(value, bool | np.bool_) and bool(value))


def _arm_key(arm) -> str:
    kind, threshold = arm[0], arm[1]
    return f"{kind} {threshold:g}" if kind in ("gate", "mlx-teacache") else kind


def plan_peer(args, model, rescale, chosen, session, warmup: dict) -> dict:
    """mlx-teacache's arms for this model (bench.peer), warmed up; or rows saying why it cannot run here.

    mlx-teacache-all: every gated step computed (its gate, signal and eager predict each step). Then one arm
    per threshold with the same coefficients; its predicted skip count replays its gate (bench.peer.gate) over
    its own signal, read from the mlx-teacache-all run.
    """
    why = peer.refusal(model, rescale)
    if why is not None:
        return {"arms": [], "refused_rows": [{"arm": peer.PEER, "note": why}], "why": why}
    coefficients = peer_gate.peer_coefficients(rescale)
    start = time.perf_counter()
    try:
        every = session.run(peer.PeerArm(peer.EVERY_STEP))["peer"]  # also its eager path's full-length warm-up
    except interruptions():
        raise
    except Exception as exc:  # noqa: BLE001 - its failure on one model must not lose our rows of it
        why = f"its apply_teacache failed on this model: {type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
        return {"arms": [], "refused_rows": [{"arm": peer.PEER, "note": why}], "why": why}
    warmup["mlx_teacache_all_s"] = time.perf_counter() - start
    settings = peer_gate.PeerSettings(coefficients)
    arms = [("mlx-teacache-all", None, peer.PeerArm(peer.EVERY_STEP), 0)]
    refused_rows = []
    for threshold, _ in chosen:
        if peer_gate.threshold_refusal(threshold):
            refused_rows.append(
                {"arm": peer.PEER, "threshold": threshold, "note": peer_gate.threshold_refusal(threshold)}
            )
            continue
        kinds = peer_gate.replay_peer(every.signal, threshold, settings)
        arm = peer.PeerArm({"rel_l1_thresh": threshold, "coefficients": coefficients})
        arms.append(("mlx-teacache", threshold, arm, sum(k == "skipped" for k in kinds)))
    if len(arms) > 1:
        session.run(arms[-1][2], steps=min(WARMUP_STEPS + 2, session.steps))  # its skip path
    return {"arms": arms, "refused_rows": refused_rows, "why": None, "every": every, "coefficients": coefficients}


def peer_record(plan: dict, results: dict) -> dict:
    """What the provenance keeps of mlx-teacache's runs: version, variant, its signal and skipped steps."""
    if plan["why"] is not None:
        return {"version": peer.version(), "not_run": plan["why"]}
    every = plan["every"]
    return {
        "version": peer.version(), "variant_id": every.variant_id, "coefficients": list(plan["coefficients"]),
        "skip_first_n_steps": 1, "skip_last_n_steps": 1, "signal_trace": every.signal,
        "warnings": every.warnings,
        "skipped_steps": {name: runs[0]["peer"].skipped_steps for name, runs in results.items()
                          if runs and "peer" in runs[0]},
        "decisions": {name: runs[0]["peer"].decisions for name, runs in results.items()
                      if runs and "peer" in runs[0]},
    }  # fmt: skip


# --- output -------------------------------------------------------------------------------------


def code_digest() -> str:
    """sha256 of the Python sources of teacache, bench and calib as imported: which tree measured, also
    where no git checkout travels with the code."""
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


def read_csv(path: Path) -> pd.DataFrame:
    """A table this command wrote, read back as written: "" is missing (floats round-trip: pandas' default)."""
    return pd.read_csv(path, keep_default_na=False, na_values=[""], dtype={"tag": str})


def _merge(path: Path, new: pd.DataFrame, columns) -> pd.DataFrame:
    """OUT's rows with those of the configurations in ``new`` replaced by ``new``'s."""
    if path.exists():
        old = read_csv(path)
        replaced = set(config_keys(new))
        keep = [key not in replaced for key in config_keys(old)]
        new = pd.concat([old[keep], new], ignore_index=True)
    return new.reindex(columns=list(columns) or list(new.columns))


def checkout_of_this_code(git: dict) -> dict:
    """The git fields, when the sources are the root of their checkout; else nulls (code copied into a
    folder of another checkout: that checkout's commit says nothing about this code; code_sha256 does)."""
    try:
        top = subprocess.run(
            ["git", "rev-parse", "--show-toplevel"], cwd=PROJECT_ROOT, capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return {"commit": None, "dirty": None}
    return git if Path(top).resolve() == PROJECT_ROOT.resolve() else {"commit": None, "dirty": None}


def write_outputs(out: Path, run_rows: list[dict], models: dict[str, dict]) -> pd.DataFrame:
    """Merge ``run_rows`` into OUT's runs.csv (a configuration measured again replaces its rows), rebuild
    summary.csv from it and add the provenance. Returns the summary.

    runs.csv is the raw table, at full precision; summary.csv is derived from it. Configurations whose runs
    predate the raw fields (``kind``, ``exact``, ...: the committed H200 campaign) keep the summary rows
    they were written with.
    """
    runs = _merge(out / "runs.csv", pd.DataFrame(run_rows, columns=RUN_COLUMNS), RUN_COLUMNS)
    raw = runs["kind"].notna()
    summary = summarize(runs[raw])
    if (out / "summary.csv").exists():
        legacy = read_csv(out / "summary.csv")
        rebuilt = set(config_keys(runs[raw]))
        legacy = legacy[[key not in rebuilt for key in config_keys(legacy)]]
        summary = pd.concat([legacy.reindex(columns=SUMMARY_COLUMNS), summary], ignore_index=True)
    write_text(out / "runs.csv", runs.to_csv(index=False))
    write_text(out / "summary.csv", summary.to_csv(index=False, float_format="%.6g"))

    existing = {}
    if (out / "provenance.json").exists():
        existing = json.loads((out / "provenance.json").read_text(encoding="utf-8")).get("models", {})
    existing.update(models)
    write_json(out / "provenance.json", {"format_version": FORMAT_VERSION, "note": MEANINGLESS, "models": existing})
    return summary


def main(argv: list[str] | None = None) -> int:
    args = setup_arg_parser().parse_args(argv)
    try:
        plan = validate(args)
    except ValueError as exc:
        print(f"teacache-bench fullsize: {exc}", file=sys.stderr)
        return 2

    check_mflux_version()
    use_float32_on_cpu()
    hardware = prov.hardware_slug()
    out = args.out or PROJECT_ROOT / "results" / hardware / "fullsize"
    try:
        if args.out is None:  # a given --out was checked with the other arguments
            check_out_dir(out, writes=WRITES)
    except ValueError as exc:
        print(f"teacache-bench fullsize: {exc}", file=sys.stderr)
        return 2
    deadline = None if args.budget_s is None else time.perf_counter() + args.budget_s
    finished: list[str] = []
    failed: list[str] = []
    stopped = interruptions()  # Ctrl-C, also as mflux's StopImageGenerationException inside its loop

    def say(line: str) -> None:
        print(line, flush=True)
        append_log(out / LOG, line)

    setting = f"{args.size or 'default'} px, {args.steps or 'default'} steps"
    say(f"teacache-bench fullsize on {hardware}: {setting}, {args.repeats} interleaved repeats after warm-up; "
        f"{MEANINGLESS}")  # fmt: skip
    try:
        for variant in plan["variants"]:
            if deadline is not None and time.perf_counter() > deadline:
                say(f"budget: {variant} not started")
                continue
            try:
                rows, model_prov = measure_model(variant, args, plan, deadline, say)
            except stopped:
                raise
            except Exception:  # noqa: BLE001 - one family's failure must not lose the others' measurements
                traceback.print_exc()
                say(f"{variant}: failed (traceback above); nothing written for it")
                failed.append(variant)
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
            write_outputs(out, rows, {key: provenance})
            finished.append(variant)
            for row in summarize(pd.DataFrame(rows, columns=RUN_COLUMNS)).to_dict("records"):
                say(_row_line(row))
            say(f"  wrote {out / 'summary.csv'}")
    except stopped:
        saved = ", ".join(finished) or "no model"
        print(f"\ninterrupted: {out / 'summary.csv'} holds the rows of {saved}", file=sys.stderr)
        return 130
    return 1 if failed else 0


def _row_line(row: dict) -> str:
    if isinstance(row.get("note"), str) and row["note"]:
        return f"  {row['arm']}: not run: {row['note']}"
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
