"""The plan of one ``teacache-calib drift`` call: every argument checked, nothing loaded (``plan``), and the
folders ``--save`` wrote read back (``_read_folder``)."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from calib.drift import against, code, effect_plan, integrity, model_runs, noise, numbers, quality, questions
from calib.run import arguments
from teacache._compat import DRIFT_COMMAND, NEWEST_MFLUX
from teacache.errors import InputError

PROG = DRIFT_COMMAND


# what drift writes in --out and in --save (teacache.outputs: a folder new, empty or drift's own)
WRITES = arguments.Writes(
    PROG,
    names=("verdict.json", "numbers.json", "noise_floor.json", "effect", "progress.log", integrity.NAME,
           quality.SAVED_ARM, questions.FOLDERS),
)  # fmt: skip
SAVED_NUMBERS = ("numbers.json", "noise_floor.json")  # a --save folder's own files, sealed by its integrity.json


@dataclass(frozen=True)
class Plan:
    version: str
    out: Path
    baseline: str
    table: dict
    dtypes: tuple[str, ...]
    fullsize: bool
    code_only: bool
    oracles: bool
    against: Path | None
    save: Path | None
    floor_processes: int
    command: tuple[str, ...] = (PROG,)
    effect: tuple[tuple[model_runs.ModelRuns, Path | None], ...] = ()  # (runs, the saved folder to judge them by)
    own_model: bool = False
    shared_out: Path | None = None  # one question of several (a list of LoRA scales): the call's --out


def _read_folder(folder: Path, arg: str) -> tuple[dict, dict]:
    """numbers.json and noise_floor.json of a folder ``--save`` wrote."""
    if not folder.is_dir():
        raise InputError(f"{arg}: {folder} is not a folder; expected one that {PROG} --save wrote")
    if not (folder / "numbers.json").is_file() and model_runs.read_saved(folder, arg):
        raise InputError(f"{arg}: {folder} holds a --model save only; pass the same --model")
    found = []
    for name in SAVED_NUMBERS:
        if not (folder / name).is_file():
            raise InputError(f"{arg}: {folder} holds no {name}; expected a folder that {PROG} --save wrote")
    integrity.verify(folder, SAVED_NUMBERS, arg)
    for name, load in zip(SAVED_NUMBERS, (against.load_numbers, noise.load_floor), strict=True):
        path = folder / name
        try:
            found.append(load(path))
        except ValueError as exc:
            raise InputError(f"{arg}: {exc}") from None
    return found[0], found[1]


def plan(args: argparse.Namespace, command: list[str] | None = None) -> Plan:
    """Every argument checked, nothing loaded; ValueError with one line naming the argument."""
    version = metadata.version("mflux")
    table = code.load_table()
    baseline = args.baseline or NEWEST_MFLUX
    if baseline not in table["releases"]:
        raise InputError(
            f"--baseline: {baseline} is not a verified release; expected one of {', '.join(table['releases'])}"
        )
    default_dtypes = ("bfloat16",) if args.fullsize else numbers.DTYPES
    dtypes = tuple(d.strip() for d in args.dtypes.split(",")) if args.dtypes else default_dtypes
    if not dtypes or any(d not in numbers.DTYPES for d in dtypes):
        raise InputError(
            f"--dtypes: expected a comma-separated list of {', '.join(numbers.DTYPES)}, got {args.dtypes!r}"
        )
    if args.floor_processes < 2:
        raise InputError("--floor-processes: expected at least 2 (the floor is a distance between processes)")
    if args.code_only and (args.against or args.save or args.fullsize or args.model):
        raise InputError("--code-only: runs no model, so --against, --save, --fullsize and --model do not apply")
    given = [o for o in effect_plan.GENERATION_OPTIONS if getattr(args, o) is not None]
    if args.model is None and (given or args.base_model):
        name = (given or ["base-model"])[0].replace("_", "-")
        raise InputError(f"--{name}: only with --model (your own model's runs)")
    if args.model is not None:
        if args.fullsize:
            raise InputError("--fullsize: runs the random-weight models; with --model, name random-<variant> instead")
        if (args.save is None) == (args.against is None):
            raise InputError("--model: expected one of --save DIR (before an upgrade) or --against DIR (after it)")
        effect = effect_plan.own_effect(args)
    else:
        effect = () if args.code_only or args.fullsize else effect_plan.family_effect(args)
    if args.model is None and args.against is not None:
        against, _ = _read_folder(args.against, "--against")
        if bool(against["settings"].get("fullsize")) != args.fullsize:
            raise InputError(f"--against: {args.against} holds {'full-size' if args.fullsize is False else 'tiny'} "
                             "numbers; run with the same --fullsize")  # fmt: skip
    if args.save is not None:
        arguments.check_out_dir(args.save, "--save", writes=WRITES)
        if args.model is None and (args.save / "numbers.json").exists():
            raise InputError(f"--save: {args.save} already holds numbers.json; choose a new folder")
    out_dir = args.out or Path("runs") / f"drift-mflux-{version}"
    if args.against is not None and _same_folder(out_dir, args.against):
        raise InputError(f"--out: {out_dir} is the --against folder; the repeated runs need a folder of their own, "
                         "or drift would compare the save with itself")  # fmt: skip
    out = arguments.check_out_dir(out_dir, writes=WRITES)
    if args.model is not None and args.against is not None:
        effect_plan.check_answers(out, effect)
    return Plan(version=version, out=out, baseline=baseline, table=table, dtypes=dtypes, fullsize=args.fullsize,
                code_only=args.code_only, oracles=args.oracles, against=args.against, save=args.save,
                floor_processes=args.floor_processes, command=tuple(command or PROG.split()), effect=effect,
                own_model=args.model is not None)  # fmt: skip


def _same_folder(a: Path, b: Path) -> bool:
    """Whether two paths name one folder (through links and relative parts), existing or not."""
    return Path(a).expanduser().resolve() == Path(b).expanduser().resolve()
