"""Checks of command-line arguments that every command shares, run before any model loads.

A bad argument costs a second and one line naming it, never a model load or a partial file: the
parser prints argparse's own errors on one line, and ``--help`` shows every default.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import tempfile
from pathlib import Path

EXIT_BAD_INPUT = 2
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
        import textwrap

        return textwrap.wrap(" ".join(text.split()), width, break_on_hyphens=False)  # keep set names whole


class CommandParser(argparse.ArgumentParser):
    """An argument parser whose errors are one line (no usage block) and exit 2."""

    def __init__(self, prog: str, description: str | None = None, **kwargs) -> None:
        super().__init__(prog=prog, description=description, formatter_class=HelpFormatter, **kwargs)

    def error(self, message: str):
        self.exit(EXIT_BAD_INPUT, f"{self.prog}: {message} (see {self.prog} --help)\n")


def fail(prog: str, message: str) -> int:
    """Print one line for a refused input; the caller returns the exit code."""
    print(f"{prog}: {' '.join(str(message).split())}", file=sys.stderr)
    return EXIT_BAD_INPUT


def _nearest_existing(path: Path) -> Path:
    for folder in (path, *path.parents):
        if folder.exists():
            return folder
    return Path.cwd()


def check_out_dir(path: str | os.PathLike, arg: str = "--out") -> Path:
    """A folder this command may write into: a folder or nothing yet, under a folder we can write to.

    Probes with a temporary file (removed at once), because a permission check alone says yes to root
    on a read-only or immutable folder. Creates nothing that stays.
    """
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise ValueError(f"{arg}: {path} is a file; expected a folder (a new one, or one this command wrote)")
    existing = _nearest_existing(path)
    if not existing.is_dir():
        raise ValueError(f"{arg}: cannot create {path}: {existing} is a file, not a folder")
    try:
        with tempfile.TemporaryFile(dir=existing, prefix=".write-probe-"):
            pass
    except OSError as exc:
        reason = exc.strerror or exc
        raise ValueError(f"{arg}: cannot write in {existing} ({reason}); choose a writable folder") from None
    return path


def check_input_file(path: str | os.PathLike, arg: str) -> Path:
    """A file that exists and can be read."""
    path = Path(path)
    if not path.exists():
        raise ValueError(f"{arg}: {path} does not exist")
    if not path.is_file():
        raise ValueError(f"{arg}: {path} is not a file")
    try:
        with path.open("rb") as handle:
            handle.read(1)
    except OSError as exc:
        raise ValueError(f"{arg}: cannot read {path} ({exc.strerror or exc})") from None
    return path


def check_model(name: str, base_model: str | None = None) -> None:
    """The model is an embedded one, a local folder with its architecture named, or a name mflux knows.

    Loads nothing: mflux's ModelConfig resolves names without touching weights.
    """
    from teacache.loading import EMBEDDED

    if name in EMBEDDED:
        if base_model is not None:
            raise ValueError(f"--base-model: {name} is an embedded model; --base-model is for local folders")
        return
    if name.startswith("tiny-"):  # the embedded models' prefix: mflux has no model of that name
        raise ValueError(f"--model: unknown embedded model {name!r}; embedded models: {', '.join(EMBEDDED)}")
    path = Path(name).expanduser()
    if path.exists():
        if not path.is_dir():
            raise ValueError(f"--model: {name} is a file; a local model is a folder of mflux-format weights")
        if base_model is None:
            raise ValueError(f"--base-model: {name} is a local folder; name its architecture, e.g. dev or schnell")
        _check_mflux_name(base_model, "--base-model")
        return
    if name.startswith(("/", ".", "~")) or name.count("/") > 1:  # a path, not an org/name of the Hub
        raise ValueError(f"--model: no folder at {name}")
    if base_model is not None:
        raise ValueError(f"--base-model: only for a local model folder; {name} is a model name")
    _check_mflux_name(name, "--model")


def _check_mflux_name(name: str, arg: str) -> None:
    from mflux.models.common.config.model_config import ModelConfig

    from teacache.loading import EMBEDDED

    try:
        ModelConfig.from_name(model_name=name)
    except Exception:  # noqa: BLE001 - mflux raises several types for an unknown name
        raise ValueError(
            f"{arg}: unknown model {name!r}; expected an embedded model ({', '.join(EMBEDDED)}), an mflux model "
            "name (dev, schnell, krea-dev, flux2-klein-4b, qwen-image, z-image) or a local folder with --base-model"
        ) from None


def read_prompts(spec: str | None, model: str) -> dict[str, str]:
    """A prompt set or file (default: the model's own set), any failure to read it one line about --prompts."""
    from calib.prompts import MODEL_DEFAULT_SET, load_prompts

    spec = spec or MODEL_DEFAULT_SET.get(model, "default")
    try:
        return load_prompts(spec)
    except ValueError as exc:
        if str(exc).startswith("--prompts"):
            raise
        raise ValueError(f"--prompts: {spec} is not a usable prompt file ({exc})") from None
    except (OSError, KeyError, TypeError, AttributeError) as exc:
        raise ValueError(f"--prompts: cannot read {spec} ({type(exc).__name__}: {exc})") from None


def load_model(name: str, base_model: str | None, quantize: int | None):
    """teacache.load_model, with a failure to get the weights (network, disk, format) said in one line."""
    from teacache import load_model as _load

    try:
        return _load(name, base_model=base_model, quantize=quantize)
    except ValueError:
        raise
    except Exception as exc:  # noqa: BLE001 - mflux and the Hub raise many types (network, disk, format)
        raise ValueError(f"--model: cannot load {name} ({type(exc).__name__}: {exc})") from None


def check_fraction(value: float, arg: str) -> float:
    """A number in (0, 1], like a quality floor."""
    if not isinstance(value, int | float) or not math.isfinite(value) or not 0 < value <= 1:
        raise ValueError(f"{arg}: expected a number in (0, 1], got {value!r}")
    return float(value)


def check_at_least(value: int, minimum: int, arg: str, why: str = "") -> int:
    if value < minimum:
        raise ValueError(f"{arg}: expected at least {minimum}{why}, got {value}")
    return value
