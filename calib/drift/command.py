"""``teacache-calib drift``: what the installed mflux and MLX change for TeaCache, in code and in numbers.

Code: the AST fingerprints of the mflux functions the adapters hook, re-walk or read, against the table of
the verified releases (each function that differs from the nearest one, and where it last changed).
Numbers: every family's embedded random-weight model vanilla and recorded, in float32 and bfloat16,
against the baseline release's references on this hardware (or a folder ``--save`` wrote: ``--against``),
"moved" meaning above the measured noise floor. Where hooked code changed it runs the no-op oracles.
One verdict line per variant, ``verdict.json`` in ``--out``; exit 0 when nothing needs doing, 1 when a
variant needs a refit or its integration broke, 2 for bad input.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from calib.drift import code, noise, numbers, verdict
from calib.run import arguments
from calib.run.command import run_guarded
from teacache import coefficients, variants
from teacache._compat import NEWEST_MFLUX
from teacache.io import read_json_object, write_json
from teacache.provenance import collect, hardware_slug

PROG = "teacache-calib drift"
REFERENCES = noise.REFERENCES
VERDICT_FORMAT = 1


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
    parser.add_argument("--against", type=Path, metavar="DIR", help="compare with a folder --save wrote instead")
    parser.add_argument(
        "--save",
        type=arguments.path_argument,
        metavar="DIR",
        help="also measure the noise floor and write it with the numbers into DIR",
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
    return parser


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


def _read_folder(folder: Path, arg: str) -> tuple[dict, dict]:
    """numbers.json and noise_floor.json of a folder ``--save`` wrote."""
    if not folder.is_dir():
        raise ValueError(f"{arg}: {folder} is not a folder; expected one that {PROG} --save wrote")
    found = []
    for name, load in (("numbers.json", _load_numbers), ("noise_floor.json", noise.load_floor)):
        path = folder / name
        if not path.is_file():
            raise ValueError(f"{arg}: {folder} holds no {name}; expected a folder that {PROG} --save wrote")
        try:
            found.append(load(path))
        except ValueError as exc:
            raise ValueError(f"{arg}: {exc}") from None
    return found[0], found[1]


def _load_numbers(path: Path) -> dict:
    data = read_json_object(path)
    if data.get("format_version") != numbers.RESULT_FORMAT or not isinstance(data.get("runs"), dict):
        raise ValueError(f"{path}: not numbers of format_version {numbers.RESULT_FORMAT}")
    return data


def plan(args: argparse.Namespace, command: list[str] | None = None) -> Plan:
    """Every argument checked, nothing loaded; ValueError with one line naming the argument."""
    version = metadata.version("mflux")
    table = code.load_table()
    baseline = args.baseline or NEWEST_MFLUX
    if baseline not in table["releases"]:
        raise ValueError(
            f"--baseline: {baseline} is not a verified release; expected one of {', '.join(table['releases'])}"
        )
    default_dtypes = ("bfloat16",) if args.fullsize else numbers.DTYPES
    dtypes = tuple(d.strip() for d in args.dtypes.split(",")) if args.dtypes else default_dtypes
    if not dtypes or any(d not in numbers.DTYPES for d in dtypes):
        raise ValueError(
            f"--dtypes: expected a comma-separated list of {', '.join(numbers.DTYPES)}, got {args.dtypes!r}"
        )
    if args.floor_processes < 2:
        raise ValueError("--floor-processes: expected at least 2 (the floor is a distance between processes)")
    if args.code_only and (args.against or args.save or args.fullsize):
        raise ValueError("--code-only: runs no model, so --against, --save and --fullsize do not apply")
    if args.against is not None:
        against, _ = _read_folder(args.against, "--against")
        if bool(against["settings"].get("fullsize")) != args.fullsize:
            raise ValueError(f"--against: {args.against} holds {'full-size' if args.fullsize is False else 'tiny'} "
                             "numbers; run with the same --fullsize")  # fmt: skip
    if args.save is not None:
        arguments.check_out_dir(args.save, "--save")
        if (args.save / "numbers.json").exists():
            raise ValueError(f"--save: {args.save} already holds numbers.json; choose a new folder")
    out = arguments.check_out_dir(args.out or Path("runs") / f"drift-mflux-{version}")
    return Plan(version=version, out=out, baseline=baseline, table=table, dtypes=dtypes, fullsize=args.fullsize,
                code_only=args.code_only, oracles=args.oracles, against=args.against, save=args.save,
                floor_processes=args.floor_processes, command=tuple(command or PROG.split()))  # fmt: skip


# ------------------------------------------------------------------------------------------ comparison


def comparable(current: dict, reference: dict) -> bool:
    keys = ("steps", "width", "height", "prompt", "seed", "fullsize", "sketch_size", "blocks")
    return all(current["settings"].get(k) == reference["settings"].get(k) for k in keys)


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
    return notes


def compare_numbers(current: dict, reference: dict, floor: dict) -> dict:
    """Per run (variant/dtype): each metric's distance, its threshold from the floor, and whether it moved."""
    result = {}
    for key, run in current["runs"].items():
        ref = reference["runs"].get(key)
        if not numbers.comparable(run, ref) or run["dtype"] not in floor["floor"]:
            continue
        metrics = {}
        for metric, distance in numbers.distances(run, ref).items():
            limit = noise.threshold(floor, run["dtype"], metric)
            metrics[metric] = {"distance": distance, "threshold": limit, "moved": distance > limit}
        result[key] = {
            "variant": run["variant"],
            "dtype": run["dtype"],
            "identical": all(run[p]["sha256"] == ref[p]["sha256"] for p in ("vanilla", "recorded")),
            "moved": any(m["moved"] for m in metrics.values()),
            "metrics": metrics,
        }
    return result


def moved_by_family(comparison: dict | None, dtypes: tuple[str, ...]) -> dict[str, dict[str, bool] | None]:
    result: dict[str, dict[str, bool] | None] = {fam.name: None for fam in variants.families()}
    if comparison is None:
        return result
    for run in comparison.values():
        family = variants.get(run["variant"]).family
        result[family] = (result[family] or {}) | {run["dtype"]: run["moved"]}
    return {fam: ({d: m[d] for d in dtypes if d in m} or None) if m else None for fam, m in result.items()}


def ratios_by_family(comparison: dict | None) -> dict[str, dict[str, float]]:
    """Per family and dtype, the largest distance / threshold over the metrics (above 1: moved)."""
    result: dict[str, dict[str, float]] = {}
    for run in (comparison or {}).values():
        worst = max(m["distance"] / m["threshold"] for m in run["metrics"].values())
        slot = result.setdefault(variants.get(run["variant"]).family, {})
        slot[run["dtype"]] = max(slot.get(run["dtype"], 0.0), worst)
    return result


def numbers_errors(current: dict | None) -> dict[str, str]:
    """The first error of each family whose model failed to build or run."""
    errors: dict[str, str] = {}
    for run in (current or {}).get("runs", {}).values():
        if "error" in run:
            errors.setdefault(variants.get(run["variant"]).family, f"{run['variant']} {run['dtype']}: {run['error']}")
    return errors


def committed_references(slug: str) -> dict[str, dict]:
    """The committed numbers of every verified release on this hardware, by release."""
    folder = REFERENCES / slug
    return {p.stem.removeprefix("mflux-"): _load_numbers(p) for p in sorted(folder.glob("mflux-*.json"))}


def reference_for(plan_: Plan, slug: str, current: dict) -> tuple[str, dict, dict] | None:
    """(label, numbers, floor) to judge by: --against's folder, else the baseline's committed references."""
    if plan_.against is not None:
        ref, floor = _read_folder(plan_.against, "--against")
        return str(plan_.against), ref, floor
    refs = committed_references(slug)
    path = noise.floor_path(slug)
    ref = refs.get(plan_.baseline)
    if ref is None or not path.is_file() or not comparable(current, ref):
        return None
    return f"mflux {plan_.baseline} ({slug})", ref, noise.load_floor(path)


# ------------------------------------------------------------------------------------------ running


def run_drift(plan_: Plan) -> dict:
    code_report = code.installed_report(plan_.table)
    for line in code_report["lines"]:
        print(f"code: {line}")
    slug = hardware_slug()
    current = comparison = reference_label = None
    by_release = {}
    if not plan_.code_only:
        current = numbers.run_numbers(
            plan_.fullsize, plan_.dtypes, progress=lambda s: print(f"running {s}", file=sys.stderr)
        )
        current["provenance"] = collect(list(plan_.command), hardware=slug)
        write_json(plan_.out / "numbers.json", current)
        chosen = reference_for(plan_, slug, current)
        if chosen is not None:
            reference_label, ref, floor = chosen
            comparison = compare_numbers(current, ref, floor)
        if plan_.against is None and noise.floor_path(slug).is_file():
            floor = noise.load_floor(noise.floor_path(slug))
            for release, ref in committed_references(slug).items():
                if comparable(current, ref):
                    by_release[release] = compare_numbers(current, ref, floor)
    moved = moved_by_family(comparison, plan_.dtypes)
    evidence = {}
    embedded = {variants.get(v).family: v for v in numbers.embedded_variants()}
    errors = numbers_errors(current)
    for family, changed in code_report["families"].items():
        oracles, error = None, errors.get(family)
        if not plan_.code_only and (changed or plan_.oracles) and family in embedded:
            from calib.drift.oracles import run_oracles

            try:
                oracles = None if error else run_oracles(embedded[family])
            except Exception as exc:  # noqa: BLE001 - any failure of the integration is the finding
                error = f"{type(exc).__name__}: {exc}"
        evidence[family] = verdict.FamilyEvidence(
            family, changed, moved.get(family), oracles, error, ratios_by_family(comparison).get(family)
        )
    results = verdict.verdicts(variants.all_specs(), evidence, plan_.version, packaged_notes(plan_))
    for result in results:
        print(result["line"])
        for command in result["commands"]:
            print(f"    {command}")
    report = {
        "format_version": VERDICT_FORMAT,
        "mflux": plan_.version,
        "mlx": metadata.version("mlx"),
        "hardware": slug,
        "baseline": reference_label,
        "code": code_report,
        "numbers": comparison,
        "numbers_by_release": by_release,
        "verdicts": results,
        "exit_status": verdict.exit_status(results),
        "provenance": collect(list(plan_.command), hardware=slug),
    }
    write_json(plan_.out / "verdict.json", report)
    print(f"wrote {plan_.out / 'verdict.json'}")
    if plan_.save is not None and current is not None:
        floor = noise.measure(plan_.floor_processes, plan_.fullsize)
        write_json(plan_.save / "noise_floor.json", floor)
        write_json(plan_.save / "numbers.json", current)
        print(f"wrote {plan_.save}: numbers.json and noise_floor.json (for --against after an upgrade)")
    return report


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = setup_arg_parser().parse_args(argv)
    command = [*PROG.split(), *argv]  # as typed: sys.argv[0] would be the interpreter's path to the script
    code_, report = run_guarded(PROG, lambda: run_drift(plan(args, command)))
    return code_ if report is None else report["exit_status"]


if __name__ == "__main__":
    sys.exit(main())
