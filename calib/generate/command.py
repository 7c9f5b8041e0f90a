"""``teacache-generate``: mflux's generate command of the model's family, with TeaCache on it.

``--model`` picks the family (an embedded model, an mflux name, or a local folder with ``--base-model``); the
parser is that mflux command's own ``build_parser()`` plus a TeaCache group, so every mflux flag passes through.
The threshold comes from ``--teacache-threshold``, ``--teacache-speedup`` or ``--teacache-ssim`` (resolved by
:mod:`calib.targets`, the one place that does it), else the variant's default. Everything that can be refused
is refused before a model loads, in one line, exit 2 (:mod:`calib.generate.arguments`). Each image carries the
TeaCache settings and outcome in its metadata beside mflux's, and the command prints ``skipped k of n (steps ...)``.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import warnings
from dataclasses import replace
from pathlib import Path

from calib.generate import PROG, Refusal, families, rules
from calib.generate.arguments import check_generation, parse
from calib.generate.output import output_path, save_image, teacache_metadata
from calib.run.command import command
from calib.run.interrupts import Interrupted
from teacache import variants
from teacache.errors import one_line

EXIT_INTERRUPTED = 130


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
