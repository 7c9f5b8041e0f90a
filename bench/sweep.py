"""``teacache-bench sweep``: threshold x prompt x seed, each TeaCache run paired with a vanilla run.

Per (prompt, seed) pair, in one process after a warm-up, interleaved: each repeat runs vanilla and
every threshold once, the order rotated from repeat to repeat. Raw records only
(runs.parquet, decisions.parquet, noop.parquet, provenance.json);
``teacache-bench report`` derives everything else. Resumable per pair: finished pairs live in
``DIR/pairs/<pair_id>.*.parquet`` and are never redone.

Metrics against the paired vanilla run: final latents max-abs, mean-abs, max-rel = max |a-b| / (|b| + eps)
with eps = 1e-6, cosine; decoded uint8 RGB images: SSIM (scikit-image, data_range=255,
channel_axis=-1, i.e. per-channel SSIM averaged, default 7x7 Gaussian-free window) and PSNR
(data_range=255; inf for identical images). Timing: the denoising loop (before_loop to after_loop
callbacks, one mx.eval per step); speedup = median vanilla loop time / median TeaCache loop time.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
import warnings
from pathlib import Path

import mlx.core as mx
import numpy as np
import pandas as pd
from PIL import Image
from rich.progress import Progress
from skimage.metrics import peak_signal_noise_ratio, structural_similarity

import teacache  # noqa: F401  (OpenBLAS preload before MLX)
from bench.common import parse_thresholds
from bench.replay import predict_schedules, read_replay_traces
from calib.coefficient_sources import parse_x_range, resolve_coefficients
from calib.generation import generate
from calib.prompts import default_set, load_prompts, parse_seeds, parse_size
from teacache import apply_teacache, load_model, variants
from teacache.gate import GateConfig
from teacache.io import FORMAT_VERSION, write_json, write_parquet
from teacache.loading import model_defaults
from teacache.provenance import collect
from teacache.variants import variant_of

MAX_REL_EPS = 1e-6
SSIM_SETTINGS = {
    "data_range": 255,
    "channel_axis": -1,
    "note": "skimage.metrics.structural_similarity on uint8 RGB, per-channel SSIM averaged",
}


def setup_arg_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="teacache-bench sweep", description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=variants.default_model())
    parser.add_argument("--base-model", default=None)
    parser.add_argument("--thresholds", required=True, help="comma-separated, e.g. 0,0.1,0.2")
    parser.add_argument("--prompts", default=None, help="built-in set or file (default: the model's own set)")
    parser.add_argument("--seeds", default="0,1")
    parser.add_argument("--steps", type=int, default=None)
    parser.add_argument("--size", default=None, help="WIDTHxHEIGHT")
    parser.add_argument("--guidance", type=float, default=None)
    parser.add_argument("--quantize", type=int, default=None, choices=(3, 4, 5, 6, 8))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--coefficients", default="packaged", help="packaged, a fit.json, or c4,...,c0")
    parser.add_argument("--x-range", default=None, metavar="LO,HI", help="calibrated x range of c4,...,c0")
    parser.add_argument("--traces", type=Path, default=None, help="trace table: predict skips by replay")
    parser.add_argument("--save-images", action="store_true")
    parser.add_argument("--out", required=True, type=Path)
    return parser


def _float64(values) -> np.ndarray:
    """MLX arrays (bfloat16 included: numpy has no such type) or numpy arrays, flattened to float64."""
    if isinstance(values, mx.array):
        values = np.array(values.astype(mx.float32))
    return np.asarray(values, dtype=np.float64).ravel()


def latent_metrics(latents, reference) -> dict:
    a = _float64(latents)
    b = _float64(reference)
    diff = np.abs(a - b)
    denominator = np.linalg.norm(a) * np.linalg.norm(b)
    return {
        "max_abs": float(diff.max()),
        "mean_abs": float(diff.mean()),
        "max_rel": float((diff / (np.abs(b) + MAX_REL_EPS)).max()),
        "cosine": float(np.dot(a, b) / denominator) if denominator > 0 else float("nan"),
    }


def image_metrics(image: np.ndarray, reference: np.ndarray) -> dict:
    if min(image.shape[:2]) < 7:
        return {"ssim": float("nan"), "psnr": float("nan")}
    ssim = structural_similarity(reference, image, data_range=255, channel_axis=-1)
    with np.errstate(divide="ignore"):
        psnr = peak_signal_noise_ratio(reference, image, data_range=255)
    return {"ssim": float(ssim), "psnr": float(psnr)}


def _adherence_fn(variant: str):
    if not variants.get(variant).scores_adherence:
        return None
    from bench.adherence import score_adherence

    return lambda image, prompt: float(score_adherence(image, prompt)["score"])


def run_pair(model, settings, pair, thresholds, configs, repeats, adherence, images_dir):
    """All runs of one (prompt, seed) pair, interleaved over repeats. Returns (runs rows, decision rows)."""
    prompt_id, prompt, seed = pair
    pair_id = f"{prompt_id}-s{seed}"
    args = (prompt, seed, settings["steps"], settings["width"], settings["height"], settings["guidance"])
    times: dict = {"vanilla": []} | {t: [] for t in thresholds}
    first: dict = {}
    logs: dict = {}
    vanilla_equal: list[bool] = []
    order: list = ["vanilla", *thresholds]
    for repeat in range(repeats):
        # rotate the order each repeat so no setting always runs first (cache and allocator effects)
        for t in order[repeat % len(order) :] + order[: repeat % len(order)]:
            if t == "vanilla":
                vanilla = generate(model, *args)
                times["vanilla"].append(vanilla.loop_s)
                first.setdefault("vanilla", vanilla)
                vanilla_equal.append(bool(mx.array_equal(vanilla.latents, first["vanilla"].latents).item()))
                continue
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                with apply_teacache(model, config=configs[t]) as handle:
                    gen = generate(model, *args)
            times[t].append(gen.loop_s)
            stats = handle.stats
            if t in logs and logs[t][0].skipped_steps != stats.skipped_steps:
                raise RuntimeError(f"{pair_id} threshold {t}: the skip schedule changed between repeats")
            first.setdefault(t, gen)
            logs.setdefault(t, (stats, handle.controller.num_steps))
    ref = first["vanilla"]
    base = {
        "format_version": FORMAT_VERSION, "pair_id": pair_id, "variant": settings["variant"],
        "model": settings["model"], "prompt_id": prompt_id, "prompt": prompt, "seed": seed,
        "num_steps": settings["steps"],
    }  # fmt: skip
    vanilla_median = statistics.median(times["vanilla"])
    rows = [
        {
            **base, "run_id": f"{pair_id}-vanilla", "kind": "vanilla", "threshold": float("nan"),
            "computed": settings["steps"], "skipped": 0, "skipped_steps": "[]", "longest_skip_streak": 0,
            "wall_s": times["vanilla"], "wall_s_median": vanilla_median, "speedup": 1.0, "ideal_speedup": 1.0,
            **latent_metrics(ref.latents, ref.latents), **image_metrics(ref.image, ref.image),
            "adherence": adherence(ref.image, prompt) if adherence else float("nan"),
            "image_path": _save(images_dir, f"{pair_id}-vanilla", ref.image),
        }
    ]  # fmt: skip
    decisions = []
    for t in thresholds:
        gen, (stats, n) = first[t], logs[t]
        run_id = f"{pair_id}-t{t:g}"
        median = statistics.median(times[t])
        skipped = len(stats.skipped_steps)
        rows.append({
            **base, "run_id": run_id, "kind": "teacache", "threshold": t,
            "computed": n - skipped, "skipped": skipped, "skipped_steps": json.dumps(stats.skipped_steps),
            "longest_skip_streak": stats.longest_skip_streak, "wall_s": times[t], "wall_s_median": median,
            "speedup": vanilla_median / median, "ideal_speedup": n / (n - skipped),
            **latent_metrics(gen.latents, ref.latents), **image_metrics(gen.image, ref.image),
            "adherence": adherence(gen.image, prompt) if adherence else float("nan"),
            "image_path": _save(images_dir, run_id, gen.image),
        })  # fmt: skip
        decisions += [{"run_id": run_id, **d.as_dict()} for d in stats.log]
    noop = proxy_noop(model, args, configs[thresholds[-1]], ref, base)  # args: this pair's generation arguments
    noop["vanilla_repeats_equal"] = all(vanilla_equal)  # every vanilla repeat, before and after TeaCache runs
    return rows, decisions, noop


def proxy_noop(model, args, config: GateConfig, ref, base: dict) -> dict:
    """The proxy fully active (signal, decision, residual) with every step forced to compute.

    Where the integration re-walks the forward or swaps a compiled predict for an uncompiled one,
    this measures how far that execution path alone moves the result (oracle 3 of the test pyramid).
    """
    steps = base["num_steps"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with apply_teacache(model, config=dataclasses.replace(config, skip_first_n_steps=steps)) as handle:
            gen = generate(model, *args)
    assert handle.stats.skipped == 0
    return {
        **base,
        "run_id": f"{base['pair_id']}-proxy-noop",
        "kind": "proxy-noop",
        "bit_exact": bool(mx.array_equal(gen.latents, ref.latents).item()),
        "wall_s_median": gen.loop_s,
        **latent_metrics(gen.latents, ref.latents),
        **image_metrics(gen.image, ref.image),
    }


def _save(images_dir: Path | None, name: str, image: np.ndarray) -> str | None:
    if images_dir is None:
        return None
    from teacache.io import atomic_path

    path = images_dir / f"{name}.png"
    scale = max(1, 256 // max(image.shape[:2]))
    with atomic_path(path) as tmp:
        Image.fromarray(image).resize((image.shape[1] * scale, image.shape[0] * scale), Image.NEAREST).save(
            tmp, format="PNG"
        )
    return str(Path("images") / path.name)


def resolve(args) -> dict:
    defaults = model_defaults(args.model, args.base_model)
    width, height = parse_size(args.size) if args.size else (defaults["width"], defaults["height"])
    steps = args.steps if args.steps is not None else defaults["steps"]
    if steps < 3:
        raise ValueError(f"--steps: expected at least 3 steps, got {steps}")
    if args.repeats < 1:
        raise ValueError(f"--repeats: expected at least 1, got {args.repeats}")
    return {
        "traces": read_replay_traces([args.traces], steps, num_steps_arg="--steps") if args.traces else None,
        "x_range": parse_x_range(args.x_range),
        "model": args.model,
        "thresholds": parse_thresholds(args.thresholds),
        "prompts": load_prompts(args.prompts or default_set(args.model)),
        "seeds": parse_seeds(args.seeds),
        "steps": steps,
        "width": width,
        "height": height,
        "guidance": args.guidance if args.guidance is not None else defaults["guidance"],
    }


def run_sweep(args) -> Path:
    settings = resolve(args)
    pairs = [(pid, text, seed) for pid, text in settings["prompts"].items() for seed in settings["seeds"]]
    parts = args.out / "pairs"
    done = {p.name.split(".")[0] for p in parts.glob("*.runs.parquet")} if parts.exists() else set()
    todo = [p for p in pairs if f"{p[0]}-s{p[2]}" not in done]
    thresholds = settings["thresholds"]
    print(
        f"sweep {settings['model']}: {len(pairs)} pairs ({len(pairs) - len(todo)} done) x "
        f"(vanilla + {len(thresholds)} thresholds) x {args.repeats} repeats, {settings['steps']} steps"
    )
    model = load_model(args.model, base_model=args.base_model, quantize=args.quantize)
    spec = variants.get(variant_of(model))
    settings["variant"] = variant = spec.name
    default_threshold, skip_first = spec.default_threshold, spec.skip_first_n_steps
    rescale = resolve_coefficients(args.coefficients, variant, settings["x_range"])[0]
    configs = {t: GateConfig(t, rescale, skip_first_n_steps=skip_first) for t in thresholds}
    adherence = _adherence_fn(variant)
    images_dir = args.out / "images" if args.save_images else None
    if todo:  # warm-up: compile and JIT once before anything is timed
        warm = (
            todo[0][1],
            todo[0][2],
            settings["steps"],
            settings["width"],
            settings["height"],
            settings["guidance"],
        )
        generate(model, *warm)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with apply_teacache(model, rel_l1_thresh=max(thresholds), coefficients=rescale):
                generate(model, *warm)
    with Progress() as progress:
        task = progress.add_task("sweep", total=len(todo))
        for pair in todo:
            rows, decisions, noop = run_pair(
                model, settings, pair, thresholds, configs, args.repeats, adherence, images_dir
            )
            pair_id = f"{pair[0]}-s{pair[2]}"
            write_parquet(parts / f"{pair_id}.decisions.parquet", pd.DataFrame(decisions, columns=_DECISION_COLUMNS))
            write_parquet(parts / f"{pair_id}.noop.parquet", pd.DataFrame([noop]))
            write_parquet(parts / f"{pair_id}.runs.parquet", pd.DataFrame(rows))  # last: marks the pair done
            progress.advance(task)
    order = [f"{p[0]}-s{p[2]}" for p in pairs]
    runs = pd.concat([pd.read_parquet(parts / f"{pid}.runs.parquet") for pid in order], ignore_index=True)
    decisions = pd.concat([pd.read_parquet(parts / f"{pid}.decisions.parquet") for pid in order], ignore_index=True)
    noop = pd.concat([pd.read_parquet(parts / f"{pid}.noop.parquet") for pid in order], ignore_index=True)
    runs["predicted_skipped"] = float("nan")
    if args.traces is not None:
        predicted = predict_schedules(settings["traces"], configs)
        predicted["pair_id"] = predicted["prompt_id"] + "-s" + predicted["seed"].astype(str)
        lookup = predicted.set_index(["pair_id", "threshold"])["predicted_skipped"]
        keys = list(zip(runs["pair_id"], runs["threshold"], strict=True))
        runs["predicted_skipped"] = [float(lookup.get(k, float("nan"))) for k in keys]
    provenance = collect(
        model=settings["model"],
        variant=variant,
        steps=settings["steps"],
        guidance=settings["guidance"],
        resolution=f"{settings['width']}x{settings['height']}",
        thresholds=thresholds,
        prompts=[{"id": k, "text": v} for k, v in settings["prompts"].items()],
        seeds=settings["seeds"],
        repeats=args.repeats,
        max_rel_eps=MAX_REL_EPS,
        ssim=SSIM_SETTINGS,
        rescale=rescale.to_dict(),
        rescale_floor=configs[thresholds[-1]].rescale_floor(settings["steps"]),
        default_threshold=default_threshold,
        skip_first_n_steps=skip_first,
        quantization=args.quantize,
        timing="denoising loop, before_loop to after_loop callbacks, after a warm-up",
        traces=str(args.traces) if args.traces else None,
        traces_num_steps=settings["traces"].num_steps if args.traces else None,
    )
    write_parquet(args.out / "decisions.parquet", decisions)
    write_parquet(args.out / "noop.parquet", noop)
    write_parquet(args.out / "runs.parquet", runs)
    write_json(args.out / "provenance.json", provenance)
    return args.out / "runs.parquet"


_DECISION_COLUMNS = [
    "run_id", "step", "num_steps", "sigma", "x", "x_used", "rescaled", "accumulated", "compute", "reason",
]  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    args = setup_arg_parser().parse_args(argv)
    try:
        path = run_sweep(args)
    except ValueError as exc:
        print(f"teacache-bench sweep: {exc}", file=sys.stderr)
        return 2
    runs = pd.read_parquet(path)
    table = runs[runs["kind"] == "teacache"].groupby("threshold")[["skipped", "speedup", "ssim", "cosine"]].median()
    print(table.to_string(float_format=lambda v: f"{v:.4f}"))
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
