"""``teacache-bench fullsize``: what TeaCache costs and gains at real size, on full-size random-weight models.

Each ``random-<variant>`` is mflux's own transformer at its real config with weights drawn from a seed
(``teacache.models.fullsize``), so the figures are those of the real architecture on this hardware; the
images mean nothing. Per model, after warm-up (the first GPU steps JIT-compile), in one process, paired and
interleaved (``calib.run.interleave``: the order rotates every repeat), ``--repeats`` times: vanilla; the
proxy with every step computed (``proxy-all``: the re-walk, signal and decision each step, nothing skipped;
every decision is forced, so the signal is read back after the step, not mid-step; its cost is
``proxy_overhead_pct``); optionally threshold 0 (``fast-path``); and the gate at
thresholds chosen to skip about ``--skip-fractions`` of the steps. Random weights have no calibration, so
the gate accumulates the raw signal (identity rescale, unless ``--coefficients packaged``) and each
threshold is found by replaying the signal of the proxy-all run through the gate (``teacache.gate.replay``);
the skipped count in the table is the one the run took. Times are the denoising loop (callbacks before_loop
-> after_loop, ``mx.eval`` each step); speedups are medians over repeats of vanilla / arm of the same
repeat, with min and max; ideal is N / (N - skipped).

Writes ``OUT/runs.csv`` (the raw table: one row per generation, at full precision, each with its model's
facts and its exactness against the vanilla run of its repeat), ``OUT/summary.csv`` (one row per model,
quantization and arm, rebuilt from runs.csv by :func:`bench.timing.fullsize_tables.summarize`; both declared
in :mod:`bench.timing.fullsize_records`), ``OUT/provenance.json`` and ``OUT/fingerprint.json`` (the settings
of each configuration), atomically after each model, one writer per folder at a time. A rerun keeps the
models it finished with the same settings and measures the rest; a model measured with other settings is
refused before anything loads (``--force-new`` measures it again, replacing its rows; another ``--tag`` keeps
both): :mod:`bench.timing.fullsize_folder`. Ctrl-C says what is saved and exits 130. Default OUT:
``results/<hardware>/fullsize``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import traceback
from pathlib import Path

import pandas as pd

from bench.common import parse_numbers, parse_thresholds
from bench.peer import arm as peer
from bench.timing import fullsize_folder as folder
from bench.timing.fullsize_folder import FOLDER, OUTPUTS, PROG
from bench.timing.fullsize_measure import measure_model
from bench.timing.fullsize_rules import parse_rules
from bench.timing.fullsize_tables import (
    CONFIG_KEY,
    PROJECT_ROOT,
    RUN_COLUMNS,
    checkout_of_this_code,
    code_digest,
    key_text,
    summarize,
    write_outputs,
)
from calib.run import fingerprint
from calib.run.arguments import CommandParser, Writes, check_guidance, check_out_dir, path_argument
from calib.run.command import command
from calib.run.interrupts import interruptions
from teacache import provenance as prov
from teacache._compat import check_mflux_version
from teacache._platform import use_float32_on_cpu
from teacache.errors import InputError
from teacache.models.fullsize import MEANINGLESS
from teacache.variants import parse_random_name

DEFAULT_MODELS = "random-flux1-dev,random-flux2-klein-base-4b,random-qwen-image,random-z-image"


def _is_fullsize_provenance(path: Path) -> bool:
    try:
        return json.loads(path.read_text(encoding="utf-8")).get("note") == MEANINGLESS
    except (OSError, ValueError, AttributeError):
        return False


# Its tables, merged run after run, in a folder of its own (its provenance.json marks it: RUN.md and logs beside it
# are kept); results/<hardware>/fullsize is what it exists to regenerate.
WRITES = Writes(PROG, names=(*OUTPUTS, fingerprint.FILE), marker="provenance.json", is_own=_is_fullsize_provenance,
                regenerates=("results",))  # fmt: skip


def setup_arg_parser() -> argparse.ArgumentParser:
    parser = CommandParser(prog=PROG, description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default=DEFAULT_MODELS, help="comma-separated random-<variant> names")
    parser.add_argument("--size", type=int, default=None, help="image side in pixels; default: each variant's")
    parser.add_argument("--steps", type=int, default=None, help="default: each variant's")
    parser.add_argument("--guidance", type=float, default=None, help="default: each variant's usual guidance")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--skip-fractions", default="0.35,0.7", help="targets for the gate rows, of the steps")
    parser.add_argument("--thresholds", default=None, help="explicit thresholds instead of --skip-fractions")
    parser.add_argument("--coefficients", choices=("identity", "packaged"), default="identity")
    parser.add_argument(
        "--rules",
        default=None,
        help="other caching rules timed beside TeaCache (magcache, fbcache): each with every step computed and at "
        "each --skip-fractions target, its threshold replayed from a calibration generation",
    )
    parser.add_argument("--fast-path", action="store_true", help="add threshold-0 rows (the no-proxy fast path)")
    parser.add_argument("--quantize", type=int, choices=(4, 8), default=None)
    parser.add_argument(
        "--blocks", type=int, default=None, help="smoke tests: build N blocks of each kind (NOT full size)"
    )
    parser.add_argument("--seed", type=int, default=0, help="the weights' seed")
    parser.add_argument("--budget-s", type=float, default=None, help="start no repeat that would end after this")
    parser.add_argument("--tag", default="", help="a label kept in every row (part of the merge key)")
    parser.add_argument(
        "--peer",
        choices=("mlx-teacache",),
        default=None,
        help="also time mlx-teacache's apply_teacache (the 'peer' extra) in the same loop: with every step computed "
        "(mlx-teacache-all) and at each threshold with the same coefficients; a model it cannot run gets a row "
        "saying why",
    )
    parser.add_argument("--out", type=path_argument, default=None, help="default: results/<hardware>/fullsize")
    parser.add_argument(
        "--force-new",
        action="store_true",
        help="measure these models again where OUT holds them (with the same or other settings), replacing their "
        "rows; OUT's other configurations are kept",
    )
    return parser


def parse_fractions(text: str) -> list[float]:
    """'0.35,0.7': fractions of the steps to skip, each in (0, 1); returned sorted, once each."""
    values = []
    for part, value in parse_numbers(text, "--skip-fractions", "fraction", "0.35,0.7"):
        if not 0 < value < 1:
            raise InputError(f"--skip-fractions: {part} is outside (0, 1); fractions of the steps to skip")
        values.append(value)
    return sorted(set(values))


def validate(args: argparse.Namespace) -> dict:
    """Every argument checked before anything loads; a ValueError names the argument."""
    try:
        variants = [parse_random_name(name.strip()) for name in args.models.split(",") if name.strip()]
    except ValueError as exc:
        raise InputError(f"--models: {str(exc).removeprefix('model: ')}") from None
    if not variants:
        raise InputError("--models: expected at least one random-<variant> name")
    if args.size is not None and (args.size < 16 or args.size % 16):
        raise InputError(f"--size: expected a positive multiple of 16, got {args.size}")
    if args.steps is not None and args.steps < 3:
        raise InputError(
            f"--steps: expected at least 3 (the first and last steps are always computed), got {args.steps}"
        )
    if args.repeats < 1:
        raise InputError(f"--repeats: expected at least 1, got {args.repeats}")
    if args.blocks is not None and args.blocks < 1:
        raise InputError(f"--blocks: expected at least 1, got {args.blocks}")
    if args.blocks is not None and args.out is None:
        raise InputError("--out: --blocks builds models that are not full size; name a folder outside results/")
    if args.out is not None:
        check_out_dir(args.out, writes=WRITES)
    if args.guidance is not None:
        check_guidance(args.guidance)
    if args.budget_s is not None and not args.budget_s > 0:
        raise InputError(f"--budget-s: expected seconds > 0, got {args.budget_s}")
    thresholds = None if args.thresholds is None else [t for t in parse_thresholds(args.thresholds) if t > 0]
    if thresholds == []:
        raise InputError("--thresholds: expected at least one threshold > 0 (use --fast-path for threshold 0)")
    fractions = parse_fractions(args.skip_fractions) if thresholds is None else []
    rules = parse_rules(args.rules)
    if rules and thresholds is not None:
        raise InputError("--rules: the other rules' thresholds come from --skip-fractions; leave out --thresholds")
    if args.peer is not None:
        if peer.version() is None:
            raise InputError(f"--peer: {peer.PEER} is not installed (the 'peer' extra)")
        refused = [t for t in thresholds or [] if peer.refusal(threshold=t)]
        if refused:
            raise InputError(f"--peer: {peer.refusal(threshold=refused[0])}")
    return {"variants": variants, "thresholds": thresholds, "fractions": fractions, "rules": rules}


@command(PROG)
def main(argv: list[str] | None = None) -> int:
    args = setup_arg_parser().parse_args(argv)
    plan = validate(args)

    check_mflux_version()
    use_float32_on_cpu()
    hardware = prov.hardware_slug()
    out = args.out or PROJECT_ROOT / "results" / hardware / "fullsize"
    if args.out is None:  # a given --out was checked with the other arguments
        check_out_dir(out, writes=WRITES)
    configurations = [folder.configuration(v, args, plan, hardware) for v in plan["variants"]]
    with FOLDER.lock(out):  # one writer per folder; refusals below leave it as it was
        todo, kept = folder.plan(out, configurations, args.force_new)
        return _measure_all(out, todo, kept, args, plan, hardware, argv)


def _measure_all(out: Path, todo: list, kept: list, args, plan: dict, hardware: str, argv) -> int:
    """Measure every configuration of ``todo``, writing OUT's tables after each; 1 when a model failed."""
    deadline = None if args.budget_s is None else time.perf_counter() + args.budget_s
    finished: list[str] = [config.key for config in kept]
    failed: list[str] = []
    say = FOLDER.logger(out)
    setting = f"{args.size or 'default'} px, {args.steps or 'default'} steps"
    say(f"teacache-bench fullsize on {hardware}: {setting}, {args.repeats} interleaved repeats after warm-up; "
        f"{MEANINGLESS}")  # fmt: skip
    for config in kept:
        say(f"{config.key}: kept (finished with these settings; --force-new measures it again)")

    def stopped() -> str:
        return (f"interrupted: {out / 'summary.csv'} holds the rows of {', '.join(finished) or 'no model'}; run the "
                "same command again to measure the rest (finished models are kept)")  # fmt: skip

    with FOLDER.interruptible(stopped), FOLDER.progress(out, "fullsize", len(todo), "models") as progress:
        for config in todo:
            if deadline is not None and time.perf_counter() > deadline:
                say(f"budget: {config.variant} not started")
                continue
            try:
                rows, model_prov = measure_model(config.variant, args, plan, deadline, say)
            except interruptions():  # Ctrl-C, also as mflux's StopImageGenerationException
                raise
            except Exception:  # noqa: BLE001 - one family's failure must not lose the others' measurements
                traceback.print_exc()
                say(f"{config.variant}: failed (traceback above); nothing written for it")
                failed.append(config.variant)
                continue
            _write_model(out, config, rows, model_prov, hardware, argv, say)
            finished.append(config.key)
            progress.advance()
            say(f"  wrote {out / 'summary.csv'}")
    return 1 if failed else 0


def _write_model(out: Path, config, rows: list[dict], model_prov: dict, hardware: str, argv, say) -> None:
    """One model's rows merged into OUT's tables (atomically, each file), its settings recorded first."""
    for row in rows:
        row["hardware"] = hardware
    key = "|".join(key_text(rows[0][k]) for k in CONFIG_KEY)
    if key != config.key:  # the folder's plan and the rows must name one configuration
        raise RuntimeError(f"{config.variant}: its rows say configuration {key}, the plan {config.key}")
    provenance = prov.collect(argv if argv is None else ["teacache-bench", "fullsize", *argv])
    provenance.update(
        git=checkout_of_this_code(provenance["git"]),
        code_sha256=code_digest(),
        timing="denoising loop: before_loop -> after_loop callbacks, mx.eval per step",
        cache_memory="the cached residuals of every branch plus the anchor (previous modulated input)",
        **model_prov,
    )
    FOLDER.save_configuration(out, config.key, config.settings)
    write_outputs(out, rows, {key: provenance})
    for row in summarize(pd.DataFrame(rows, columns=RUN_COLUMNS)).to_dict("records"):
        say(_row_line(row))


def _row_line(row: dict) -> str:
    if isinstance(row.get("note"), str) and row["note"]:
        return f"  {row['arm']}: not run: {row['note']}"
    threshold = "" if row["threshold"] is None or pd.isna(row["threshold"]) else f" {row['threshold']:g}"
    exact = "" if row["noop_exact"] is None else f", bit-exact {row['noop_exact']}"
    return (
        f"  {row['arm']}{threshold}: {row['skipped']}/{row['steps']} skipped, {row['speedup']:.3f}x "
        f"[{row['speedup_min']:.3f}, {row['speedup_max']:.3f}] of ideal {row['ideal']:.3f}x "
        f"(ratio {row['ratio_to_ideal']:.3f}), vanilla {row['vanilla_ms_per_step']:.1f} ms/step, proxy "
        f"{row['proxy_overhead_pct']:+.2f}%, peak {row['peak_memory_gib']:.1f} GiB, cache "
        f"{row['cache_memory_mib']:.1f} MiB{exact}"
    )


if __name__ == "__main__":
    sys.exit(main())
