"""``teacache-bench sweep``: threshold x prompt x seed, each TeaCache run paired with a vanilla run.

Per (prompt, seed) pair, in one process after a warm-up, interleaved: each repeat runs vanilla and
every threshold once, the order rotated from repeat to repeat (calib.run.interleave). Raw records only
(runs.parquet, decisions.parquet, noop.parquet, schedules.parquet, provenance.json; schemas in bench.sweep.records);
``teacache-bench report`` derives everything else. Resumable per pair: each pair is saved in
``DIR/pairs/<pair_id>.*.parquet`` as soon as it is measured, and finished pairs are never redone, as long as the
settings are the same (``DIR/fingerprint.json``); new seeds or thresholds extend the folder. Once the tables are
merged, ``DIR/pairs`` goes (they hold its rows); a rerun rebuilds it from them before it plans.

Metrics against the paired vanilla run: final latents max-abs, mean-abs, max-rel = max |a-b| / (|b| + eps)
with eps = 1e-6, cosine; decoded uint8 RGB images: SSIM (scikit-image, data_range=255,
channel_axis=-1, i.e. per-channel SSIM averaged, default 7x7 Gaussian-free window) and PSNR
(data_range=255; inf for identical images). Timing: the denoising loop (before_loop to after_loop
callbacks, one mx.eval per step); speedup = median vanilla loop time / median TeaCache loop time.
"""

from __future__ import annotations

import argparse
import functools
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from bench.sweep.files import PROG
from bench.sweep.inputs import check_inputs
from bench.sweep.measure import measure_share
from bench.sweep.merge import write_tables
from bench.sweep.parts import check_parts_agree, done_thresholds, restore_parts, todo_pairs
from bench.sweep.settings import SweepSettings, fingerprint_settings, plan
from calib.run import arguments, ranks, shard
from calib.run.command import command
from calib.run.prompts import pair_id

if TYPE_CHECKING:
    from teacache.rescale import RescaleFunction


def setup_arg_parser() -> argparse.ArgumentParser:
    parser = arguments.CommandParser(prog=PROG, description=__doc__.split("\n\n")[0])
    arguments.add_model_arguments(parser)
    arguments.add_lora_arguments(parser)
    parser.add_argument("--thresholds", required=True, help="comma-separated, e.g. 0,0.1,0.2")
    parser.add_argument("--seeds", default="0,1", help="comma-separated or ranges, e.g. 0-4")
    parser.add_argument("--steps", type=int, default=None, help="default: the model's own")
    parser.add_argument("--size", default=None, help="WIDTHxHEIGHT (default: the model's own)")
    parser.add_argument("--guidance", type=float, default=None, help="default: the model's own")
    parser.add_argument("--quantize", type=int, default=None, choices=(3, 4, 5, 6, 8))
    parser.add_argument("--repeats", type=int, default=3, help="timed repeats of every run")
    parser.add_argument("--coefficients", default="packaged", help="packaged, a fit.json, or c4,...,c0")
    parser.add_argument("--x-range", default=None, metavar="LO,HI", help="calibrated x range of c4,...,c0")
    parser.add_argument("--traces", type=Path, default=None, help="trace table (any format): predict skips by replay")
    parser.add_argument(
        "--baselines",
        default=None,
        metavar="ARMS",
        help="also run these arms: fewer-steps,static,step-cache,mlx-teacache (its apply_teacache, same thresholds)",
    )
    parser.add_argument(
        "--compare-coefficients", default=None, metavar="A,B",
        help="one TeaCache arm per rescale function (each: packaged, a fit.json, ...); a rescale column per row",
    )  # fmt: skip
    parser.add_argument(
        "--isolate", action="store_true", help="time every generation in a fresh process (quality stays in-process)"
    )
    parser.add_argument(
        "--save-images", action="store_true",
        help="keep every decoded image under DIR/images (a threshold-0 run equal to vanilla shares vanilla's)",
    )  # fmt: skip
    parser.add_argument("--out", required=True, type=arguments.path_argument, help="the sweep folder")
    parser.add_argument(
        "--force-new", action="store_true", help="discard what DIR holds from an earlier sweep and start afresh"
    )
    parser.add_argument("--yes", action="store_true", help="run even if the warm-up estimates over an hour of work")
    return parser


def sharded_run(
    settings: SweepSettings, world: ranks.World | None = None, rescale: RescaleFunction | None = None
) -> shard.ShardedRun:
    """The sweep's pairs spread over the ranks; a saved pair needs no more work once it has every threshold."""
    pairs = {pair_id(p, seed): (p, text, seed) for p, text, seed in settings.pairs}
    wanted = set(settings.thresholds)

    def complete(folder: Path, key: str) -> bool:
        return wanted <= done_thresholds(folder / "pairs", [pairs[key]]).get(key, set())

    return settings.folder.sharded(settings.out, list(pairs), fingerprint_settings(settings, rescale), world, complete)


def run_sweep(settings: SweepSettings, world: ranks.World | None = None) -> Path | None:
    """Run (or resume, or extend) the sweep into ``settings.out``; returns runs.parquet's path.

    Under ``mlx.launch`` each rank runs its share of the pairs into ``OUT/shards/rank-<r>`` and rank 0
    merges them into OUT once every rank is through; the other ranks return None. Raises ValueError for
    bad input and FolderLocked when another process writes a folder, both before the model loads (on
    every rank: a rank's refusal stops them all); Interrupted on Ctrl-C, saying what is saved;
    ShardsIncomplete when pairs are not done, naming them.
    """
    traces, fixed_rescale = check_inputs(settings)
    return settings.folder.run(
        sharded_run(settings, world, fixed_rescale), fingerprint_settings(settings, fixed_rescale), settings.force_new,
        work=functools.partial(measure_share, settings, fixed_rescale=fixed_rescale, traces=traces),
        merge=functools.partial(write_tables, settings, traces=traces),
        interrupted=functools.partial(_interrupted_message, settings),
        adopted=functools.partial(check_parts_agree, settings), restore=restore_parts,
    )  # fmt: skip


def _interrupted_message(settings: SweepSettings) -> str:
    """What a plain sweep stopped by Ctrl-C has saved."""
    saved = len(settings.pairs) - len(todo_pairs(settings))
    return settings.folder.stopped(saved, len(settings.pairs), settings.out / "pairs")


@command(PROG)
def main(argv: list[str] | None = None) -> int:
    return sweep(plan(**vars(setup_arg_parser().parse_args(argv))))  # plan's keywords are the command's options


def sweep(settings: SweepSettings) -> int:
    """:func:`run_sweep`, then what the command says of it: the median per threshold, warnings, the file written."""
    path = run_sweep(settings)
    if path is None:  # a rank other than 0 under mlx.launch: rank 0 says what was merged
        return 0
    # heavy (pandas): loaded after the arguments are checked
    from bench.sweep import records
    from bench.sweep.schedules import same_schedule_warnings

    found = records.read_sweep(path.parent)
    runs = found.runs
    table = runs[runs["kind"] == "teacache"].groupby("threshold")[["skipped", "speedup", "ssim", "cosine"]].median()
    print(table.to_string(float_format=lambda v: f"{v:.4f}"))
    for warning in same_schedule_warnings(runs, found.decisions, found.provenance):
        print(f"{PROG}: warning: {warning}", file=sys.stderr)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
