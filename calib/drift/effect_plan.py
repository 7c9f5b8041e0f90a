"""Which runs the drift's effect compares: each family's effect model, or the user's own ``--model``, and the
save (``--save DIR`` before an upgrade, committed per release, or ``--against DIR``) it is judged against."""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

from calib.drift import model_runs, numbers
from teacache import variants
from teacache._compat import DRIFT_COMMAND as PROG
from teacache._compat import NEWEST_MFLUX
from teacache.errors import InputError
from teacache.io import read_json_object

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
    saved = {runs.name: folder for folder, runs in model_runs.read_saved(root, arg)} if root.is_dir() else {}
    random = {variants.get(v).family: v for v in numbers.embedded_variants()}
    found = []
    for name in effect_models():
        family = variants.get(name).family
        if name not in saved and random.get(family) in saved:  # the older release ran the random model instead
            name = random[family]
        runs = model_runs.plan_model(name)
        if args.save is not None:
            check_resumable(args.save, runs)
        folder = saved.get(runs.name)
        if folder is not None:
            previous = model_runs.ModelRuns.from_dict(read_json_object(folder / "settings.json"))
            if (why := model_runs.mismatch(previous, runs)) is not None:
                if args.against is not None:
                    raise InputError(f"--against: {folder} recorded {name} otherwise ({why}); save it again")
                folder = None
        found.append((runs, folder))
    return tuple(found)


def check_resumable(save: Path, runs: model_runs.ModelRuns) -> None:
    """A save folder may resume its own recording only."""
    path = model_runs.folder_of(save, runs) / "settings.json"
    if path.is_file():
        previous = model_runs.ModelRuns.from_dict(read_json_object(path))
        if (why := model_runs.mismatch(previous, runs)) is not None:
            raise InputError(
                f"--save: {path.parent} holds another recording of {runs.name} ({why}); choose a new folder"
            )


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
    """The user's model: planned for --save; for --against, the saved runs, checked against what was given."""
    options = {o: getattr(args, o) for o in GENERATION_OPTIONS}
    wanted = model_runs.plan_model(args.model, base_model=args.base_model, **options)
    check_quantizable(args.model, args.base_model, args.quantize)
    if args.save is not None:
        check_resumable(args.save, wanted)
        return ((wanted, None),)
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
    folder, previous = match[0]
    fields = {"size": ("width", "height")}
    given = [f for o, v in options.items() if v is not None for f in fields.get(o, (o,))]
    # what was not given is taken from the save; the runs themselves (weights, prompts, seeds) must agree with
    # it; a recipe option given otherwise than saved asks the recipe question: the saved runs at that recipe
    keep = ("weights", "model", "base_model", "variant", *(f for f in given if f not in model_runs.RECIPE))
    check = model_runs.ModelRuns(**{**previous.__dict__, **{k: getattr(wanted, k) for k in keep}})
    if (why := model_runs.mismatch(previous, check)) is not None:
        raise InputError(f"--against: {folder} holds other runs of {wanted.name}: {why}; repeat them as saved")
    recipe = {
        f: getattr(wanted, f) for f in given if f in model_runs.RECIPE and getattr(wanted, f) != getattr(previous, f)
    }
    here = {"lora_paths": wanted.lora_paths, "lora_scales": wanted.lora_scales}  # the same files, found here
    return ((dataclasses.replace(previous, **recipe, **here), folder),)
