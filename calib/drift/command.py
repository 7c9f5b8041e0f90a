"""``teacache-calib drift``: what the installed mflux and MLX change for TeaCache, and whether that matters.

Detection. Code: the AST fingerprints of the mflux functions the adapters hook, re-walk or read, against the
table of the verified releases. Numbers: every family's embedded random-weight model vanilla and recorded, in
float32 and bfloat16, against the baseline release's references on this hardware (or a folder ``--save``
wrote: ``--against``), "moved" meaning above the measured noise floor. Where hooked code changed it runs the
no-op oracles.
Effect (:mod:`calib.drift.effect`). A few runs of each family's effect model (its drift subject, else the
trained embedded model where the family has one), or of the user's own ``--model``, recorded and compared
with the same runs recorded before: what a calibrated gate decides on them and how well it fits them, against a
tolerance measured on the before traces. ``--save DIR`` before an upgrade records them (with their gate and
tolerance); ``--against DIR`` after it repeats exactly those runs, or asks a recipe question: the same runs at
other steps, size, guidance, quantization or with a LoRA (several LoRA scales: one question each,
:mod:`calib.drift.questions`), with the quality at the default threshold beside it (:mod:`calib.drift.quality`).
One verdict line per variant, ``verdict.json`` in ``--out``; exit 0 when nothing needs doing, 1 when a variant
needs a refit or its integration broke, 2 for bad input.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from dataclasses import dataclass, field, replace
from importlib import metadata
from pathlib import Path

from calib.drift import against, code, effect_plan, integrity, model_runs, noise, numbers, quality, questions, verdict
from calib.drift.plan import SAVED_NUMBERS, Plan, _read_folder, plan
from calib.run import arguments
from calib.run import command as ending
from calib.run.folder import RunFolder
from calib.run.interrupts import Interrupted
from teacache import coefficients, variants
from teacache._compat import DRIFT_COMMAND
from teacache.errors import InputError
from teacache.io import write_json
from teacache.provenance import collect, hardware_slug

PROG = DRIFT_COMMAND
FOLDER = RunFolder(PROG)  # --out and --save: one writer each; progress.log in the folder runs are saved to


def setup_arg_parser() -> argparse.ArgumentParser:
    parser = arguments.CommandParser(prog=PROG, description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--out",
        type=arguments.path_argument,
        help="folder for verdict.json and numbers.json (default: runs/drift-mflux-<version>)",
    )
    parser.add_argument(
        "--baseline",
        help="the verified release whose references the numbers are compared with (default: the release the "
        "packaged coefficients are verified with)",
    )
    parser.add_argument(
        "--against", type=Path, metavar="DIR", help="after an upgrade: repeat and judge the runs a --save wrote in DIR"
    )
    parser.add_argument(
        "--save",
        type=arguments.path_argument,
        metavar="DIR",
        help="before an upgrade: write the numbers and their noise floor, and the effect models' runs with their "
        "calibrated gate and measured tolerance, into DIR (resumable)",
    )
    parser.add_argument(
        "--fullsize",
        action="store_true",
        help="each family's full-size random-weight model (random-<variant>, bfloat16)",
    )
    parser.add_argument("--dtypes", help="comma-separated: float32,bfloat16 (default: both; bfloat16 with --fullsize)")
    parser.add_argument("--code-only", action="store_true", help="fingerprints only: run no model")
    parser.add_argument("--oracles", action="store_true", help="run the no-op oracles for every family")
    parser.add_argument("--floor-processes", type=int, default=3, help="processes --save measures the floor with")
    mine = parser.add_argument_group(
        "your own model (with --save DIR before an upgrade, --against DIR after it)",
        "the runs are recorded at the model's own recipe unless given; --against repeats the saved prompts and "
        "seeds, at the saved recipe unless --steps, --size, --guidance, --quantize or a LoRA (--lora-paths) ask "
        "another one (then the verdict says whether the saved calibration serves that recipe, and what TeaCache "
        "costs in SSIM at the default threshold at both); with one LoRA file, a list of --lora-scales asks one "
        "question per scale, each answered in --out/lora-scale-S/",
    )
    mine.add_argument("--model", help="a variant or mflux name, or a local folder of mflux-format weights")
    mine.add_argument("--base-model", help="the architecture of a local model folder (e.g. dev)")
    mine.add_argument(
        "--prompts", help=f"a built-in set or a prompt file (default: the first {model_runs.DEFAULT_PROMPTS} of "
        "the model's own set)"
    )  # fmt: skip
    mine.add_argument("--seeds", help=f"comma-separated or ranges (default: {model_runs.DEFAULT_SEEDS})")
    mine.add_argument("--steps", type=int, help="default: the model's own")
    mine.add_argument("--size", help="WIDTHxHEIGHT (default: the model's own)")
    mine.add_argument("--guidance", type=float, help="default: the model's own")
    mine.add_argument("--quantize", type=int, choices=(3, 4, 5, 6, 8))
    arguments.add_lora_arguments(mine)
    return parser


# ------------------------------------------------------------------------------------------ measure


@dataclass(frozen=True)
class Measured:
    """Everything one question measured, before any of it is judged: what the judge reads and the write stage
    saves."""

    code: dict  # calib.drift.code.installed_report
    numbers: dict | None = None  # this run's numbers, with their provenance (numbers.json); None: none run
    comparison: dict | None = None  # the numbers against the reference judged by
    reference: str | None = None  # what the numbers or traces were judged against
    by_release: dict = field(default_factory=dict)  # the numbers against every committed release of this hardware
    effects: dict[str, dict] = field(default_factory=dict)  # by family
    effect_errors: dict[str, str] = field(default_factory=dict)  # by family: an effect model that failed
    errors: dict[str, str] = field(default_factory=dict)  # by family: any run that raised (numbers, effect, oracles)
    oracles: dict[str, dict] = field(default_factory=dict)  # by family: the no-op oracles, where run
    floor: dict | None = None  # --save: the noise floor of the numbers


def run_effect(plan_: Plan) -> tuple[dict[str, dict], dict[str, str]]:
    """Record each effect model's runs (into --save, else --out) and judge them by their saved folder.

    A trained effect model whose weights do not load under the installed release (a trained FLUX.1 model's
    norm_out bias under mflux 0.21) is replaced by its family's random-weight model. Returns (effect by family,
    error by family); Ctrl-C says what is saved."""
    root = plan_.save if plan_.save is not None else plan_.out
    log = FOLDER.logger(root, sys.stderr)
    effects: dict[str, dict] = {}
    errors: dict[str, str] = {}
    for runs, saved in plan_.effect:
        family = variants.get(runs.variant).family
        try:
            effect = _effect_of(plan_, runs, saved, root, log)
        except model_runs.ModelUnavailable as exc:
            fallback = dict((variants.get(v).family, v) for v in numbers.embedded_variants()).get(family)
            if plan_.own_model or fallback in (None, runs.name):
                errors[family] = str(exc)
                log(f"{runs.name}: failed: {exc}")
                continue
            log(f"{exc}; the {family} effect model is {fallback} instead")
            runs = model_runs.plan_model(fallback)
            try:
                effect = _effect_of(plan_, runs, _saved_for(plan_, runs), root, log)
            except model_runs.ModelUnavailable as again:
                errors[family] = str(again)
                log(f"{fallback}: failed: {again}")
                continue
        except Exception as exc:  # noqa: BLE001 - a release that breaks a family is a finding, not a crash
            if isinstance(exc, Interrupted | InputError):  # a damaged save is not a broken release
                raise
            errors[family] = f"{runs.name}: {type(exc).__name__}: {exc}"
            log(f"{runs.name}: failed: {errors[family]}")
            continue
        if effect is not None:
            effects[family] = effect
    return effects, errors


def _saved_for(plan_: Plan, runs: model_runs.ModelRuns) -> Path | None:
    """The finished save of exactly these runs in --against's folder (or the baseline's committed one)."""
    root = plan_.against if plan_.against is not None else effect_plan.effect_references(plan_.baseline)
    for folder, previous in model_runs.read_saved(root, "--against") if root.is_dir() else []:
        if previous.name == runs.name and model_runs.mismatch(previous, runs) is None:
            return folder
    return None


def _effect_of(plan_: Plan, runs: model_runs.ModelRuns, saved: Path | None, root: Path, log) -> dict | None:
    folder = model_runs.folder_of(root, runs)

    def stopped() -> str:
        done = len(list((folder / "runs").glob("*.json")))
        return FOLDER.stopped(done, len(runs.runs), folder / "runs", f"runs of {runs.name}")

    with FOLDER.interruptible(stopped):
        model_runs.record(
            runs, folder, log, rerun=plan_.save is not None, arg="--out" if plan_.save is None else "--save"
        )
    if plan_.save is not None:
        model_runs.conclude(folder, runs, log, list(plan_.command))
    if saved is None:
        return None
    effect = model_runs.compare(saved, runs, folder) | {"own_model": plan_.own_model}
    if effect.get("recipe"):  # the saved runs at another recipe: what the gate costs at each, in images
        with FOLDER.interruptible(lambda: f"interrupted: the quality runs measured are saved under {root}; run the "
                                  "same command again to resume"):  # fmt: skip
            effect["quality"] = quality.of_question(saved, runs, folder, plan_.shared_out or plan_.out, log)
    log(f"{runs.name}: {effect['verdict']}")
    return effect


def _say_running(what: str) -> None:
    print(f"running {what}", file=sys.stderr)


def _measure_numbers(plan_: Plan, slug: str) -> Measured:
    """The embedded models' numbers, compared with --against's folder, else with every committed release of this
    hardware (the baseline's the one judged by)."""
    current = numbers.run_numbers(plan_.fullsize, plan_.dtypes, progress=_say_running)
    current["provenance"] = collect(list(plan_.command), hardware=slug)
    if plan_.against is not None:
        ref, floor = _read_folder(plan_.against, "--against")
        return Measured({}, current, against.compare_numbers(current, ref, floor), str(plan_.against))
    if not noise.floor_path(slug).is_file():
        return Measured({}, current)
    floor = noise.load_floor(noise.floor_path(slug))
    by_release = {
        release: against.compare_numbers(current, ref, floor)
        for release, ref in against.committed_references(slug).items()
        if against.comparable(current, ref)
    }
    reference = f"mflux {plan_.baseline} ({slug})" if plan_.baseline in by_release else None
    return Measured({}, current, by_release.get(plan_.baseline), reference, by_release)


def _in_scope(plan_: Plan, family: str) -> bool:
    """Whether a family is judged: every one, or with --model only the model's own."""
    return not plan_.own_model or family in {variants.get(r.variant).family for r, _ in plan_.effect}


def _run_oracles(plan_: Plan, code_report: dict, errors: dict[str, str]) -> tuple[dict[str, dict], dict[str, str]]:
    """The no-op oracles of every family in scope whose hooked code changed (every one with --oracles) and whose
    runs did not fail: (result by family, error by family)."""
    if plan_.code_only:
        return {}, {}
    embedded = {variants.get(v).family: v for v in numbers.embedded_variants()}
    found, failed = {}, {}
    for family, changed in code_report["families"].items():
        if _in_scope(plan_, family) and (changed or plan_.oracles) and family in embedded and family not in errors:
            from calib.drift.oracles import run_oracles

            try:
                found[family] = run_oracles(embedded[family])
            except Exception as exc:  # noqa: BLE001 - any failure of the integration is the finding
                failed[family] = f"{type(exc).__name__}: {exc}"
    return found, failed


def measure(plan_: Plan, code_report: dict) -> Measured:
    """Numbers, effect models, oracles and (with --save) the noise floor of one question; the effect runs are
    recorded into their folders as they finish, so a stopped call resumes."""
    slug = hardware_slug()
    measured = Measured(code_report)
    if not plan_.code_only and not plan_.own_model:
        measured = replace(_measure_numbers(plan_, slug), code=code_report)
    effects, effect_errors = run_effect(plan_)
    reference = str(plan_.against) if plan_.own_model and plan_.against is not None else measured.reference
    errors = {**against.numbers_errors(measured.numbers), **effect_errors}
    oracles, oracle_errors = _run_oracles(plan_, code_report, errors)
    floor = None
    if plan_.save is not None and measured.numbers is not None:
        floor = noise.measure(plan_.floor_processes, plan_.fullsize)
    return replace(measured, reference=reference, effects=effects, effect_errors=effect_errors,
                   errors=errors | oracle_errors, oracles=oracles, floor=floor)  # fmt: skip


# ------------------------------------------------------------------------------------------ judge


def packaged_notes(plan_: Plan) -> dict[str, str]:
    """Per variant with packaged coefficients: whether the installed mflux runs its family on another numeric
    path than the release those coefficients were fitted on (in any of the dtypes checked)."""
    notes = {}
    for spec in variants.all_specs():
        if not spec.coefficients:
            continue
        by_dtype = {d: coefficients.numeric_change_note(spec.name, plan_.version, d) for d in plan_.dtypes}
        moved_in = [d for d, note in by_dtype.items() if note]
        if len(moved_in) == len(plan_.dtypes):  # every dtype checked: one note without a dtype
            notes[spec.name] = coefficients.numeric_change_note(spec.name, plan_.version)
        elif moved_in:
            notes[spec.name] = " ".join(by_dtype[d] for d in moved_in)
    # drift is the command that says it: the note names the evidence here instead of the command
    here = "judge it by the effect on a calibrated gate (drift --model VARIANT --save DIR / --against DIR)"
    return {name: note.replace(f"check with `{DRIFT_COMMAND}`", here) for name, note in notes.items()}


def _before_upgrade(plan_: Plan, measured: Measured) -> bool:
    """A save of the user's own model that finished: nothing to judge until after the upgrade."""
    return plan_.own_model and plan_.save is not None and not measured.effect_errors


def judge(plan_: Plan, measured: Measured) -> verdict.Verdict:
    """The verdict of every variant in scope, from what was measured; reads no model and writes nothing."""
    moved = against.moved_by_family(measured.comparison, plan_.dtypes)
    ratios = against.ratios_by_family(measured.comparison)
    evidence = {
        family: verdict.FamilyEvidence(family, changed, moved.get(family), measured.oracles.get(family),
                                       measured.errors.get(family), ratios.get(family), measured.effects.get(family))
        for family, changed in measured.code["families"].items()
        if _in_scope(plan_, family)
    }  # fmt: skip
    specs = [variants.get(r.variant) for r, _ in plan_.effect] if plan_.own_model else variants.all_specs()
    if _before_upgrade(plan_, measured):
        specs, evidence = [], {}
    results = tuple(verdict.verdicts(specs, evidence, plan_.version, packaged_notes(plan_)))
    slug = hardware_slug()
    return verdict.Verdict(plan_.version, metadata.version("mlx"), slug, measured.reference, measured.code,
                           measured.comparison, measured.by_release, measured.effects, results,
                           collect(list(plan_.command), hardware=slug))  # fmt: skip


# ------------------------------------------------------------------------------------------ write


def write(plan_: Plan, measured: Measured, result: verdict.Verdict) -> None:
    """Say the verdicts and write them to --out (with the numbers), and with --save the numbers and their floor."""
    if _before_upgrade(plan_, measured):
        for runs, _ in plan_.effect:
            print(f"{runs.name}: saved; after the upgrade: {PROG} --model {runs.model} --against {plan_.save}")
    for found in result.verdicts:
        print(found["line"])
        for command in found["commands"]:
            print(f"    {command}")
    if measured.numbers is not None:
        write_json(plan_.out / "numbers.json", measured.numbers)
    write_json(plan_.out / "verdict.json", result.to_json())
    print(f"wrote {plan_.out / 'verdict.json'}")
    if plan_.save is not None and measured.floor is not None:
        write_json(plan_.save / "noise_floor.json", measured.floor)
        write_json(plan_.save / "numbers.json", measured.numbers)
        integrity.write(plan_.save, SAVED_NUMBERS)
        print(f"wrote {plan_.save}: numbers.json and noise_floor.json (for --against after an upgrade)")
    if plan_.save is not None:
        _say_saved(plan_)


def _say_saved(plan_: Plan) -> None:
    """Name what the save holds now: the models whose save finished (sealed), and those that did not."""
    done, started = [], []
    for runs, _ in plan_.effect:
        folder = model_runs.folder_of(plan_.save, runs)
        (done if (folder / integrity.NAME).is_file() else started if folder.is_dir() else []).append(runs.name)
    if done:
        print(f"wrote {plan_.save / 'effect'}: the runs, gate and tolerance of {', '.join(done)} (for --against "
              "after it)")  # fmt: skip
    if started:
        print(f"not saved: {', '.join(started)} (failed: see above; {plan_.save / 'effect'} holds only what ran)")


# ------------------------------------------------------------------------------------------ the pipeline


def answer(plan_: Plan, code_report: dict) -> verdict.Verdict:
    """One question: measured, judged, then written."""
    measured = measure(plan_, code_report)
    result = judge(plan_, measured)
    write(plan_, measured, result)
    return result


def run_drift(plan_: Plan) -> int:
    """The planned drift in the folders it writes (locked): its exit status."""
    with contextlib.ExitStack() as stack:
        stack.enter_context(FOLDER.lock(plan_.out, " ".join(plan_.command)))
        if plan_.save is not None:
            stack.enter_context(FOLDER.lock(plan_.save, " ".join(plan_.command)))
        code_report = code.installed_report(plan_.table)
        for line in code_report["lines"]:
            print(f"code: {line}")
        if plan_.own_model and len(plan_.effect) > 1:  # a list of LoRA scales: each answered in a folder of its own
            provenance = collect(list(plan_.command), hardware=hardware_slug())
            return questions.answer_each(plan_, lambda one: answer(one, code_report), provenance)
        return answer(plan_, code_report).exit_status


@ending.command(PROG)
def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = setup_arg_parser().parse_args(argv)
    typed = [*PROG.split(), *argv]  # as typed: sys.argv[0] would be the interpreter's path to the script
    return run_drift(plan(args, typed))
