"""Checks of command-line arguments that every command shares, run before any model loads.

A bad argument costs a second and one line naming it, never a model load or a partial file: the
parser prints argparse's own errors on one line, and ``--help`` shows every default.
"""

from __future__ import annotations

import argparse
import math
import numbers
import os
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

from calib.run.prompts import SETS, default_set, load_prompts, parse_seeds, parse_size
from teacache import load_model as _load
from teacache import variants
from teacache.errors import InputError, TeaCacheError
from teacache.loading import check_loras as check_model_loras
from teacache.loading import model_defaults, resolve_spec
from teacache.lora import LoraError, Loras
from teacache.outputs import Writes, check_out_dir, check_out_file  # noqa: F401  (the output rule, re-exported)

EXIT_BAD_INPUT = TeaCacheError.exit_status  # argparse's own errors exit 2 too
EXIT_INTERRUPTED = 130  # 128 + SIGINT, what a shell reports for Ctrl-C


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Appends "(default: X)" to every option that has a default worth showing."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        default = action.default
        shown = default not in (None, False, argparse.SUPPRESS) and not isinstance(action, argparse._HelpAction)
        if shown and "%(default)" not in text and "default" not in text and action.option_strings:
            text += " (default: %(default)s)"
        return text

    def _split_lines(self, text: str, width: int) -> list[str]:
        return textwrap.wrap(" ".join(text.split()), width, break_on_hyphens=False)  # keep set names whole


class CommandParser(argparse.ArgumentParser):
    """An argument parser whose errors are one line (no usage block) and exit 2."""

    def __init__(self, prog: str, description: str | None = None, **kwargs) -> None:
        super().__init__(prog=prog, description=description, formatter_class=HelpFormatter, **kwargs)

    def error(self, message: str):
        self.exit(EXIT_BAD_INPUT, f"{self.prog}: {message} (see {self.prog} --help)\n")

    def parse_checked(self, argv: list[str] | None, writes: Writes) -> tuple[argparse.Namespace, list[str]]:
        """The arguments, ``--out`` checked by the output rule before anything is read, and the command line as
        given (provenance records it)."""
        argv = list(sys.argv[1:] if argv is None else argv)
        args = self.parse_args(argv)
        check_out_dir(args.out, writes=writes)
        return args, argv


def add_model_arguments(parser: argparse.ArgumentParser, prompts: bool = True) -> None:
    """--model and --base-model (and --prompts), with the registry's names and defaults in their help."""
    parser.add_argument(
        "--model",
        default=variants.default_model(),
        help=f"one of {', '.join(variants.load_names())}, or a local folder of mflux-format weights",
    )
    parser.add_argument("--base-model", default=None, help="the architecture of a local model folder (e.g. dev)")
    if prompts:
        parser.add_argument(
            "--prompts",
            default=None,
            help=f"a built-in set ({', '.join(SETS)}) or a .txt/.json/.csv file (default: the model's own set, "
            "from its variant spec)",
        )


def add_lora_arguments(parser: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    """--lora-paths and --lora-scales, spelled as mflux's commands spell them."""
    parser.add_argument(
        "--lora-paths",
        nargs="+",
        default=None,
        metavar="PATH",
        help="LoRA .safetensors files (mflux's format), loaded by mflux's LoRA code; their SHA-256 and scales are "
        "recorded with the results",
    )
    parser.add_argument(
        "--lora-scales",
        nargs="+",
        default=None,
        metavar="SCALE",
        help="one scale per --lora-paths file, space- or comma-separated (default: 1.0 each)",
    )


LORA_ARGS = {"lora_paths:": "--lora-paths:", "lora_scales:": "--lora-scales:"}  # the API's names -> the options'


def check_loras(model: str, base_model: str | None, paths: list[str] | None, scales: list[str] | None) -> Loras:
    """--lora-paths and --lora-scales read and checked against the model's layers, before anything is written."""
    try:
        return check_model_loras(model, base_model, paths, lora_scale_numbers(scales))
    except LoraError as exc:
        raise LoraError(_named(str(exc), LORA_ARGS)) from None


def lora_scale_numbers(scales: list[str] | None) -> list[float] | None:
    """--lora-scales' words as numbers (each word may hold several, comma-separated)."""
    if scales is None:
        return None
    values = []
    for word in (part.strip() for text in scales for part in str(text).split(",")):
        try:
            values.append(float(word))
        except ValueError:
            raise LoraError(f"--lora-scales: expected finite numbers, got {shown(word)}") from None
    return values


def _named(message: str, names: dict[str, str]) -> str:
    """A message of the API (``lora_paths: ...``) as the command's option names it (``--lora-paths: ...``)."""
    for field, arg in names.items():
        if message.startswith(field):
            return arg + message[len(field) :]
    return message


def path_argument(text: str) -> Path:
    """argparse ``type`` of every path argument: an empty string is refused, since ``Path("")`` is the
    current folder and a command would write its files there."""
    if not str(text).strip():
        raise argparse.ArgumentTypeError("expected a path, got an empty string")
    return Path(text)


def shown(value: object, limit: int = 80) -> str:
    """A value as a message quotes it: whole when short, else its start and its length (one readable line)."""
    text = str(value)
    return repr(text) if len(text) <= limit else f"{text[: limit - 20]!r}... ({len(text)} characters)"


def check_input_file(path: str | os.PathLike, arg: str) -> Path:
    """A file that exists and can be read."""
    path = Path(path)
    try:
        if not path.exists():
            raise InputError(f"{arg}: {path} does not exist")
        if not path.is_file():
            raise InputError(f"{arg}: {path} is not a file")
        with path.open("rb") as handle:
            handle.read(1)
    except OSError as exc:  # a name too long for the system, a folder we may not look into
        raise InputError(f"{arg}: cannot read {shown(path)} ({exc.strerror or exc})") from None
    return path


def check_model(name: str, base_model: str | None = None) -> None:
    """The model is one the registry knows, or a local folder with its architecture named.

    Loads nothing (the registry imports no mflux): a bad name costs milliseconds, not a model load.
    """
    if not str(name).strip():
        raise InputError("--model: expected a model name or a local folder, got an empty string")
    path = Path(name).expanduser()
    if path.is_file():
        raise InputError(f"--model: {name} is a file; a local model is a folder of mflux-format weights")
    if base_model is not None and not path.exists():
        raise InputError(f"--model: no folder at {name}; --base-model names the architecture of a local folder")
    try:
        resolve_spec(name, base_model)
    except ValueError as exc:
        message = str(exc)
        for field, arg in (("base_model:", "--base-model:"), ("model:", "--model:")):
            if message.startswith(field):
                message = arg + message[len(field) :]
                break
        raise InputError(message) from None


def read_prompts(spec: str | None, model: str, base_model: str | None = None) -> dict[str, str]:
    """A prompt set or file (default: the model's own set), any failure to read it one line about --prompts."""
    spec = spec or default_set(base_model or model)
    try:
        prompts = load_prompts(spec)
    except ValueError as exc:  # a refusal of load_prompts', or a .json or .csv file Python cannot parse
        if str(exc).startswith("--prompts"):
            raise
        raise InputError(f"--prompts: {spec} is not a usable prompt file ({exc})") from None
    except (OSError, KeyError, TypeError, AttributeError) as exc:
        raise InputError(f"--prompts: cannot read {spec} ({type(exc).__name__}: {exc})") from None
    check_prompts(prompts, model, base_model)
    return prompts


def check_prompts(prompts: dict[str, str], model: str, base_model: str | None = None) -> None:
    """Prompts the model cannot draw (the tiny-shapes vocabulary), refused before it loads."""
    check = resolve_spec(model, base_model).prompt_check
    if check is None:
        return
    parse = variants.zoo(check)
    for prompt_id, text in prompts.items():
        try:
            parse(text)
        except ValueError as exc:
            raise InputError(f"--prompts: {prompt_id}: {str(exc).removeprefix('prompt: ')}") from None


def load_model(name: str, base_model: str | None, quantize: int | None, loras: Loras | None = None):
    """teacache.load_model, with a failure to get the weights (network, disk, format) said in one line."""
    try:
        return _load(name, base_model=base_model, quantize=quantize, **(loras or Loras()).kwargs())
    except LoraError as exc:
        raise LoraError(_named(str(exc), LORA_ARGS)) from None
    except TeaCacheError:
        raise
    except Exception as exc:  # noqa: BLE001 - mflux and the Hub raise many types (network, disk, format)
        raise InputError(f"--model: cannot load {name} ({type(exc).__name__}: {exc})") from None


def check_fraction(value: float, arg: str) -> float:
    """A number in (0, 1], like a quality floor (numpy's scalars too)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise InputError(f"{arg}: expected a number in (0, 1], got {value!r}")
    if not math.isfinite(value) or not 0 < value <= 1:
        raise InputError(f"{arg}: expected a number in (0, 1], got {float(value):g}")
    return float(value)


def check_at_least(value: int, minimum: int, arg: str, why: str = "") -> int:
    if value < minimum:
        raise InputError(f"{arg}: expected at least {minimum}{why}, got {value}")
    return value


def check_guidance(value: float, arg: str = "--guidance") -> float:
    """A guidance scale: finite and >= 0 (0 turns guidance off; a negative one steers away from the prompt, which
    no model here is meant to run)."""
    if not math.isfinite(value) or value < 0:
        raise InputError(f"{arg}: expected a finite number >= 0, got {value:g}")
    return float(value)


def check_variant_name(name: str, arg: str = "--variant") -> str:
    """A variant the registry knows (or one of its aliases), else one line naming the known ones."""
    if variants.find(name) is None:
        raise InputError(f"{arg}: unknown variant {name!r}; known: {', '.join(variants.names())}")
    return name


# The most denoising steps a command runs: the flow-matching models here were trained on 1000 timesteps, so a
# longer schedule only repeats them; refused before the warm-up, which is a whole generation of that length.
MAX_STEPS = 1000


def generation_settings(
    model: str, base_model: str | None, steps: int | None, size: str | None, guidance: float | None,
    min_steps: int, why: str,
) -> tuple[int, int, int, float]:  # fmt: skip
    """(steps, width, height, guidance): what was given, else the model's own defaults, checked."""
    check_model(model, base_model)
    defaults = model_defaults(model, base_model)
    width, height = parse_size(size) if size else (defaults["width"], defaults["height"])
    if resolve_spec(model, base_model).only_its_size and (width, height) != (defaults["width"], defaults["height"]):
        raise InputError(
            f"--size: {model} only makes {defaults['width']}x{defaults['height']} images, got {width}x{height}"
        )
    steps = steps if steps is not None else defaults["steps"]
    check_at_least(steps, min_steps, "--steps", why)
    if steps > MAX_STEPS:
        raise InputError(
            f"--steps: expected at most {MAX_STEPS} (the timesteps these models were trained on: more only repeat "
            f"them), got {steps}; a warm-up of that length would run before any estimate of the work"
        )
    guidance = check_guidance(guidance if guidance is not None else defaults["guidance"])
    return steps, width, height, guidance


@dataclass(frozen=True, kw_only=True)
class Generations:
    """Prompts x seeds at one generation setting on one model, checked: what a recording and a sweep both run
    (each command's settings add their own fields)."""

    model: str
    prompts: dict[str, str]
    seeds: list[int]
    steps: int
    width: int
    height: int
    guidance: float
    out: Path
    base_model: str | None = None
    quantize: int | None = None
    loras: Loras = Loras()  # LoRA files applied to the model (their SHA-256 and scales join the fingerprint)
    force_new: bool = False
    yes: bool = False  # run work estimated over an hour (calib.run.estimate)

    @property
    def pairs(self) -> list[tuple[str, str, int]]:
        """(prompt id, prompt, seed) of every generation, prompts outermost."""
        return [(pid, text, seed) for pid, text in self.prompts.items() for seed in self.seeds]


def checked_generations(
    model: str, out: Path, prompts: str | None, seeds: str, steps: int | None, size: str | None,
    guidance: float | None, base_model: str | None, quantize: int | None, force_new: bool, yes: bool,
    lora_paths: list[str] | None, lora_scales: list[str] | None, *, writes: Writes, why: str,
) -> dict:  # fmt: skip
    """:class:`Generations`' fields from a command's arguments, each checked (nothing loads; only the prompt
    file is read); raise InputError naming the argument."""
    steps, width, height, guidance = generation_settings(model, base_model, steps, size, guidance, 3, why)
    return {
        "model": model,
        "loras": check_loras(model, base_model, lora_paths, lora_scales),
        "prompts": read_prompts(prompts, model, base_model),
        "seeds": parse_seeds(seeds),
        "steps": steps,
        "width": width,
        "height": height,
        "guidance": float(guidance),
        "out": check_out_dir(out, writes=writes),
        "base_model": base_model,
        "quantize": quantize,
        "force_new": force_new,
        "yes": bool(yes),
    }
