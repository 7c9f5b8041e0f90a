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
import sys
import time
from importlib import metadata
from pathlib import Path

from bench import report as report_cmd
from bench import sweep as sweep_cmd
from calib import fit as fit_cmd
from calib import record as record_cmd
from teacache import variants
from teacache.provenance import hardware_slug

PROJECT_ROOT = Path(__file__).resolve().parent.parent


def campaign_models() -> list[str]:
    """The models with campaign sizes in their variant spec (the embedded ones)."""
    return sorted(spec.name for spec in variants.all_specs() if spec.campaign is not None)


def default_out(variant: str) -> Path:
    return PROJECT_ROOT / "results" / hardware_slug() / variant / metadata.version("mflux")


def setup_arg_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="teacache-bench campaign", description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=variants.default_model(), choices=campaign_models())
    parser.add_argument("--out", type=Path, default=None, help="default: results/<hardware>/<variant>/<mflux>/")
    parser.add_argument("--thresholds", default=None)
    parser.add_argument("--record-seeds", default=None)
    parser.add_argument("--sweep-seeds", default=None)
    parser.add_argument("--sweep-prompts", default=None)
    parser.add_argument("--repeats", type=int, default=None)
    parser.add_argument("--ssim-floor", type=float, default=0.95)
    return parser


def run_campaign(model: str, out: Path, thresholds=None, record_seeds=None, sweep_seeds=None, repeats=None,
                 ssim_floor: float = 0.95, sweep_prompts=None) -> dict:  # fmt: skip
    """Run every stage; return the report summary (with the stage timings)."""
    spec = variants.get(model)
    cfg = spec.campaign
    timings = {}

    def stage(name: str, fn, argv: list[str]) -> None:
        start = time.perf_counter()
        print(f"\n== {name}: {' '.join(argv)}", flush=True)
        code = fn(argv)
        if code:
            raise SystemExit(f"teacache-bench campaign: stage {name!r} failed with exit code {code}")
        timings[name] = time.perf_counter() - start

    traces = out / "traces" / "traces.parquet"
    stage("record", record_cmd.main, [
        "--model", model, "--prompts", cfg.record_prompts, "--seeds", record_seeds or cfg.record_seeds,
        "--out", str(out / "traces"),
    ])  # fmt: skip
    min_step = str(spec.skip_first_n_steps)
    stage(
        "fit", fit_cmd.main, [str(traces), "--out", str(out / "fit"), "--compare", "packaged", "--min-step", min_step]
    )
    stage("sweep", sweep_cmd.main, [
        "--model", model, "--prompts", sweep_prompts or cfg.sweep_prompts,
        "--seeds", sweep_seeds or cfg.sweep_seeds,
        "--thresholds", thresholds or cfg.thresholds, "--repeats", str(repeats or cfg.repeats),
        "--coefficients", str(out / "fit" / "fit.json"), "--traces", str(traces), "--save-images",
        "--out", str(out / "sweep"),
    ])  # fmt: skip
    start = time.perf_counter()
    summary = report_cmd.build_report(out / "sweep", out / "report", ssim_floor=ssim_floor)
    timings["report"] = time.perf_counter() - start
    summary["timings_s"] = timings
    summary["report_path"] = str(out / "report" / "report.md")
    return summary


def main(argv: list[str] | None = None) -> int:
    args = setup_arg_parser().parse_args(argv)
    out = args.out or default_out(args.model)
    start = time.perf_counter()
    summary = run_campaign(
        args.model, out, args.thresholds, args.record_seeds, args.sweep_seeds, args.repeats, args.ssim_floor,
        args.sweep_prompts,
    )  # fmt: skip
    report_cmd.print_summary(summary)
    print(f"\ncampaign done in {time.perf_counter() - start:.0f} s -> {summary['report_path']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
