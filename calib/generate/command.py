"""``teacache-generate``: mflux's generate command of the model's family, with TeaCache on it.

``--model`` picks the family (an embedded model, an mflux name, or a local folder with ``--base-model``); the
parser is that mflux command's own ``build_parser()`` plus a TeaCache group, so every mflux flag passes through.
The threshold comes from ``--teacache-threshold``, ``--teacache-speedup`` or ``--teacache-ssim`` (resolved by
:mod:`calib.targets`, the one place that does it), else the variant's default. Everything that can be refused
is refused before a model loads, in one line, exit 2. Each image carries the TeaCache settings and outcome in
its metadata beside mflux's, and the command prints ``skipped k of n (steps ...)``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import sys
import warnings
from dataclasses import replace
from pathlib import Path

from calib.generate import PROG, Refusal, families, rules
from calib.generate.output import output_path, save_image, teacache_metadata
from calib.run.command import command
from calib.run.interrupts import Interrupted
from teacache import variants
from teacache.errors import one_line

EXIT_INTERRUPTED = 130
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


def load(spec: variants.VariantSpec, args: argparse.Namespace):
    """The model, and mflux's memory saver when its command would register one."""
    from teacache.loading import load_model

    if spec.embedded:
        loras = {"lora_paths": args.lora_paths, "lora_scales": args.lora_scales} if args.lora_paths else {}
        return load_model(spec.name, quantize=args.quantize, seed=0, **loras), None
    try:
        model = families.load_released(spec.family, args)
    except (OSError, ValueError, RuntimeError) as exc:  # the Hub (network, cache, disk) and mflux's weight loader
        from huggingface_hub import constants

        where = args.model if args.base_model else constants.HF_HUB_CACHE
        raise Refusal(
            f"--model {args.model}: cannot load its weights (looked in {where}): {type(exc).__name__}: {one_line(exc)}"
        ) from None
    model.teacache_variant = spec.name
    return model, families.register_mflux_callbacks(spec.family, args, model)


def run_once(spec, args, model, seed: int):
    """One generation of ``seed`` as mflux's command makes it (prompt, size and the family's keywords)."""
    from mflux.utils.dimension_resolver import DimensionResolver
    from mflux.utils.prompt_util import PromptUtil

    width, height = DimensionResolver.resolve(
        width=args.width, height=args.height, reference_image_path=getattr(args, "image_path", None)
    )
    prompt = PromptUtil.read_prompt(args)
    kwargs = families.generate_kwargs(spec.family, args, seed, prompt, width, height)
    return model.generate_image(**families.accepted(model.generate_image, kwargs))


def generate_all(spec, args, model, handle, record: dict, out: list[Path]) -> None:
    """One image per seed, each saved with its TeaCache metadata as soon as it is made."""

    for seed in args.seed:
        image = run_once(spec, args, model, seed)
        stats = handle.stats
        skipped = stats.skipped_steps
        steps = stats.computed + stats.skipped
        meta = teacache_metadata(record, skipped, steps)
        path = save_image(image, model, args, seed, meta)
        out.append(path)
        shown = ", ".join(map(str, skipped)) if skipped else "none"
        print(f"{PROG}: skipped {len(skipped)} of {steps} (steps {shown}); saved {path}")
        _check_replayed(record["choice"], seed, skipped)


def _check_replayed(choice, seed: int, skipped: list[int]) -> None:
    """A First-Block Cache run by speedup repeats its calibration generation's replay; say so where it did not
    (a change the first skip moved across the threshold)."""
    source = {} if choice is None else choice.source
    if source.get("kind") == "fbcache-replay" and source.get("seed") == seed and skipped != source["skipped_steps"]:
        replayed = ", ".join(map(str, source["skipped_steps"])) or "none"
        print(f"{PROG}: warning: seed {seed} skipped other steps than its calibration replay ({replayed})",
              file=sys.stderr)  # fmt: skip


@contextlib.contextmanager
def _one_line_warnings():
    """A warning the command shows is one line naming the command, not a source line of this project."""
    saved = warnings.showwarning

    def show(message, category, filename, lineno, file=None, line=None) -> None:
        print(f"{PROG}: {category.__name__}: {message}", file=file or sys.stderr)

    warnings.showwarning = show
    try:
        yield
    finally:
        warnings.showwarning = saved


@command(PROG)
def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    saved: list[Path] = []
    try:
        spec, args = parse(argv)
        check_generation(spec, args)
        if args.teacache_rule == "magcache":
            return _magcache_main(spec, args, saved)
        if args.teacache_rule == "fbcache":
            return _fbcache_main(spec, args, saved)
        config, choice, rescale_source, coefficients = rules.resolve_gate(spec, args)
        for seed in args.seed:
            output_path(args, seed, check=True)
        print(f"{PROG}: {spec.name}, {rules.describe_threshold(spec, config, choice)}; rescale {rescale_source}")
        default = f"the default of {spec.name}: {spec.default_threshold_why}"
        record = _record(args, "teacache", config.rel_l1_thresh, choice, rescale_source, default,
                         config.skip_first_n_steps, config.skip_last_n_steps, config.max_consecutive_skips)  # fmt: skip
        with _one_line_warnings():
            return _run(spec, args, config, coefficients, record, saved)
    except KeyboardInterrupt:
        where = ", ".join(map(str, saved)) if saved else "nothing"
        print(f"{PROG}: interrupted; saved {where}", file=sys.stderr)
        return EXIT_INTERRUPTED


def _magcache_main(spec, args, saved: list[Path]) -> int:
    config, choice, source = rules.resolve_magcache(spec, args)
    for seed in args.seed:
        output_path(args, seed, check=True)
    said = choice.describe() if choice is not None else f"threshold {config.threshold:g}"
    print(f"{PROG}: {spec.name}, MagCache {said} (K {config.max_consecutive_skips}, retention "
          f"{config.retention_ratio:g}); {source}")  # fmt: skip
    default = f"MagCache's default {rules.MAGCACHE_DEFAULT_THRESHOLD:g} (the paper's)"
    record = _record(args, "magcache", config.threshold, choice, source, default,
                     None, config.skip_last_n_steps, config.max_consecutive_skips)  # fmt: skip
    with _one_line_warnings():
        return _run(spec, args, config, None, record, saved)


def _fbcache_main(spec, args, saved: list[Path]) -> int:
    from teacache.fbcache import DEFAULT_THRESHOLD

    config = rules.resolve_fbcache(spec, args)
    for seed in args.seed:
        output_path(args, seed, check=True)
    loaded, choice, source = None, None, "none: First-Block Cache is uncalibrated"
    if args.teacache_speedup is not None:
        loaded = load(spec, args)
        with _one_line_warnings():
            choice = rules.fbcache_choice(args, loaded[0], config, lambda seed: run_once(spec, args, loaded[0], seed))
        config = replace(config, threshold=choice.threshold)
        source = f"none: First-Block Cache's threshold from {choice.evidence}"
    said = choice.describe() if choice is not None else f"threshold {config.threshold:g}"
    print(f"{PROG}: {spec.name}, First-Block Cache {said} (K {config.max_consecutive_skips}, "
          f"first {config.skip_first_n_steps}, last {config.skip_last_n_steps}); "
          f"{'calibrated' if choice is not None else 'uncalibrated'}")  # fmt: skip
    default = f"First-Block Cache's default {DEFAULT_THRESHOLD:g} (ParaAttention's for FLUX)"
    record = _record(args, "fbcache", config.threshold, choice, source, default,
                     config.skip_first_n_steps, config.skip_last_n_steps, config.max_consecutive_skips)  # fmt: skip
    with _one_line_warnings():
        return _run(spec, args, config, None, record, saved, loaded)


def _record(args, rule: str, threshold: float, choice, source: str, default: str, first, last, cap) -> dict:
    """What the image's metadata says of the rule (calib.generate.output.teacache_metadata reads it)."""
    return {
        "rule": rule,
        "threshold": threshold,
        "choice": choice,
        "rescale_source": source,
        "skip_first_n_steps": first,
        "skip_last_n_steps": last,
        "max_consecutive_skips": cap,
        "forecast": args.teacache_forecast,
        "threshold_source": "--teacache-threshold" if args.teacache_threshold is not None else default,
    }


def _run(spec, args, config, coefficients, record, saved: list[Path], loaded=None) -> int:
    from mflux.utils.exceptions import PromptFileReadError, StopImageGenerationException

    from teacache.api import apply_teacache
    from teacache.safety import UnsafeRescaleWarning

    model, memory_saver = load(spec, args) if loaded is None else loaded
    if record["rule"] == "magcache":
        from teacache.magcache import apply_magcache

        handle = apply_magcache(model, config, args.steps, forecast=args.teacache_forecast)
    elif record["rule"] == "fbcache":
        from teacache.fbcache import apply_fbcache

        handle = apply_fbcache(
            model,
            config.threshold,
            skip_first_n_steps=config.skip_first_n_steps,
            skip_last_n_steps=config.skip_last_n_steps,
            max_consecutive_skips=config.max_consecutive_skips,
            forecast=args.teacache_forecast,
        )
    else:
        with warnings.catch_warnings():  # resolve_gate checked the coefficients and said so once
            warnings.simplefilter("ignore", UnsafeRescaleWarning)
            handle = apply_teacache(
                model,
                rel_l1_thresh=config.rel_l1_thresh,
                coefficients=coefficients,
                skip_first_n_steps=config.skip_first_n_steps,
                allow_unsafe=args.teacache_allow_unsafe,
                forecast=args.teacache_forecast,
            )
    try:
        generate_all(spec, args, model, handle, record, saved)
    except StopImageGenerationException as exc:  # mflux turns Ctrl-C inside its loop into this
        where = ", ".join(map(str, saved)) if saved else "nothing"
        raise Interrupted(f"{exc}; saved {where}") from exc
    except PromptFileReadError as exc:
        raise Refusal(f"--prompt-file: {exc}") from exc
    finally:
        handle.restore()
        if memory_saver:
            print(memory_saver.memory_stats())
    return 0


if __name__ == "__main__":
    sys.exit(main())
