"""``teacache-bench campaign``: record, fit, sweep, report and derive tolerances for one model into one folder.

Layout: ``OUT/traces`` (teacache-calib record), ``OUT/fit`` (teacache-calib fit, compared with the
packaged coefficients), ``OUT/sweep`` (teacache-bench sweep with the new fit, predicted skips from
the traces), ``OUT/report`` (teacache-bench report), ``OUT/tolerances.py`` (teacache-bench
tolerances). Each stage resumes where it stopped; the derived stages are rebuilt every time.
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
from bench import tolerances as tolerances_cmd
from calib import fit as fit_cmd
from calib import record as record_cmd
from teacache.adapters import variant_setting
from teacache.provenance import hardware_slug

# Settings per embedded model: sized so the whole campaign fits in minutes on 2 CPU cores.
CAMPAIGN_DEFAULTS = {
    "tiny-shapes": {
        "record_prompts": "tiny-shapes",
        "record_seeds": "0,1",
        "sweep_prompts": "tiny-shapes-sweep",
        "sweep_seeds": "0",
        "thresholds": "0,0.005,0.01,0.02,0.03,0.05,0.1",
        "repeats": 2,
        "variant": "tiny-shapes",
    },
    "tiny-flux2": {
        "record_prompts": "fast",
        "record_seeds": "0,1",
        "sweep_prompts": "fast",
        "sweep_seeds": "0,1,2",
        "thresholds": "0,0.1,0.2,0.3",
        "repeats": 2,
        "variant": "tiny-flux2",
    },
    "tiny-qwen-image": {
        "record_prompts": "fast",
        "record_seeds": "0,1",
        "sweep_prompts": "fast",
        "sweep_seeds": "0,1,2",
        "thresholds": "0,0.1,0.2,0.3",
        "repeats": 2,
        "variant": "tiny-qwen-image",
    },
    "tiny-z-image": {
        "record_prompts": "fast",
        "record_seeds": "0,1",
        "sweep_prompts": "fast",
        "sweep_seeds": "0,1,2",
        "thresholds": "0,0.1,0.2,0.3",
        "repeats": 2,
        "variant": "tiny-z-image",
    },
    "tiny-flux1": {
        "record_prompts": "fast",
        "record_seeds": "0,1",
        "sweep_prompts": "fast",
        "sweep_seeds": "0,1,2",
        "thresholds": "0,0.2,0.25,0.3,0.5",
        "repeats": 2,
        "variant": "tiny-flux1",
    },
}
PROJECT_ROOT = Path(__file__).resolve().parent.parent


def default_out(variant: str) -> Path:
    return PROJECT_ROOT / "results" / hardware_slug() / variant / metadata.version("mflux")


def setup_arg_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="teacache-bench campaign", description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="tiny-shapes", choices=sorted(CAMPAIGN_DEFAULTS))
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
    cfg = CAMPAIGN_DEFAULTS[model]
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
        "--model", model, "--prompts", cfg["record_prompts"], "--seeds", record_seeds or cfg["record_seeds"],
        "--out", str(out / "traces"),
    ])  # fmt: skip
    min_step = str(variant_setting(cfg["variant"], "SKIP_FIRST_N_STEPS"))
    stage(
        "fit", fit_cmd.main, [str(traces), "--out", str(out / "fit"), "--compare", "packaged", "--min-step", min_step]
    )
    stage("sweep", sweep_cmd.main, [
        "--model", model, "--prompts", sweep_prompts or cfg["sweep_prompts"],
        "--seeds", sweep_seeds or cfg["sweep_seeds"],
        "--thresholds", thresholds or cfg["thresholds"], "--repeats", str(repeats or cfg["repeats"]),
        "--coefficients", str(out / "fit" / "fit.json"), "--traces", str(traces), "--save-images",
        "--out", str(out / "sweep"),
    ])  # fmt: skip
    start = time.perf_counter()
    summary = report_cmd.build_report(out / "sweep", out / "report", ssim_floor=ssim_floor)
    timings["report"] = time.perf_counter() - start
    stage("tolerances", tolerances_cmd.main, [str(out / "sweep"), "--out", str(out / "tolerances.py")])
    summary["timings_s"] = timings
    summary["report_path"] = str(out / "report" / "report.md")
    return summary


def main(argv: list[str] | None = None) -> int:
    args = setup_arg_parser().parse_args(argv)
    out = args.out or default_out(CAMPAIGN_DEFAULTS[args.model]["variant"])
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
