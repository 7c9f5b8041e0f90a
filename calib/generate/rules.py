"""Each caching rule's settings from ``teacache-generate``'s options: its threshold by value, by speedup or by
quality (:mod:`calib.targets`), its calibration and its refusals, checked before a model loads (First-Block Cache
by speedup: after one calibration generation, the only choice that needs the model)."""

from __future__ import annotations

import argparse
import sys
import warnings
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING

from calib.generate import PROG, Refusal
from teacache import variants

if TYPE_CHECKING:
    from teacache.rescale import RescaleFunction

MAGCACHE_DEFAULT_THRESHOLD = 0.06  # the MagCache paper's default, as sglang ships it
# TeaCache's own options, refused beside another rule
TEACACHE_ONLY = ("teacache_ssim", "teacache_coefficients", "teacache_report", "teacache_allow_unsafe")


def check_schedule(spec: variants.VariantSpec, steps: int, config, rule: str = "TeaCache") -> None:
    """A schedule whose forced first and last steps leave the rule nothing it may skip is refused."""
    lo, hi = max(config.skip_first_n_steps, 1), steps - 1 - config.skip_last_n_steps
    if hi < lo:
        raise Refusal(
            f"--steps {steps}: {spec.name} always computes its first {config.skip_first_n_steps} and last "
            f"{config.skip_last_n_steps} steps, which leaves {rule} nothing to skip; expected --steps >= "
            f"{lo + 1 + config.skip_last_n_steps} (a distilled few-step model gains nothing from it)"
        )


def resolve_gate(spec: variants.VariantSpec, args: argparse.Namespace):
    """(GateConfig, ThresholdChoice or None, rescale source in words, coefficients to pass or None)."""
    from calib import targets
    from calib.fit.coefficient_sources import resolve_coefficients
    from calib.fit.errors import FitError
    from teacache.gate import GateConfig

    coefficients = None
    if args.teacache_coefficients is not None:
        try:
            coefficients, rescale_source = resolve_coefficients(
                args.teacache_coefficients, spec.name, arg="--teacache-coefficients"
            )
        except FitError as exc:
            raise Refusal(str(exc)) from None
        check_safety(coefficients, args.teacache_allow_unsafe)
        if args.teacache_ssim is not None and args.teacache_report is None:
            raise Refusal(
                "--teacache-ssim: the committed sweep report measured the packaged coefficients, not "
                "--teacache-coefficients; pass --teacache-report of a sweep made with them"
            )
    elif spec.coefficients is None:
        raise Refusal(f"--teacache-coefficients: {spec.name} has no packaged calibration; pass a fit.json or numbers")
    rescale = coefficients if coefficients is not None else spec.rescale()
    if coefficients is None:
        rescale_source = f"packaged teacache.coefficients.{spec.coefficients}"
    base = GateConfig(1.0, rescale, skip_first_n_steps=spec.skip_first_n_steps)
    check_schedule(spec, args.steps, base)
    choice = None
    try:
        if args.teacache_speedup is not None:
            choice = targets.by_speedup(
                spec.name, args.teacache_speedup, args.steps, base, rescale_source, args.teacache_traces
            )
        elif args.teacache_ssim is not None:
            choice = targets.by_quality(spec.name, args.teacache_ssim, args.teacache_report)
        threshold = choice.threshold if choice is not None else args.teacache_threshold
        if threshold is None:
            threshold = spec.default_threshold
        config = GateConfig(threshold, rescale, skip_first_n_steps=spec.skip_first_n_steps)
    except ValueError as exc:  # TargetError, and GateConfig's own check of --teacache-threshold
        text = str(exc)
        raise Refusal(text if text.startswith("--") else f"--teacache-threshold: {text}") from None
    return config, choice, rescale_source, coefficients


def resolve_magcache(spec: variants.VariantSpec, args: argparse.Namespace):
    """(MagCacheConfig, ThresholdChoice or None, the curve's source in words) for --teacache-rule magcache."""
    from calib import targets
    from teacache.errors import TeaCacheError
    from teacache.magcache import MagCacheConfig

    given = [name for name in TEACACHE_ONLY if getattr(args, name) not in (None, False)]
    if given:
        flag = "--" + given[0].replace("_", "-")
        raise Refusal(
            f"{flag}: not used with --teacache-rule magcache (it reads a ratio curve, not a rescale function)"
        )
    try:
        curve, path = targets.magcache_curve(spec.name, args.teacache_traces)
        choice = None
        if args.teacache_speedup is not None:
            choice = targets.magcache_by_speedup(curve, args.teacache_speedup, args.steps, path)
        threshold = choice.threshold if choice is not None else args.teacache_threshold
        config = MagCacheConfig(MAGCACHE_DEFAULT_THRESHOLD if threshold is None else threshold, curve)
    except TeaCacheError as exc:
        text = str(exc)
        raise Refusal(text if text.startswith("--") else f"--teacache-threshold: {text}") from None
    return config, choice, f"MagCache curve of {targets._rel(path)}"


def resolve_fbcache(spec: variants.VariantSpec, args: argparse.Namespace):
    """FBCacheConfig for --teacache-rule fbcache: its threshold by --teacache-threshold or its default; with
    --teacache-speedup the threshold is chosen after a calibration generation (:func:`fbcache_choice`), and the
    target is checked here against the most the rule can give at any block count. No rescale function."""
    from calib import targets
    from teacache.errors import TeaCacheError
    from teacache.fbcache import FBCacheConfig

    given = [name for name in (*TEACACHE_ONLY, "teacache_traces") if getattr(args, name) not in (None, False)]
    if given:
        flag = "--" + given[0].replace("_", "-")
        raise Refusal(
            f"{flag}: not used with --teacache-rule fbcache (it has no recorded traces or rescale function: "
            "--teacache-speedup calibrates on a generation of its own); pass --teacache-threshold or --teacache-speedup"
        )
    try:
        config = FBCacheConfig(**({} if args.teacache_threshold is None else {"threshold": args.teacache_threshold}))
    except TeaCacheError as exc:
        raise Refusal(f"--teacache-threshold: {exc}") from None
    check_schedule(spec, args.steps, config, "First-Block Cache")
    if args.teacache_speedup is not None:
        try:
            speedup = targets.check_speedup(args.teacache_speedup)
        except TeaCacheError as exc:
            raise Refusal(str(exc)) from None
        most = targets.fbcache_max_speedup(args.steps, config)
        if speedup > most + 1e-9:
            raise Refusal(
                f"--teacache-speedup {speedup:g}: First-Block Cache computes block 0 and its first "
                f"{config.skip_first_n_steps} and last {config.skip_last_n_steps} steps and skips at most "
                f"{config.max_consecutive_skips} in a row, so at {args.steps} steps it gives {most:.2f}x at most "
                "(fewer with fewer blocks); ask for less"
            )
    return config


def fbcache_choice(args: argparse.Namespace, model, config, generate: Callable[[int], object]):
    """The threshold for --teacache-speedup: the rule replayed on one calibration generation of the first seed
    (``generate(seed)``: every step computed, as vanilla), which a live run of that same generation then takes
    decision for decision."""
    from calib import targets
    from teacache.fbcache import apply_fbcache

    seed = args.seed[0]
    with apply_fbcache(model, calibrate=True) as calibration:
        generate(seed)
    blocks = calibration.num_blocks
    evidence = f"First-Block Cache replayed on a calibration generation of seed {seed}, {blocks} blocks"
    try:
        choice = targets.fbcache_by_speedup(calibration.changes, args.teacache_speedup, blocks, config, evidence)
    except targets.TargetError as exc:
        raise Refusal(str(exc)) from None
    return replace(choice, source={**choice.source, "seed": seed})


def check_safety(rescale: RescaleFunction, allow_unsafe: bool) -> None:
    """The fit's safety check on the given coefficients: refused when positive nowhere (unless --teacache-allow-unsafe),
    one warning line when unsafe somewhere."""
    from teacache.safety import UnsafeRescaleWarning, check_given

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", UnsafeRescaleWarning)
        check_given(rescale, "--teacache-coefficients", allow_unsafe, insist="--teacache-allow-unsafe")
    for warning in caught:
        print(f"{PROG}: warning: {warning.message}", file=sys.stderr)


def describe_threshold(spec, config, choice) -> str:
    if choice is not None:
        return choice.describe()
    return f"threshold {config.rel_l1_thresh:g}"
