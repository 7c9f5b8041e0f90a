"""``teacache-bench step-cost``: what an arm costs per step, each step against its neighbours in one generation.

Whole runs of one arm against whole runs of vanilla spread by several percent from repeat to repeat on a GPU
(results/cuda-nvidia-h200/proxy-cost-flux1/RUN.md), which hides a cost below 1 %. Here every mixed generation
runs both: blocks of ``--block`` steps alternate between vanilla's call (mflux's own transformer, or its own
compiled predict) and the arm's (``apply_teacache`` as shipped), the side that starts flipping from one
generation to the next (:mod:`bench.timing.step_cost_switch`). Each step is timed from the start of its first
call to the start of the next step's (mflux evaluates the latents at the end of every step, so the device is idle
at both stamps). Arms (``--arms``): ``forced`` (every decision forced, nothing read back mid-step), ``gated``
(every step after the first decided by the signal and computed: the price of each computed step a real run may
skip) and ``vanilla`` (vanilla against vanilla: what the instrument itself shows). After the mixed generations,
``--repeats`` rounds of whole runs, vanilla and each arm interleaved, with the allocator read per phase (each
step, the decode, what is held after the loop). Every generation is compared with a vanilla reference run of
the same process, after a warm-up of every path.

Writes ``OUT/generations.csv`` and ``OUT/steps.csv`` (raw, :mod:`bench.timing.step_cost_records`), their
summary ``OUT/summary.md`` and ``OUT/summary.csv`` (:mod:`bench.timing.step_cost_summary`),
``OUT/provenance.json``, ``OUT/fingerprint.json`` and ``OUT/progress.log``, atomically after every generation
or round, one writer at a time. A rerun with the same settings measures only what is missing; other settings
are refused before anything loads (``--force-new`` starts afresh). Ctrl-C says what is saved and exits 130.
``--summarize DIR`` rebuilds DIR's summary from the raw records under it, also the earlier scripts' files.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from bench.timing import step_cost_records as records
from bench.timing import step_cost_summary as summary
from bench.timing.step_cost_measure import ARMS, Session, arm_settings, mixed_unit, warm_up, whole_unit
from bench.timing.step_cost_records import GENERATIONS, MIXED, PROG, REFERENCE, STEPS, WHOLE
from calib.run import arguments, fingerprint
from calib.run.command import command
from calib.run.folder import LOG, RunFolder
from calib.run.interleave import rotation
from calib.run.prompts import default_set, load_prompts
from teacache import provenance as prov
from teacache._platform import use_float32_on_cpu
from teacache.errors import InputError
from teacache.io import FORMAT_VERSION, read_json_object, write_json
from teacache.loading import RANDOM_PREFIX

RESULTS = (GENERATIONS.file, STEPS.file)  # what shows that a folder holds measurements
OUTPUTS = (*RESULTS, summary.SUMMARY_MD, summary.SUMMARY_CSV, "provenance.json", LOG)  # what --force-new removes
FOLDER = RunFolder(PROG, RESULTS, OUTPUTS)
WRITES = arguments.Writes(PROG, names=(*OUTPUTS, fingerprint.FILE), marker=fingerprint.FILE, regenerates=("results",))


def _is_own_summary(path: Path) -> bool:
    try:
        with path.open(encoding="utf-8") as handle:
            first = handle.readline().rstrip("\n")
    except (OSError, UnicodeDecodeError):
        return False
    return first == summary.HEADER or first == ",".join(summary.PAIR_COLUMNS)


SUMMARY_WRITES = arguments.Writes(PROG, is_own=_is_own_summary, regenerates=("results",))


def setup_arg_parser() -> argparse.ArgumentParser:
    parser = arguments.CommandParser(prog=PROG, description=__doc__.split("\n\n")[0])
    arguments.add_model_arguments(parser, prompts=False)
    parser.add_argument("--arms", default="forced,gated", help=f"comma-separated, of {', '.join(ARMS)}")
    parser.add_argument("--steps", type=int, default=None, help="default: the model's own")
    parser.add_argument("--size", default=None, help="WIDTHxHEIGHT (default: the model's own)")
    parser.add_argument("--guidance", type=float, default=None, help="default: the model's own")
    parser.add_argument("--prompt", default=None, help="default: the first prompt of the model's own set")
    parser.add_argument("--seed", type=int, default=0, help="the generation's seed")
    parser.add_argument("--block", type=int, default=4, help="steps per block; a block's first step is left out")
    parser.add_argument("--generations", type=int, default=10, help="mixed generations per arm")
    parser.add_argument("--repeats", type=int, default=1, help="rounds of whole runs, vanilla and each arm (0: none)")
    parser.add_argument("--quantize", type=int, choices=(4, 8), default=None)
    parser.add_argument("--blocks", type=int, default=None, help="random-<variant> only: build N blocks of each kind "
                        "(smoke tests: NOT full size)")  # fmt: skip
    parser.add_argument("--out", type=arguments.path_argument, default=None, help="the run folder")
    parser.add_argument("--force-new", action="store_true", help="discard what OUT holds from an earlier run")
    parser.add_argument(
        "--summarize", type=arguments.path_argument, default=None, metavar="DIR",
        help="only rebuild DIR/summary.md and DIR/summary.csv from the raw records in DIR and its subfolders",
    )  # fmt: skip
    return parser


@dataclass(frozen=True)
class Plan:
    """A measurement, checked: the generation, the arms and the folder."""

    model: str
    base_model: str | None
    arms: tuple[str, ...]
    steps: int
    width: int
    height: int
    guidance: float
    prompt: str
    seed: int
    block: int
    generations: int
    repeats: int
    quantize: int | None
    blocks: int | None
    out: Path

    @property
    def random(self) -> bool:
        return self.model.startswith(RANDOM_PREFIX) and self.base_model is None

    def settings(self) -> dict:
        """What makes two runs into one folder the same measurement (fingerprint.json)."""
        weights = fingerprint.weights_identity(self.model, self.base_model, self.blocks)
        return {
            "model": self.model, "base_model": self.base_model, "quantize": self.quantize, "steps": self.steps,
            "size": f"{self.width}x{self.height}", "guidance": self.guidance, "prompt": self.prompt,
            "seed": self.seed, "arms": list(self.arms), "block": self.block, "generations": self.generations,
            "repeats": self.repeats, "gates": {arm: _gate_text(arm_settings(arm, self.steps)) for arm in self.arms},
            "weights": weights, "versions": fingerprint.versions(), "hardware": prov.hardware_slug(),
        }  # fmt: skip


def _gate_text(settings: dict | None) -> dict | None:
    return None if settings is None else {k: v for k, v in settings.items() if k != "coefficients"}


def parse_arms(text: str) -> tuple[str, ...]:
    arms = [a.strip() for a in text.split(",") if a.strip()]
    if not arms:
        raise InputError(f"--arms: expected one or more of {', '.join(ARMS)}")
    for arm in arms:
        if arm not in ARMS:
            raise InputError(f"--arms: unknown arm {arm!r}; expected one or more of {', '.join(ARMS)}")
    if len(set(arms)) != len(arms):
        raise InputError(f"--arms: {text!r} names an arm twice")
    return tuple(arms)


def check_args(args: argparse.Namespace) -> Plan:
    """Every argument, before anything loads; one line naming the first bad one."""
    arms = parse_arms(args.arms)
    steps, width, height, guidance = arguments.generation_settings(
        args.model, args.base_model, args.steps, args.size, args.guidance, 2, ""
    )
    arguments.check_at_least(args.block, 2, "--block", " (a block's first step is left out)")
    arguments.check_at_least(steps, 2 * args.block, "--steps", f" (two blocks of --block {args.block})")
    arguments.check_at_least(args.generations, 1, "--generations")
    arguments.check_at_least(args.repeats, 0, "--repeats")
    arguments.check_at_least(args.seed, 0, "--seed")
    if args.blocks is not None:
        if not (args.model.startswith(RANDOM_PREFIX) and args.base_model is None):
            raise InputError(f"--blocks: only a random-<variant> model is built block by block, not {args.model}")
        arguments.check_at_least(args.blocks, 1, "--blocks")
    prompt = args.prompt
    if prompt is None:
        prompt = next(iter(load_prompts(default_set(args.base_model or args.model)).values()))
    elif not prompt.strip():
        raise InputError("--prompt: expected a prompt, got an empty string")
    try:
        arguments.check_prompts({"prompt": prompt}, args.model, args.base_model)
    except InputError as exc:
        raise InputError(f"--prompt: {str(exc).removeprefix('--prompts: prompt: ')}") from None
    if args.out is None:
        raise InputError("--out: expected the run folder to write (or --summarize DIR to rebuild a summary)")
    arguments.check_out_dir(args.out, writes=WRITES)
    return Plan(args.model, args.base_model, arms, steps, width, height, guidance, prompt, args.seed, args.block,
                args.generations, args.repeats, args.quantize, args.blocks, args.out)  # fmt: skip


def _given(parser: argparse.ArgumentParser, args: argparse.Namespace) -> list[str]:
    """The options given other than their defaults (--summarize aside)."""
    skip = ("help", "summarize")
    return [a.option_strings[0] for a in parser._actions
            if a.option_strings and a.dest not in skip and getattr(args, a.dest) != a.default]  # fmt: skip


def summarize(root: Path) -> int:
    """--summarize: DIR's summary rebuilt from the raw records under it, printed and written."""
    if not root.is_dir():
        raise InputError(f"--summarize: {root} is not a folder")
    sources, _skipped = records.read_sources(root)
    if not sources:
        raise InputError(f"--summarize: {root} holds no {PROG} run folder and no raw step times")
    for name in (summary.SUMMARY_MD, summary.SUMMARY_CSV):
        path = root / name
        if path.is_file() and not _is_own_summary(path):
            raise InputError(f"--summarize: {path} is not a summary {PROG} wrote; move it, or summarize another folder")
        arguments.check_out_file(path, "--summarize", f"summary ({name})", writes=SUMMARY_WRITES)
    text, _pairs = summary.write_summary(root)
    print(text, end="")
    return 0


@command(PROG)
def main(argv: list[str] | None = None) -> int:
    parser = setup_arg_parser()
    args = parser.parse_args(argv)
    if args.summarize is not None:
        given = _given(parser, args)
        if given:
            raise InputError(f"{given[0]}: not used with --summarize, which only reads DIR's raw records")
        return summarize(args.summarize)
    plan = check_args(args)
    settings = plan.settings()
    with FOLDER.writing(plan.out, settings, args.force_new):
        return _measure(plan, settings, argv)


@dataclass(frozen=True)
class Unit:
    """One piece of work written on its own: an arm's mixed generation, or one round of whole runs."""

    kind: str
    index: int
    arm: str | None = None  # mixed only
    position: int = 0

    @property
    def label(self) -> str:
        return f"mixed {self.arm} {self.index}" if self.kind == MIXED else f"whole runs, round {self.index + 1}"


def units(plan: Plan) -> list[Unit]:
    """The mixed generations, the arms in rotating order each round, then the rounds of whole runs."""
    found = [Unit(MIXED, g, plan.arms[a], p) for g in range(plan.generations)
             for p, a in enumerate(rotation(len(plan.arms), g))]  # fmt: skip
    return found + [Unit(WHOLE, r) for r in range(plan.repeats)]


def done(generations: list[dict]) -> set[tuple]:
    """The units the folder's rows hold (a round of whole runs is written in one piece)."""
    found = set()
    for row in generations:
        if row["kind"] == MIXED:
            found.add((MIXED, int(row["index"]), row["arm"]))
        elif row["role"] == REFERENCE:
            found.add((WHOLE, int(row["index"]), None))
    return found


def _measure(plan: Plan, settings: dict, argv: list[str] | None) -> int:
    out = plan.out
    generations, steps = records.read_rows(out)
    held = done(generations)
    todo = [u for u in units(plan) if (u.kind, u.index, u.arm) not in held]
    say, total = FOLDER.logger(out), len(units(plan))
    say(f"{PROG}: {plan.model}, {plan.steps} steps at {plan.width}x{plan.height}, arms {', '.join(plan.arms)}, "
        f"blocks of {plan.block}; {total - len(todo)} of {total} units in {out} already")  # fmt: skip
    if not todo:
        summary.write_summary(out)
        say(f"nothing to measure; rebuilt {out / summary.SUMMARY_MD}")
        return 0

    def stopped() -> str:
        return (f"interrupted: {out} holds {len(done(generations))} of {total} units ({GENERATIONS.file}, "
                f"{STEPS.file}, {summary.SUMMARY_MD}); run the same command again to measure the rest")  # fmt: skip

    with FOLDER.interruptible(stopped):
        session = _session(plan, say)
        _write_provenance(out, plan, settings, argv)
        with FOLDER.progress(out, PROG, len(todo), "units") as progress:
            for unit in todo:
                new_generations, new_steps = _unit(session, plan, unit, say)
                generations += new_generations
                steps += new_steps
                records.write_tables(out, generations, steps)
                summary.write_summary(out)
                progress.advance()
    say(f"wrote {out / summary.SUMMARY_MD}")
    return 0


def _session(plan: Plan, say) -> Session:
    """The pipeline loaded (or built, for random-<variant>) and every path warmed up."""
    start = time.perf_counter()
    if plan.random:
        from teacache.models import fullsize  # heavy (mflux): loaded after the arguments are checked

        use_float32_on_cpu()
        model = fullsize.build_random(plan.model, seed=0, quantize=plan.quantize, blocks=plan.blocks)
    else:
        model = arguments.load_model(plan.model, plan.base_model, plan.quantize)
    session = Session(model, plan.prompt, plan.seed, plan.steps, plan.width, plan.height, plan.guidance)
    loaded = time.perf_counter() - start
    warm_up(session, list(plan.arms), plan.block)
    say(f"loaded in {loaded:.1f} s, warmed up in {time.perf_counter() - start - loaded:.1f} s")
    return session


def _unit(session: Session, plan: Plan, unit: Unit, say) -> tuple[list[dict], list[dict]]:
    if unit.kind == MIXED:
        generations, steps, run = mixed_unit(session, unit.arm, unit.index, unit.position, plan.block)
        runs = [run]
    else:
        names = [None, *plan.arms]
        order = [names[i] for i in rotation(len(names), unit.index)]
        generations, steps, runs = whole_unit(session, order, unit.index)
    for run in runs:
        if run.skipped:
            say(f"  {unit.label}: the arm skipped {run.skipped} steps; its steps are not all computed ones")
    exact = sum(bool(g["exact"]) for g in generations)
    say(f"  {unit.label}: {sum(r.loop_s for r in runs):.2f} s of loop, {exact}/{len(generations)} bit-exact "
        "against the reference")  # fmt: skip
    return generations, steps


def _write_provenance(out: Path, plan: Plan, settings: dict, argv: list[str] | None) -> None:
    """provenance.json: this command's, and the sessions before it that measured into the folder."""
    path = out / "provenance.json"
    sessions = read_json_object(path).get("sessions", []) if path.is_file() else []
    current = prov.collect(None if argv is None else ["teacache-bench", "step-cost", *argv])
    sessions = [*sessions, {k: current[k] for k in ("date_utc", "command", "git")}]
    write_json(path, {
        **current, "format_version": FORMAT_VERSION, "sessions": sessions, "settings": settings,
        "arms": {arm: ARMS[arm] for arm in plan.arms},
        "timing": "per step: from the start of its first call to the start of the next step's; the last step "
        "to the loop's end (mflux evaluates the latents at the end of every step)",
        "memory": "whole runs: the allocator's peak per phase above the memory in use at the start, and what is "
        "held after the loop; the cache: the arm's residuals and anchor at the end of the generation",
    })  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
