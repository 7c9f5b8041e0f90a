"""``teacache-bench campaign``: record, fit, sweep and report for one model into one folder.

Layout: ``OUT/traces`` (teacache-calib record), ``OUT/fit`` (teacache-calib fit, compared with the
packaged coefficients), ``OUT/sweep`` (teacache-bench sweep with the new fit, predicted skips from
the traces), ``OUT/report`` (teacache-bench report). Each stage resumes where it stopped; the derived
stages are rebuilt every time. The test tolerances are derived from the sweeps of every variant at once
into tests/tolerances/<hardware>.py (teacache-bench tolerances), not per campaign.
The default OUT is ``results/<hardware>/<variant>/<mflux-version>/``.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from bench.report import files as report_files
from bench.sweep import command as sweep_stage
from bench.sweep import files as sweep_files
from bench.sweep import measure as sweep_measure
from bench.sweep import settings as sweep_settings
from bench.sweep.parts import check_parts_agree
from calib import record as record_stage
from calib.fit import files as fit_files
from calib.run import arguments, fingerprint, ranks, shard
from calib.run.command import run_command
from calib.run.folder import RunFolder
from calib.run.interrupts import Interrupted, interruptions
from calib.run.prompts import SETS
from teacache import outputs, variants
from teacache.errors import InputError, TeaCacheError
from teacache.io import atomic_path, project_root
from teacache.provenance import hardware_slug

PROG = "teacache-bench campaign"

PROJECT_ROOT = project_root()
# A campaign folder: its four stages, each checked as that stage's own folder, and the studies filed beside them
# in results/<hardware>/<variant>/<mflux>/ (baselines, criteria, decision, gap check, packaged fit).
STAGES = {"traces": record_stage.WRITES, "fit": fit_files.WRITES, "sweep": sweep_files.WRITES,
          "report": report_files.WRITES}  # fmt: skip
COMPANIONS = ("baselines", "criteria", "criteria-baselines", "decision", "gapcheck", "packaged", "rules-front",
              "fbcache-front", "budget-search")  # fmt: skip
# Its purpose is the committed results/: it regenerates them there, and says so.
# refusals a stage passes on as they are: the ranks' own, and the ends of a run that saved its work
PASSED_ON = (ranks.ShardError, shard.ShardsIncomplete, Interrupted)
WRITES = arguments.Writes(PROG, names=(*STAGES, *COMPANIONS), regenerates=("results",))


def campaign_models() -> list[str]:
    """The models with campaign sizes in their variant spec (the embedded ones)."""
    return sorted(spec.name for spec in variants.all_specs() if spec.campaign_sizes is not None)


def campaign_model(name: str) -> str:
    """argparse ``type`` of --model: a refused name (a retired model) says why, not just that it is no choice."""
    spec = variants.find(name)
    if spec is not None and not spec.supported:
        raise argparse.ArgumentTypeError(variants.refusal_reason(spec))
    return name


def default_out(variant: str) -> Path:
    return PROJECT_ROOT / "results" / hardware_slug() / variant / metadata.version("mflux")


def setup_arg_parser(prog: str = PROG) -> argparse.ArgumentParser:
    per_model = "\n".join(
        f"  {name}: record {c.record_prompts} x seeds {c.record_seeds}; sweep {c.sweep_prompts} x seeds "
        f"{c.sweep_seeds}, thresholds {c.thresholds}, {c.repeats} repeats"
        for name in campaign_models()
        for c in [variants.get(name).campaign_sizes]
    )
    parser = arguments.CommandParser(
        prog=prog, description=__doc__.split("\n\n")[0], epilog=f"campaign settings per model:\n{per_model}"
    )
    parser.add_argument(
        "--model",
        default=variants.default_model(),
        type=campaign_model,
        choices=campaign_models(),
        help="the embedded model to campaign",
    )
    parser.add_argument(
        "--out", type=arguments.path_argument, default=None, help="default: results/<hardware>/<variant>/<mflux>/"
    )
    parser.add_argument("--thresholds", default=None, help="sweep thresholds (default: the model's campaign set)")
    parser.add_argument("--record-seeds", default=None, help="default: the model's campaign seeds")
    parser.add_argument("--sweep-seeds", default=None, help="default: the model's campaign seeds")
    parser.add_argument(
        "--sweep-prompts", default=None, help=f"a built-in set ({', '.join(SETS)}) or a file (default: the model's)"
    )
    parser.add_argument("--repeats", type=int, default=None, help="default: the model's campaign repeats")
    parser.add_argument("--ssim-floor", type=float, default=0.95, help="quality floor of the recommendation")
    arguments.add_lora_arguments(parser)
    parser.add_argument(
        "--force-new", action="store_true", help="discard earlier traces and sweep in OUT and start them afresh"
    )
    parser.add_argument(
        "--yes", action="store_true", help="run even if the record stage's timed run estimates over an hour of work"
    )
    return parser


@dataclass(frozen=True)
class Campaign:
    """Every stage's settings, validated before the first stage runs."""

    model: str
    out: Path
    record: record_stage.RecordSettings
    sweep: sweep_settings.SweepSettings
    ssim_floor: float

    @property
    def min_step(self) -> int:
        """The fit's first step: the gate's skip_first_n_steps (earlier steps are always computed)."""
        return variants.get(self.model).skip_first_n_steps


@contextlib.contextmanager
def _named(stage_arg: str, campaign_arg: str):
    """A stage's refusal names the campaign's own argument (--sweep-seeds, not the sweep's --seeds)."""
    try:
        yield
    except ValueError as exc:
        message = str(exc)
        if message.startswith(f"{stage_arg}:"):
            raise InputError(campaign_arg + message[len(stage_arg) :]) from None
        raise


def plan_campaign(model: str, out: Path, thresholds=None, record_seeds=None, sweep_seeds=None, repeats=None,
                  ssim_floor: float = 0.95, sweep_prompts=None, force_new: bool = False,
                  yes: bool = False, lora_paths: list[str] | None = None,
                  lora_scales: list[str] | None = None) -> Campaign:  # fmt: skip
    """Check the arguments of every stage at once; raise InputError naming the first bad one.

    The record stage's timed run also checks the sweep's size (under ``--yes``, the campaign's own option), so a
    sweep estimated over an hour is refused before anything is recorded."""
    if model not in campaign_models():
        raise InputError(f"--model: expected one of {', '.join(campaign_models())}, got {model!r}")
    cfg = variants.get(model).campaign_sizes
    out = arguments.check_out_dir(out, writes=WRITES)
    for stage, writes in STAGES.items():  # each stage's folder is that stage's own; the stages run unchecked in it
        outputs.check_folder_is_own(out / stage, writes)
    traces = out / "traces"
    with outputs.granted(out), _named("--seeds", "--record-seeds"):
        record = record_stage.plan(
            model,
            traces,
            prompts=cfg.record_prompts,
            seeds=record_seeds or cfg.record_seeds,
            force_new=force_new,
            yes=yes,
            lora_paths=lora_paths,
            lora_scales=lora_scales,
        )
    with outputs.granted(out), _named("--seeds", "--sweep-seeds"), _named("--prompts", "--sweep-prompts"):
        sweep = sweep_settings.plan(
            model,
            thresholds or cfg.thresholds,
            out / "sweep",
            prompts=sweep_prompts or cfg.sweep_prompts,
            seeds=sweep_seeds or cfg.sweep_seeds,
            repeats=cfg.repeats if repeats is None else repeats,
            coefficients=str(out / "fit" / "fit.json"),
            traces=traces / "traces.parquet",
            save_images=True,
            force_new=force_new,
            yes=yes,
        )
    sweep = dataclasses.replace(sweep, loras=record.loras)  # checked once, by the record stage's plan
    default = variants.get(model).default_threshold
    if default not in sweep.thresholds:  # teacache-bench tolerances derives its constants there
        raise InputError(
            f"--thresholds: include {model}'s default threshold {default:g}, where the tolerances are derived "
            f"(got {', '.join(f'{t:g}' for t in sweep.thresholds)})"
        )
    floor = arguments.check_fraction(ssim_floor, "--ssim-floor")
    check_sweep_against_fit(sweep, out / "fit" / "fit.json")
    record = dataclasses.replace(
        record,
        then=sweep_measure.work_left(sweep, sweep.pairs),
        then_name="the sweep stage after it",
        then_fewer="--repeats, --thresholds, --sweep-seeds or --sweep-prompts",
    )
    return Campaign(model, out, record, sweep, floor)


def check_sweep_against_fit(sweep: sweep_settings.SweepSettings, fit: Path) -> None:
    """Refuse, before the record and fit stages run, a sweep folder whose pairs were measured with another
    rescale function than the fit.json beside it: the sweep stage would refuse it after minutes of work.

    A kept fit.json is what the sweep stage reads, and a refit that selects another function is refused while
    the sweep holds pairs, so a sweep measured with another function than ``fit`` cannot resume either way.
    """
    if sweep.force_new or not fit.is_file() or not fingerprint.has_results(sweep.out, sweep_files.RESULTS):
        return
    # heavy (pandas): loaded after the arguments are checked
    from calib.fit.coefficient_sources import resolve_coefficients

    try:
        rescale = resolve_coefficients(str(fit), None, None)[0]
    except ValueError:
        return  # unreadable: the fit stage replaces it, and the sweep stage then checks the new one
    with _named("--out", "sweep: --out"):
        adopted = functools.partial(check_parts_agree, sweep)
        sweep.folder.resumable(sweep.out, sweep_settings.fingerprint_settings(sweep, rescale), adopted)


def fit_stage(
    traces: Path,
    out: Path,
    min_step: int,
    sweep: Path | None = None,
    force_new: bool = False,
    compare_packaged: bool = True,
) -> Path:
    """teacache-calib fit on the recorded traces, compared with the packaged coefficients where there are some.

    A refit that selects the same function as OUT/fit.json (within the refit tolerance) keeps that file and its
    plots as they are, so the sweep made with it resumes. Another function is refused, before anything is
    written, while ``sweep`` holds pairs measured with the old one (unless ``force_new``: the sweep starts afresh).
    """
    # heavy (pandas): loaded after the arguments are checked
    from calib.fit import FitOptions, fit
    from calib.fit.coefficient_sources import PACKAGED
    from calib.fit.file import same_selection
    from calib.fit.files import PLOT_FILES
    from calib.fit.options import flags
    from calib.fit.result import FitResult
    from calib.fit.summary import print_summary

    path = out / "fit.json"
    previous = None
    if path.is_file():
        try:
            previous = FitResult.read(path)
        except ValueError:
            previous = None  # unreadable: replaced below
    given = {"compare": PACKAGED} if compare_packaged else {}
    given.update(min_step=min_step, **_earlier_options(previous))
    command = [str(traces), "--out", str(out), *flags(given)]  # what the provenance records: the same fit's command
    fit_files.check_out(out)
    plots: dict[str, bytes] = {}
    result = fit(traces, FitOptions(**given), command=command, plots=plots)
    for message in result["data"]["warnings"]:
        print(f"fit: warning: {message}", file=sys.stderr)
    if previous is not None and same_selection(previous, result):
        print(f"kept {path}: the refit selects the same function ({result['selected']['label']}, numbers within "
              f"{fingerprint.FIT_RTOL:g} relative)")  # fmt: skip
        return path
    if (
        previous is not None
        and sweep is not None
        and not force_new
        and fingerprint.has_results(sweep, sweep_files.RESULTS)
    ):
        raise InputError(
            f"the traces now give another fit ({result['selected']['label']}) than {path} "
            f"({previous['selected'].get('label')}), which the sweep in {sweep} was measured with; pass --force-new "
            "to refit and sweep afresh, or choose a new --out"
        )
    for name, png in plots.items():
        with atomic_path(out / PLOT_FILES[name]) as tmp:
            tmp.write_bytes(png)
    result.write(path)
    print_summary(result, path)
    return path


def _earlier_options(previous: Mapping | None) -> dict:
    """The candidate set and selection rule of the fit.json a campaign folder holds, as ``FitOptions`` fields: a
    resumed campaign refits the way its fit was made. A fit.json from before the mono+step forms and the paired
    rule (no ``no_splines`` / ``se`` among its options) was chosen from the polynomial forms by the best's own
    error."""
    from calib.fit.options import SE_BEST

    if previous is None:
        return {}  # a new campaign: the fit's defaults
    recorded = previous.get("options") or {}
    return {"no_splines": bool(recorded.get("no_splines", True)), "se": str(recorded.get("se", SE_BEST))}


def share_inputs(world: ranks.World, paths: list[Path], error: BaseException | None) -> None:
    """Rank 0's fit.json and traces on every rank before the sweep reads them (hosts without a shared folder
    lack them: rank 0 alone fits, and the recording is merged on rank 0)."""
    shard.agree(world, error)  # a failed fit stops every rank here, not in the sweep
    if world.size == 1:
        return
    for path in paths:
        sent = world.gather_bytes(path.read_bytes() if world.rank == 0 else b"")[0]
        if world.rank > 0 and (not path.is_file() or path.read_bytes() != sent):
            with atomic_path(path) as tmp:
                tmp.write_bytes(sent)


def run_campaign(model: str, out: Path, thresholds=None, record_seeds=None, sweep_seeds=None, repeats=None,
                 ssim_floor: float = 0.95, sweep_prompts=None, force_new: bool = False,
                 yes: bool = False, lora_paths: list[str] | None = None,
                 lora_scales: list[str] | None = None) -> dict | None:  # fmt: skip
    """Run every stage; return the report summary (with the stage timings); None on ranks other than 0.

    Under ``mlx.launch`` the record and sweep stages are shared over the ranks; the fit and the report run
    on rank 0, which sends fit.json and the traces to the others before the sweep.
    """
    campaign = plan_campaign(
        model, out, thresholds, record_seeds, sweep_seeds, repeats, ssim_floor, sweep_prompts, force_new, yes,
        lora_paths, lora_scales,
    )  # fmt: skip
    from bench.report import command as report  # after the checks: plotting libraries take seconds to import

    out = campaign.out
    world = ranks.connect()
    lead = world.rank == 0
    timings = {}

    def stage(name: str, fn):
        start = time.perf_counter()
        if lead:
            print(f"\n== {name}", flush=True)
        try:
            result = fn()
        except PASSED_ON:
            raise
        except TeaCacheError as exc:  # a stage's refusal names the stage
            raise InputError(f"{name}: {exc}") from None
        timings[name] = time.perf_counter() - start
        return result

    def fit() -> None:
        error = None
        try:
            if lead:
                packaged = variants.get(model).coefficients is not None
                fit_stage(
                    traces, out / "fit", campaign.min_step, campaign.sweep.out, campaign.sweep.force_new, packaged
                )
        except PASSED_ON:
            raise
        except TeaCacheError as exc:
            error = exc
        share_inputs(world, [out / "fit" / "fit.json", campaign.record.out / "traces.parquet"], error)

    # one campaign per folder; under mlx.launch the stages' own shard folders keep the ranks apart
    with RunFolder(PROG).lock(out) if lead else contextlib.nullcontext():
        traces = stage("record", lambda: record_stage.run_record(campaign.record, world))
        stage("fit", fit)
        stage("sweep", lambda: sweep_stage.run_sweep(campaign.sweep, world))
        if not lead:
            return None
        summary = stage("report", lambda: report.build_report(out / "sweep", out / "report", campaign.ssim_floor))
    summary["timings_s"] = timings
    summary["report_path"] = str(out / "report" / "report.md")
    return summary


def main(argv: list[str] | None = None, prog: str = PROG) -> int:
    """``prog``: the command the user ran, which every message names (``teacache-demo`` runs a campaign)."""
    return run_command(prog, _main, argv, prog)


def _main(argv: list[str] | None, prog: str) -> int:
    args = setup_arg_parser(prog).parse_args(argv)
    if args.lora_paths and args.out is None:
        raise InputError(
            "--out: a campaign with --lora-paths needs a folder of its own; the default "
            "results/<hardware>/<variant>/<mflux>/ holds the model's campaign without a LoRA"
        )
    start = time.perf_counter()
    try:
        summary = run_campaign(
            args.model, args.out or default_out(args.model), args.thresholds, args.record_seeds, args.sweep_seeds,
            args.repeats, args.ssim_floor, args.sweep_prompts, args.force_new, args.yes, args.lora_paths,
            args.lora_scales,
        )  # fmt: skip
    except TeaCacheError:  # matched first, so a refusal does not import mflux to look up its interruptions
        raise
    except interruptions():
        print(
            f"{prog}: interrupted; traces and sweep pairs are kept, the rest is rebuilt: run it again", file=sys.stderr
        )
        return Interrupted.exit_status
    if summary is None:  # a rank other than 0 under mlx.launch: rank 0 reports
        return 0
    # heavy (matplotlib, pandas, scipy): loaded after the arguments are checked
    from bench.report import command as report

    report.print_summary(summary)
    report.print_warnings(summary, prog)
    print(f"\ncampaign done in {time.perf_counter() - start:.0f} s -> {summary['report_path']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
