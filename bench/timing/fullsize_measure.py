"""``teacache-bench fullsize``'s measurements of one model: built, warmed up, its thresholds chosen by replaying
the warm-up run's signal, then every arm timed, paired and interleaved, against the vanilla run of its repeat."""

from __future__ import annotations

import argparse
import math
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import mlx.core as mx
import numpy as np

from bench.peer import arm as peer
from bench.peer import gate as peer_gate
from bench.timing.fullsize_rules import RuleArm, rule_arms, smallest_reaching
from calib.run.generation import HostLatents, generate
from calib.run.interleave import Turn, interleave
from calib.run.interrupts import interruptions
from teacache import apply_teacache, variants
from teacache.coefficients import load_packaged
from teacache.gate import GateConfig, replay
from teacache.models import fullsize
from teacache.rescale import RescaleFunction

PROMPT = "a red apple on a wooden table in soft morning light"
SEED = 3
WARMUP_STEPS = 3  # the JIT sees every shape in a few steps; the full-length warm-ups follow
PROXY_ALL_THRESHOLD = 1.0  # any positive value: with skip_first_n_steps = steps nothing is skipped


class Session:
    """One model under measurement: a generation per call, timed, with its final latents."""

    def __init__(self, model, steps: int, size: int, guidance: float) -> None:
        self.model, self.steps, self.size, self.guidance = model, steps, size, guidance

    def run(self, settings: dict | None, steps: int | None = None) -> dict:
        """One generation; ``settings`` are apply_teacache's arguments, another rule's arm (RuleArm) or a peer's
        (None: vanilla)."""
        if isinstance(settings, peer.PeerArm):
            return peer.run_in_session(self, settings, PROMPT, SEED, steps)
        mx.synchronize()
        mx.reset_peak_memory()
        if settings is None:
            out = self.generate(steps)
            extra = {"skipped": 0, "cache_bytes": 0, "branches": None, "log": [], "blocks": None}
        else:
            apply = settings.apply if isinstance(settings, RuleArm) else partial(apply_teacache, **settings)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                with apply(self.model) as handle:
                    out = self.generate(steps)
                    extra = {
                        "skipped": handle.stats.skipped,
                        "cache_bytes": handle.cache_bytes,
                        "branches": len(handle.cached_branches) or None,
                        "log": list(handle.stats.log),
                        "blocks": getattr(handle, "num_blocks", None),  # First-Block Cache's ideal counts block 0
                    }
        mx.synchronize()
        peak = mx.get_peak_memory()
        latents = HostLatents.of(out.latents)  # kept off the device: the runs after this one do not count it
        return {"loop_s": out.loop_s, "total_s": out.total_s, "latents": latents, "peak_bytes": peak, **extra}

    def generate(self, steps: int | None = None):
        """One generation of the session's prompt and seed, with whatever is applied to the model."""
        steps = steps or self.steps
        kwargs = {"prompt": PROMPT, "seed": SEED, "steps": steps, "width": self.size, "height": self.size}
        return generate(self.model, guidance=self.guidance, **kwargs)


def choose_threshold(xs: list[float | None], steps: int, target: int, rescale: RescaleFunction) -> tuple[float, int]:
    """The smallest threshold (4 significant digits) whose replayed schedule skips >= ``target`` steps
    (else the one skipping most), and its predicted skip count."""

    def predicted(threshold: float) -> int:
        log = replay(GateConfig(threshold, rescale), xs, num_steps=steps)
        return sum(not d.compute for d in log)

    values = [rescale(x) for x in xs if x is not None and math.isfinite(x)]
    positive = [v for v in values if v > 0]
    if not positive:
        return PROXY_ALL_THRESHOLD, 0
    threshold, k = smallest_reaching(np.geomspace(min(positive) / 4, sum(positive) * 1.5, 800), predicted, target)
    return (threshold, k) if k >= target or k > 0 else (PROXY_ALL_THRESHOLD, 0)


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
    rules: dict  # each other rule's calibration: MagCache's ratio curve, First-Block Cache's blocks; thresholds


def prepare(variant: str, args: argparse.Namespace, plan: dict, say: Callable[[str], None]) -> Prepared:
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
    rules_record = {}
    if plan.get("rules"):
        t = time.perf_counter()
        found, rules_record = rule_arms(
            session, plan["rules"], rescale, [round(f * steps) for f in plan["fractions"]], say
        )
        warmup["rules_calibration_s"] = time.perf_counter() - t
        arms += found
        if found[-1][0] == "fbcache":
            session.run(found[-1][2], steps=min(WARMUP_STEPS + 2, steps))  # block 0's skip path
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
    return Prepared(session, arms, facts, rescale, chosen, xs, warmup, build_s, peer_plan, rules_record)


def timed_runs(
    session: Session, settings: dict, repeats: int, deadline: float | None, say: Callable[[str], None]
) -> dict[str, list[dict]]:
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
                exact = result["latents"].equals(vanilla["latents"])
                max_abs = result["latents"].max_abs(vanilla["latents"])
            rows.append({
                **prepared.facts, "repeat": result["repeat"], "position": result["position"], "arm": name,
                "kind": kind, "threshold": threshold, "predicted_skipped": predicted, "loop_s": result["loop_s"],
                "total_s": result["total_s"], "skipped": result["skipped"],
                "peak_memory_gib": result["peak_bytes"] / 2**30, "cache_memory_mib": result["cache_bytes"] / 2**20,
                "branches": result["branches"], "exact": exact, "max_abs_diff": max_abs, "blocks": result.get("blocks"),
            })  # fmt: skip
    refused = prepared.peer_plan["refused_rows"] if prepared.peer_plan is not None else []
    rows += [{**prepared.facts, "arm": row["arm"], "kind": row["arm"], **row} for row in refused]
    return sorted(rows, key=lambda r: (r.get("repeat", math.inf), r.get("position", 0)))


def measure_model(
    variant: str, args: argparse.Namespace, plan: dict, deadline: float | None, say: Callable[[str], None]
) -> tuple[list[dict], dict]:
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
    if prepared.rules:
        provenance["rules"] = prepared.rules
    if prepared.peer_plan is not None:
        provenance["mlx_teacache"] = peer_record(prepared.peer_plan, results)
    del prepared, results
    mx.clear_cache()
    return rows, provenance


def _arm_key(arm) -> str:
    kind, threshold = arm[0], arm[1]
    return f"{kind} {threshold:g}" if kind in ("gate", "mlx-teacache", "magcache", "fbcache") else kind


def plan_peer(
    args: argparse.Namespace,
    model,
    rescale: RescaleFunction,
    chosen: list[tuple[float, int | None]],
    session: Session,
    warmup: dict,
) -> dict:
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
