"""``teacache-generate``'s command line: the family's mflux parser plus the TeaCache group, and every check that
can refuse it before a model loads (one line, exit 2): the model and its weights, the LoRA files, the seeds,
the flags that only some rules or models read, an embedded model's fixed size and prompt vocabulary.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import sys
from pathlib import Path

from calib.generate import PROG, Refusal, families
from teacache import variants

STEP_CACHE_FLAGS = ("--step-cache-ratio", "--teacache-ratio")  # mflux's own step reuse (a fixed schedule)
_NO_EMBEDDED = {  # mflux flags an embedded model cannot honour: (attribute, what it would need)
    "image_path": "image-to-image pipeline",
    "pid_decode": "VAE decoder",
}


RULES = ("teacache", "magcache", "fbcache")
TARGET_FLAGS = ("--teacache-threshold", "--teacache-speedup", "--teacache-ssim")  # how the threshold is set: one


def add_teacache_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("TeaCache")
    target = group.add_mutually_exclusive_group()
    target.add_argument("--teacache-threshold", type=float, metavar="T", help="the gate's rel-L1 threshold")
    target.add_argument(
        "--teacache-speedup",
        type=float,
        metavar="S",
        help="the threshold whose schedule, replayed on the variant's calibration traces, computes about N/S steps",
    )
    target.add_argument(
        "--teacache-ssim",
        type=float,
        metavar="Q",
        help="the fastest threshold of a sweep report (--teacache-report, default the committed one) with p5 SSIM >= Q",
    )
    group.add_argument(
        "--teacache-coefficients",
        metavar="SOURCE",
        help="rescale function: a fit.json, a coefficient module (.py), or numbers highest power first (c4,...,c0); "
        "default: the variant's packaged calibration",
    )
    group.add_argument(
        "--teacache-allow-unsafe",
        action="store_true",
        help="run --teacache-coefficients that are <= 0 everywhere on their range (refused otherwise: the gate "
        "would skip up to its cap whatever the threshold); a function unsafe somewhere only warns",
    )
    group.add_argument(
        "--teacache-rule",
        choices=RULES,
        default="teacache",
        help="teacache: the calibrated rel-L1 gate; magcache: MagCache's schedule from a residual-magnitude curve "
        "calibrated on the variant's traces (--teacache-traces), its threshold by --teacache-threshold, "
        "--teacache-speedup or its default 0.06; fbcache: First-Block Cache (block 0 every step, the rest skipped "
        "while block 0's residual changes less than --teacache-threshold, default 0.08, or the threshold whose "
        "replay on one calibration generation of the first seed gives --teacache-speedup)",
    )
    group.add_argument(
        "--teacache-forecast",
        action="store_true",
        help="a skipped step extrapolates the cached residual from the last two computed steps (first order) "
        "instead of reusing the last one; the cache holds two residuals per branch",
    )
    group.add_argument("--teacache-traces", metavar="PATH", help="calibration traces for --teacache-speedup")
    group.add_argument("--teacache-report", metavar="PATH", help="a report folder or summary.json for --teacache-ssim")


def pick_spec(argv: list[str]) -> variants.VariantSpec:
    """The variant ``--model``/``--base-model`` name, before any parser of mflux's is chosen."""
    from calib.run.arguments import check_model
    from teacache.loading import resolve_spec

    pre = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    pre.add_argument("--model", "-m")
    pre.add_argument("--base-model")
    known, _ = pre.parse_known_args(argv)
    if known.model is None:
        raise Refusal(f"--model: expected a model name or folder ({', '.join(variants.load_names())})")
    try:
        check_model(known.model, known.base_model)
        spec = resolve_spec(known.model, known.base_model)
        check_weights(known.model, known.base_model, spec)
    except ValueError as exc:
        text = str(exc)
        raise Refusal(f"--{text}" if text.startswith(("model:", "base_model:")) else text) from None
    return spec


def check_weights(name: str, base_model: str | None, spec: variants.VariantSpec) -> None:
    """The weights ``--model`` names are there to load: a folder's files (every component mflux reads), a
    released model's cache entry when offline; a random-weight model is refused (its images mean nothing)."""
    from teacache.loading import RANDOM_PREFIX, check_cached, check_model_folder, check_released_folder

    if base_model is None and name.startswith(RANDOM_PREFIX):
        raise Refusal(
            f"--model {name}: random weights draw noise, not images; {PROG} needs trained weights (an embedded "
            "model, an mflux name or a local folder); time a random full-size model with teacache-bench fullsize"
        )
    if base_model is not None:
        path = Path(name).expanduser()
        if spec.embedded:
            check_model_folder(path)
        else:
            check_released_folder(path, spec)
    elif not spec.embedded:
        check_cached(name, spec)


@contextlib.contextmanager
def _argv(argv: list[str]):
    """mflux's parser reads ``sys.argv`` itself (which options were given): hand it ours."""
    saved = sys.argv
    sys.argv = [PROG, *argv]
    try:
        yield
    finally:
        sys.argv = saved


def build_parser(spec: variants.VariantSpec):
    """The family's mflux parser with the TeaCache group; an embedded model's own defaults for what it fixes."""
    parser = families.COMMANDS[spec.family].build_parser()
    parser.prog = PROG
    parser.description = f"{parser.description} With TeaCache (teacache-lab)."
    add_teacache_arguments(parser)
    if spec.embedded:
        gen = spec.generation
        parser.set_defaults(steps=gen.steps, width=gen.width, height=gen.height, guidance=gen.guidance)
    return parser


def parse(argv: list[str]) -> tuple[variants.VariantSpec, argparse.Namespace]:
    """The variant and mflux's namespace (plus the TeaCache flags); Refusal or mflux's own exit 2 on bad input."""
    for token in argv:
        if token.split("=", 1)[0] in STEP_CACHE_FLAGS:
            raise Refusal(
                f"{token.split('=', 1)[0]}: mflux's own step cache skips steps too; TeaCache and it cannot run "
                "together: drop one of them"
            )
    targets = [flag for flag in TARGET_FLAGS if any(t.split("=", 1)[0] == flag for t in argv)]
    if len(targets) > 1:  # argparse would say so under its whole usage text
        raise Refusal(f"{targets[1]}: not with {targets[0]}; give one of {', '.join(TARGET_FLAGS)}")
    spec = pick_spec(argv)
    check_lora_files(argv)
    with _argv(argv):
        args = build_parser(spec).parse_args()
    if getattr(args, "step_cache_ratio", None) is not None:
        raise Refusal("--config-from-conf: the sidecar asks for mflux's step cache; TeaCache cannot run with it")
    if spec.embedded and getattr(args, "config_from_metadata", None) and "--steps" not in argv:
        # mflux restores a sidecar's steps only over no value, and an embedded model's default is one
        saved = json.loads(Path(args.config_from_metadata).read_text(encoding="utf-8")).get("steps")
        args.steps = saved if isinstance(saved, int) and saved > 0 else args.steps
    check_seeds(args.seed)
    args.output = _seed_once(args.output)
    return spec, args


def check_lora_files(argv: list[str]) -> None:
    """The LoRA files named on the command line are local safetensors files: said in one line here, before mflux's
    parser would look for a missing one on the Hugging Face Hub."""
    from teacache.lora import LoraError, check_file

    pre = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    pre.add_argument("--lora-paths", nargs="*", default=[])
    pre.add_argument("--lora", action="append", nargs="+", default=[])
    known, _ = pre.parse_known_args(argv)
    named = [("--lora-paths", p) for p in known.lora_paths] + [("--lora", group[0]) for group in known.lora]
    for flag, path in named:
        try:
            check_file(path, flag)
        except LoraError as exc:
            raise Refusal(str(exc)) from None


def check_loras(spec: variants.VariantSpec, args: argparse.Namespace) -> None:
    """The LoRAs (however mflux's parser gathered them: --lora, --lora-paths, a sidecar) fit the model, with one
    finite scale each; an embedded model takes them baked in, as mflux's constructors do by default."""
    from calib.run.arguments import check_loras as check

    paths = getattr(args, "lora_paths", None)
    if not paths and not getattr(args, "lora_scales", None):
        return
    if spec.embedded and getattr(args, "bake_lora", True) is False:
        raise Refusal(f"--no-bake-lora: {spec.name} takes its LoRAs baked into its weights (mflux's default)")
    args.lora_scales = list(check(args.model, args.base_model, paths, args.lora_scales).scales)


def check_seeds(seeds: list[int]) -> None:
    """Each seed one the generators take (0..2^32-1); mflux's parser takes any integer."""
    from calib.run.prompts import MAX_SEED

    bad = next((seed for seed in seeds if not 0 <= seed <= MAX_SEED), None)
    if bad is not None:
        raise Refusal(f"--seed: expected integers from 0 to 2^32-1 = {MAX_SEED} (what the generators take), got {bad}")


def _seed_once(output: str) -> str:
    """mflux appends ``_seed_{seed}`` to ``--output`` for several seeds even when the name has ``{seed}`` already
    (``multi_{seed}.png`` -> ``multi_1_seed_1.png``): keep the user's own placement then."""
    path = Path(output)
    tail = "_seed_{seed}"
    if path.stem.endswith(tail) and "{seed}" in path.stem[: -len(tail)]:
        return str(path.with_stem(path.stem[: -len(tail)]))
    return output


def check_generation(spec: variants.VariantSpec, args: argparse.Namespace) -> None:
    """What mflux's command would only find after loading: a schedule too short to skip, an embedded model's
    fixed size, prompt vocabulary and missing features."""
    if args.guidance is None:
        args.guidance = 1.0 if spec.family == "flux2" else None if spec.family == "zimage" else _mflux_guidance()
    elif not math.isfinite(args.guidance):
        raise Refusal(f"--guidance: expected a finite number, got {args.guidance!r}")
    for flag, needs in (("teacache_traces", "teacache_speedup"), ("teacache_report", "teacache_ssim")):
        magcache_curve = flag == "teacache_traces" and args.teacache_rule == "magcache"  # its curve's traces
        if getattr(args, flag) is not None and getattr(args, needs) is None and not magcache_curve:
            raise Refusal(
                f"--{flag.replace('_', '-')}: only --{needs.replace('_', '-')} reads it; drop it or pass "
                f"--{needs.replace('_', '-')}"
            )
    check_loras(spec, args)
    if spec.embedded:
        given = [flag for attr, flag in _NO_EMBEDDED.items() if getattr(args, attr, None)]
        if given:
            raise Refusal(f"--model {spec.name}: an embedded model has no {given[0]}; drop that flag")
        gen = spec.generation
        if spec.only_its_size and spec.image_side and (args.width, args.height) == (spec.image_side,) * 2:
            args.width, args.height = gen.width, gen.height  # its images are written at that size: a sidecar says so
        if spec.only_its_size and (args.width, args.height) != (gen.width, gen.height):
            side = f", written as {spec.image_side}x{spec.image_side}" if spec.image_side else ""
            raise Refusal(f"--width/--height: {spec.name} makes {gen.width}x{gen.height} images only{side}")
        if spec.prompt_check and args.prompt is not None:
            try:
                variants.zoo(spec.prompt_check)(args.prompt)
            except ValueError as exc:
                raise Refusal(f"--prompt: {str(exc).removeprefix('prompt: ')}") from None


def _mflux_guidance() -> float:
    from mflux.cli.defaults import defaults as ui_defaults

    return ui_defaults.GUIDANCE_SCALE
