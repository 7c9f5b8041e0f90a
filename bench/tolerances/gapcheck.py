"""``teacache-bench gapcheck``: do the tolerances separate measured noise from real bugs?

Runs the correct wrapper and each deliberately broken one (``bench.tolerances.mutants``) on the same prompts
and seeds, at the settings a generated tolerance module was measured with, and reports for every
tolerance the correct wrapper's values (the noise), each mutant's value and whether the tolerance
separates them. A tolerance that catches none of the mutants it exists for is flagged, and so is a
mutant no tolerance catches. Either, or a tolerance the correct wrapper fails, is a finding: the tolerances do
not do their job there, and the command ends with exit status 1 (after writing its report) so that a script
or CI run cannot take it for a pass.
"""

from __future__ import annotations

import json
import sys
import warnings
from pathlib import Path

import mlx.core as mx
import pandas as pd
from rich.console import Console
from rich.table import Table

from bench.quality.metrics import image_metrics, latent_metrics
from bench.report import markdown
from bench.tolerances.derive import PROJECT_ROOT, check_constants, check_run, load_module, prefix
from bench.tolerances.mutants import MUTANTS, Mutant, apply_mutant, leftovers
from calib.run import arguments
from calib.run.arguments import CommandParser, Writes, path_argument
from calib.run.command import command
from calib.run.generation import generate
from calib.run.progress import track
from calib.run.prompts import pair_id, parse_seeds
from teacache import apply_teacache
from teacache.core import StepController
from teacache.errors import InputError
from teacache.gate import GateConfig
from teacache.io import json_text, write_json, write_text
from teacache.loading import resolve_spec
from teacache.provenance import collect, hardware_slug, tolerance_module_name
from teacache.rescale import RescaleFunction
from teacache.variants import variant_of

TOLERANCES = ("proxy_noop", "ssim_floor", "psnr_floor", "skip_band", "restore")
CORRECT = "correct"


EXIT_FINDING = 1  # a tolerance flagged, failed by the correct wrapper, or a mutant no tolerance catches


def setup_arg_parser() -> CommandParser:
    parser = CommandParser(
        prog="teacache-bench gapcheck",
        description=__doc__.split("\n\n")[0],
        epilog="exit status: 0 when every tolerance passes the correct wrapper and catches a mutant it exists for "
        f"and every mutant is caught; {EXIT_FINDING} when one is not (a finding, listed on stdout and in gapcheck.md); "
        "2 for bad input",
    )
    arguments.add_model_arguments(parser)
    parser.add_argument("--tolerances", type=Path, default=None, help="default: tests/tolerances/<hardware>.py")
    parser.add_argument("--seeds", default="0")
    parser.add_argument("--max-prompts", type=int, default=4, help="the first N prompts of the set")
    parser.add_argument("--out", type=path_argument, required=True, help="folder for gapcheck.md and gapcheck.json")
    parser.add_argument(
        "--render-only",
        action="store_true",
        help="rebuild OUT/gapcheck.md from OUT/gapcheck.json (a finished gap check) without running a model",
    )
    return parser


def _force_restore(model, original) -> None:
    """Undo whatever a broken restore left behind, so the next mutant starts clean."""
    model.transformer = original
    if "_predict" in vars(model):
        object.__delattr__(model, "_predict")
    registry = model.callbacks

    for lst in (registry.before_loop, registry.in_loop, registry.after_loop, registry.interrupt):
        lst[:] = [c for c in lst if not isinstance(c, StepController)]


def measure(model, mutant: Mutant | None, settings: dict, args: tuple, vanilla) -> dict:
    """One wrapper (correct when mutant is None) on one pair: quality, skips, proxy no-op, restore."""
    rescale = RescaleFunction.from_dict(settings["rescale"])
    steps = settings["steps"]
    original = model.transformer
    row: dict = {}
    for noop in (False, True):
        config = GateConfig(
            settings["threshold"], rescale, skip_first_n_steps=steps if noop else settings["skip_first_n_steps"]
        )
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if mutant is None:
                handle = apply_teacache(
                    model, config.rel_l1_thresh, rescale, skip_first_n_steps=config.skip_first_n_steps
                )
            else:
                handle = apply_mutant(model, mutant, config)
            try:
                gen = generate(model, *args)
            finally:
                handle.restore()
        left = leftovers(model, original)
        after = generate(model, *args)
        bit_exact_after = bool(mx.array_equal(after.latents, vanilla.latents).item())
        if left:
            _force_restore(model, original)
        lat = latent_metrics(gen.latents, vanilla.latents)
        if noop:
            row.update(proxy_noop_bit_exact=bool(mx.array_equal(gen.latents, vanilla.latents).item()),
                       proxy_noop_cosine=lat["cosine"], proxy_noop_max_abs=lat["max_abs"])  # fmt: skip
        else:
            row.update(skipped=handle.stats.skipped, **image_metrics(gen.image, vanilla.image))
            row.update(restore_ok=bit_exact_after and not left, leftovers=", ".join(left))
    return row


def check_args(args) -> tuple[Path, dict[str, str], list[int]]:
    """Every argument before the model loads: (tolerance module, prompts, seeds); ValueError names the argument.
    The module is imported and the model's constants in it checked here too: a broken one costs no model run."""
    arguments.check_model(args.model, args.base_model)
    arguments.check_at_least(args.max_prompts, 1, "--max-prompts")
    seeds = parse_seeds(args.seeds)
    prompts = arguments.read_prompts(args.prompts, args.model, args.base_model)
    tol_path = args.tolerances or PROJECT_ROOT / "tests" / "tolerances" / f"{tolerance_module_name(hardware_slug())}.py"
    if args.tolerances is None and not tol_path.is_file():
        raise InputError(
            f"--tolerances: no tolerance module for this hardware ({tol_path.name}); derive one first "
            "(teacache-bench tolerances, docs/tolerances.md: Re-derive tolerances on new hardware) or name one"
        )
    arguments.check_input_file(tol_path, "--tolerances")
    check_constants(load_module(tol_path), resolve_spec(args.model, args.base_model).name, tol_path)
    return tol_path, prompts, seeds


def run_gapcheck(args) -> dict:
    tol_path, prompts, seeds = check_args(args)
    tol = load_module(tol_path)
    model = arguments.load_model(args.model, args.base_model, None)
    variant = variant_of(model)
    p = prefix(variant)
    check_constants(tol, variant, tol_path)
    settings = getattr(tol, f"{p}_SETTINGS")
    width, height = (int(v) for v in settings["resolution"].split("x"))
    pairs = [(pid, text, s) for pid, text in list(prompts.items())[: args.max_prompts] for s in seeds]
    rows = []
    log = Path(args.out) / "progress.log"
    with track("gapcheck", len(pairs) * (len(MUTANTS) + 1), "wrapper runs", log=log) as progress:
        for pid, text, seed in pairs:
            gen_args = (text, seed, settings["steps"], width, height, settings["guidance"])
            generate(model, *gen_args)  # warm-up: the first run after an eager one can differ (docs/hardware.md)
            vanilla = generate(model, *gen_args)
            for mutant in (None, *MUTANTS):
                row = measure(model, mutant, settings, gen_args, vanilla)
                row.update(wrapper=mutant.name if mutant else CORRECT, pair=pair_id(pid, seed))
                row.update({f"ok_{k}": v for k, v in check_run(tol, variant, row).items()})
                rows.append(row)
                progress.advance()
    frame = pd.DataFrame(rows)
    return {"variant": variant, "tolerances": str(tol_path), "frame": frame, "tol": tol, "settings": settings}


def summarize(result: dict) -> dict:
    """Per tolerance: noise, each mutant's worst value, and whether it separates them."""
    frame, variant = result["frame"], result["variant"]
    value_of = {"proxy_noop": "proxy_noop_max_abs", "ssim_floor": "ssim", "psnr_floor": "psnr",
                "skip_band": "skipped", "restore": "restore_ok"}  # fmt: skip
    correct = frame[frame["wrapper"] == CORRECT]
    table = {}
    for name in TOLERANCES:
        col = f"ok_{name}"
        if col not in frame:
            continue
        entry = {"noise_passes": bool(correct[col].all()), "noise": _describe(correct[value_of[name]]), "mutants": {}}
        for mutant in MUTANTS:
            sub = frame[frame["wrapper"] == mutant.name]
            caught = not bool(sub[col].all())
            entry["mutants"][mutant.name] = {"value": _describe(sub[value_of[name]]), "caught": caught,
                                             "exists_for": name in mutant.caught_by}  # fmt: skip
        meant = [m for m, v in entry["mutants"].items() if v["exists_for"]]
        entry["separates"] = entry["noise_passes"] and any(entry["mutants"][m]["caught"] for m in meant)
        entry["flag"] = bool(meant) and not any(entry["mutants"][m]["caught"] for m in meant)
        table[name] = entry
    uncaught = [m.name for m in MUTANTS if not any(t["mutants"][m.name]["caught"] for t in table.values())]
    return {"variant": variant, "tolerances": result["tolerances"], "table": table, "uncaught_mutants": uncaught,
            "pairs": sorted(frame["pair"].unique())}  # fmt: skip


def _describe(values: pd.Series) -> str:
    v = values.dropna()
    if v.empty:
        return "-"
    if v.dtype == bool:
        return f"{int(v.sum())}/{len(v)} ok"
    v = v.astype(float)
    return f"{v.min():.6g}..{v.max():.6g}" if v.min() != v.max() else f"{v.min():.6g}"


def _mutant_cells(entry: dict) -> list[str]:
    """One cell per mutant: its values, caught or passes, and *for* where the tolerance exists to catch it."""
    cells = []
    for m in MUTANTS:
        v = entry["mutants"][m.name]
        mark = "**caught**" if v["caught"] else "passes"
        cells.append(f"{v['value']} {mark}{' *for*' if v['exists_for'] else ''}")
    return cells


def render_markdown(summary: dict, provenance: dict) -> str:
    """gapcheck.md: a row per tolerance (in TOLERANCES order), a column per mutant, and the verdicts."""
    table = [(name, summary["table"][name]) for name in TOLERANCES if name in summary["table"]]
    return markdown.render(
        "gapcheck.md.j2",
        summary=summary,
        provenance=provenance,
        tolerances_name=Path(summary["tolerances"]).name,
        mutants=[m.name for m in MUTANTS],
        table=table,
        mutant_cells=_mutant_cells,
    )


def rerender(folder: Path) -> str:
    """gapcheck.md rebuilt from the gapcheck.json beside it (its summary and provenance), without a model."""
    path = Path(folder) / "gapcheck.json"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return render_markdown(data["summary"], data["provenance"])
    except KeyError as exc:
        raise InputError(f"--out: cannot rebuild from {path}: it lacks the field {exc}") from None
    except (OSError, ValueError, TypeError) as exc:
        raise InputError(f"--out: cannot rebuild from {path}: {exc}") from None


# What a rerun may change without measuring anything else: when and from which checkout it ran.
RUN_FIELDS = ("command", "date_utc", "git")


def same_measurement(path: Path, data: dict) -> bool:
    """Whether ``path`` holds the values and settings ``data`` measured: then the earlier file (and the report
    made from it) stays as it is, so rerunning a committed gap check leaves the checkout clean."""
    try:
        earlier = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False

    def measured(d: dict) -> tuple:
        provenance = {k: v for k, v in d.get("provenance", {}).items() if k not in RUN_FIELDS}
        return d.get("summary"), d.get("runs"), provenance

    def text(d: dict) -> str:  # as JSON text: NaN equals NaN there, not in a comparison of floats
        return json.dumps(measured(d), sort_keys=True)

    return isinstance(earlier, dict) and text(earlier) == text(json.loads(json_text(data)))


# Its report and its data, in a folder of its own; a campaign's gapcheck/ in results/ is its to regenerate.
WRITES = Writes(
    "teacache-bench gapcheck", names=("gapcheck.md", "gapcheck.json", "progress.log"), regenerates=("results",)
)


@command("teacache-bench gapcheck")
def main(argv: list[str] | None = None) -> int:
    args, _ = setup_arg_parser().parse_checked(argv, WRITES)
    if args.render_only:
        text = rerender(args.out)
        write_text(args.out / "gapcheck.md", text)
        print(f"wrote {args.out / 'gapcheck.md'}")
        return 0
    result = run_gapcheck(args)
    summary = summarize(result)
    provenance = collect(model=args.model, variant=result["variant"], settings=result["settings"])
    data = {"summary": summary, "provenance": provenance, "runs": json.loads(result["frame"].to_json(orient="records"))}
    if same_measurement(args.out / "gapcheck.json", data):
        print(f"kept {args.out / 'gapcheck.json'}: this run measured the same values with the same settings")
    else:
        write_text(args.out / "gapcheck.md", render_markdown(summary, provenance))
        write_json(args.out / "gapcheck.json", data)
    table = Table(title=f"gap check: {result['variant']}")
    table.add_column("tolerance")
    table.add_column("noise passes")
    table.add_column("catches")
    table.add_column("verdict")
    for name, entry in summary["table"].items():
        caught = [m for m, v in entry["mutants"].items() if v["caught"]]
        verdict = "FLAG" if entry["flag"] else ("separates" if entry["separates"] else "-")
        table.add_row(name, str(entry["noise_passes"]), ", ".join(caught) or "-", verdict)
    Console().print(table)
    if summary["uncaught_mutants"]:
        print(f"mutants no tolerance catches: {', '.join(summary['uncaught_mutants'])}")
    print(f"wrote {args.out / 'gapcheck.md'}")
    found = findings(summary)
    if found:
        print(f"finding: {'; '.join(found)} (exit {EXIT_FINDING})")
        return EXIT_FINDING
    return 0


def findings(summary: dict) -> list[str]:
    """What the gap check found wrong with the tolerances: each flagged tolerance, each one the correct wrapper
    fails, each mutant no tolerance catches (empty: they separate noise from every bug tried)."""
    table = summary["table"]
    found = [f"{name} fails the correct wrapper" for name, entry in table.items() if not entry["noise_passes"]]
    found += [f"{name} catches none of the mutants it exists for" for name, entry in table.items() if entry["flag"]]
    found += [f"no tolerance catches {name}" for name in summary["uncaught_mutants"]]
    return found


if __name__ == "__main__":
    sys.exit(main())
