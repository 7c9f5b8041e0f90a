"""Which runs the drift's effect compares: each family's effect model, or the user's own ``--model``, and the
save (``--save DIR`` before an upgrade, committed per release, or ``--against DIR``) it is judged against."""

from __future__ import annotations

import argparse
import dataclasses
import math
from pathlib import Path

from calib.drift import model_runs, numbers
from teacache import variants
from teacache._compat import DRIFT_COMMAND as PROG
from teacache._compat import NEWEST_MFLUX
from teacache.errors import InputError
from teacache.lora import LoraError

GENERATION_OPTIONS = ("prompts", "seeds", "steps", "size", "guidance", "quantize", "lora_paths", "lora_scales")
DATA = Path(__file__).with_name("data")


def effect_references(release: str) -> Path:
    """The committed save of a release's effect models (``drift --save``'s effect/ part, made under it)."""
    return DATA / f"save-mflux-{release}"


def effect_models() -> tuple[str, ...]:
    """One model per family whose calibrated gate the effect is judged on: the one its specs name as the drift
    subject (tiny-open-flux1, tiny-open-flux2: trained, with steps that change like a real model's), else its
    trained embedded model, else its embedded random-weight model."""
    chosen: dict[str, str] = {}
    for spec in sorted(variants.all_specs(), key=lambda s: not s.drift_subject):
        if spec.embedded and spec.trained:
            chosen.setdefault(spec.family, spec.name)
    for name in numbers.embedded_variants():
        chosen.setdefault(variants.get(name).family, name)
    return tuple(chosen[f.name] for f in variants.families() if f.name in chosen)


def family_effect(args: argparse.Namespace) -> tuple:
    """Each family's effect model, judged by --against's save, else by the committed save of the baseline
    (none where that save recorded other runs)."""
    root = args.against if args.against is not None else effect_references(args.baseline or NEWEST_MFLUX)
    arg = "--against" if args.against is not None else f"the committed save of mflux {args.baseline or NEWEST_MFLUX}"
    saved = {runs.name: (folder, runs) for folder, runs in model_runs.read_saved(root, arg)} if root.is_dir() else {}
    random = {variants.get(v).family: v for v in numbers.embedded_variants()}
    found = []
    for name in effect_models():
        family = variants.get(name).family
        if name not in saved and random.get(family) in saved:  # the older release ran the random model instead
            name = random[family]
        runs = model_runs.plan_model(name)
        if args.save is not None:
            check_resumable(args.save, runs)
        folder, previous = saved.get(runs.name, (None, None))
        if folder is not None and (why := model_runs.mismatch(previous, runs)) is not None:
            if args.against is not None:
                raise InputError(f"--against: {folder} recorded {name} otherwise ({why}); save it again")
            folder = None
        found.append((runs, folder))
    return tuple(found)


def check_resumable(save: Path, runs: model_runs.ModelRuns, arg: str = "--save") -> None:
    """A save folder (or the folder --against repeats runs into) may resume its own recording only."""
    folder = model_runs.folder_of(save, runs)
    previous = model_runs.read_runs(folder, arg)
    if previous is not None and (why := model_runs.mismatch(previous[1], runs)) is not None:
        raise InputError(f"{arg}: {folder} holds another recording of {runs.name} ({why}); choose a new folder")


def check_answers(out: Path, effect: tuple) -> None:
    """The folders --against answers its questions in (one per scale of a list of LoRA scales) resume their own
    runs and quality measurements only: refused before anything runs."""
    from calib.drift import quality, questions

    for runs, saved in effect:
        answer = questions.out_of(out, runs, len(effect))
        check_resumable(answer, runs, "--out")
        quality.check_resumable(out, model_runs.folder_of(answer, runs), runs, saved)


def check_quantizable(model: str, base_model: str | None, quantize: int | None) -> None:
    """Refuse bits an embedded model's layers cannot take before anything is written: else every run fails to
    load and the request reads as a release that broke the integration. The tiny model is built and quantized
    as the runs would (under a second); a full-size or mflux model takes every bit width mflux offers."""
    from teacache.loading import RANDOM_PREFIX, load_model, resolve_spec

    if quantize is None or model.startswith(RANDOM_PREFIX) or not resolve_spec(model, base_model).embedded:
        return
    try:
        load_model(model, base_model=base_model, quantize=quantize)
    except InputError as exc:
        if str(exc).startswith("--quantize:"):  # "--quantize: tiny-shapes cannot be quantized to 4 bits (...)"
            raise
    except Exception:  # noqa: BLE001, S110 - weights that do not load are the runs' finding, said by them
        pass


def own_effect(args: argparse.Namespace) -> tuple:
    """The user's model: planned for --save; for --against, the saved runs, checked against what was given, at the
    recipe asked (one question per scale of a list of LoRA scales)."""
    scales = lora_scale_list(args)
    options = {o: getattr(args, o) for o in GENERATION_OPTIONS}
    if scales is not None:  # the file is checked against the model once; each scale is a question of its own
        options["lora_scales"] = [scales[0]]
    wanted = model_runs.plan_model(args.model, base_model=args.base_model, **options)
    check_quantizable(args.model, args.base_model, args.quantize)
    if args.save is not None:
        check_resumable(args.save, wanted)
        return ((wanted, None),)
    folder, previous = _saved_runs(args, wanted)
    fields = {"size": ("width", "height"), "lora_paths": ("lora",), "lora_scales": ("lora",)}
    given = [f for o, v in options.items() if v is not None for f in fields.get(o, (o,))]
    # what was not given is taken from the save; the runs themselves (weights, prompts, seeds) must agree with
    # it; a recipe option given otherwise than saved asks the recipe question: the saved runs at that recipe
    keep = ("weights", "model", "base_model", "variant", *(f for f in given if f not in model_runs.RECIPE))
    check = model_runs.ModelRuns(**{**previous.__dict__, **{k: getattr(wanted, k) for k in keep}})
    if (why := model_runs.mismatch(previous, check)) is not None:
        raise InputError(f"--against: {folder} holds other runs of {wanted.name}: {why}; repeat them as saved")
    recipe = {f: getattr(wanted, f) for f in given if f in model_runs.RECIPE and f != "lora"}
    with_loras = wanted if "lora" in given else _saved_loras_here(previous, folder)
    asked = dataclasses.replace(previous, **recipe, **{f: getattr(with_loras, f) for f in model_runs.LORA_FIELDS})
    if scales is None:
        return ((asked, folder),)
    return tuple((dataclasses.replace(asked, lora_scales=(scale,)), folder) for scale in scales)


def _saved_runs(args: argparse.Namespace, wanted: model_runs.ModelRuns) -> tuple[Path, model_runs.ModelRuns]:
    """The finished save of the user's model in --against's folder, else one line saying why there is none."""
    if not args.against.is_dir():
        raise InputError(f"--against: {args.against} is not a folder; expected one that {PROG} --model --save wrote")
    saved = model_runs.read_saved(args.against, "--against")
    match = [(f, r) for f, r in saved if r.name == wanted.name]
    if not match:
        if wanted.name in model_runs.unfinished(args.against, "--against"):
            raise InputError(
                f"--against: the save of {wanted.name} in {args.against} did not finish; run the same --save again "
                "to resume it (under the release it was started with)"
            )
        held = ", ".join(r.name for _f, r in saved) or "nothing"
        raise InputError(f"--against: {args.against} holds no save of {wanted.name} (it holds {held})")
    return match[0]


def _saved_loras_here(previous: model_runs.ModelRuns, folder: Path) -> model_runs.ModelRuns:
    """A save's runs whose LoRAs are repeated as saved: their files must lie where the save found them, unchanged."""
    if not previous.lora_paths:
        return previous
    try:
        here = previous.loras.sha256
    except LoraError:
        here = None
    if here != previous.lora_sha256:
        raise InputError(
            f"--lora-paths: {folder} was saved with LoRA {model_runs.describe_loras(previous.lora_records)}, whose "
            f"file {', '.join(previous.lora_paths)} is gone or changed; name it (or another LoRA: the recipe "
            "question) with --lora-paths"
        )
    return previous


def lora_scale_list(args: argparse.Namespace) -> list[float] | None:
    """--lora-scales as a list of questions: several scales for one LoRA file with --against ask one question per
    scale; None where the scales are one per file (one recording). Any other count is refused in one line."""
    from calib.run.arguments import lora_scale_numbers

    paths, scales = args.lora_paths or [], lora_scale_numbers(args.lora_scales) or []
    if not paths or len(scales) <= 1 or len(scales) == len(paths):
        return None  # one recording: Loras checks the rest
    if len(paths) > 1:
        raise LoraError(
            f"--lora-scales: {len(scales)} scales for {len(paths)} LoRA files; a list of scales asks one question "
            "per scale of one LoRA file, so with several files give one scale per file"
        )
    if args.against is None:
        raise LoraError(
            f"--lora-scales: {len(scales)} scale(s) for 1 LoRA file(s); --save records one recording: give one "
            "scale per file (a list of scales for one file asks one question per scale of --against)"
        )
    for i, scale in enumerate(scales):
        if not math.isfinite(scale):
            raise LoraError(f"--lora-scales: expected finite numbers, got {scale!r}")
        if scale in scales[:i]:
            raise LoraError(f"--lora-scales: {scale:g} is given twice; each scale is one question")
    return scales
