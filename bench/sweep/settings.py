"""The settings of one sweep, checked before anything loads, and what makes two sweeps the same sweep.

:func:`plan` turns the command's arguments into a :class:`SweepSettings` (reading nothing but the prompt file);
:func:`fingerprint_settings` is what a sweep folder's ``fingerprint.json`` records of them, so a rerun resumes
only a sweep of the same settings.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from bench.common import parse_coefficients, parse_thresholds
from bench.sweep.baselines import parse_baselines
from bench.sweep.files import WRITES, run_folder
from calib.run import arguments
from calib.run.generation import settings_fingerprint
from teacache.errors import InputError

if TYPE_CHECKING:
    from calib.run.folder import RunFolder
    from teacache.rescale import RescaleFunction

EXTENDABLE = ("seeds", "thresholds")  # settings a rerun may add to


@dataclass(frozen=True, kw_only=True)
class SweepSettings(arguments.Generations):
    """Everything one sweep needs, validated: built by :func:`plan`, run by :func:`bench.sweep.command.run_sweep`."""

    thresholds: list[float]
    repeats: int
    coefficients: str = "packaged"
    traces: Path | None = None
    x_range: tuple[float, float] | None = None
    save_images: bool = False
    baselines: tuple[str, ...] = ()  # bench.sweep.baselines arms besides TeaCache
    compare_coefficients: tuple[str, ...] = ()  # rescale sources besides --coefficients
    isolate: bool = False

    @property
    def arms_mode(self) -> bool:
        """Every pair measured by bench.sweep.baselines.measure_pair (rows carry arm, arm_setting, rescale)."""
        return bool(self.baselines or self.compare_coefficients or self.isolate)

    @property
    def rescale_sources(self) -> tuple[str, ...]:
        """--coefficients first (the one the threshold tables report), then the others to compare."""
        return (self.coefficients, *(c for c in self.compare_coefficients if c != self.coefficients))

    @property
    def extendable(self) -> tuple[str, ...]:
        # the baseline grids follow the thresholds: a new threshold would change every pair's arms
        return ("seeds",) if self.arms_mode else EXTENDABLE

    @property
    def folder(self) -> RunFolder:
        return run_folder(self.extendable)

    @property
    def generation(self) -> tuple:
        return self.steps, self.width, self.height, self.guidance


def plan(
    model: str,
    thresholds: str,
    out: Path,
    prompts: str | None = None,
    seeds: str = "0,1",
    steps: int | None = None,
    size: str | None = None,
    guidance: float | None = None,
    repeats: int = 3,
    coefficients: str = "packaged",
    traces: Path | None = None,
    base_model: str | None = None,
    quantize: int | None = None,
    save_images: bool = False,
    force_new: bool = False,
    x_range: str | None = None,
    baselines: str | None = None,
    compare_coefficients: str | None = None,
    isolate: bool = False,
    yes: bool = False,
    lora_paths: list[str] | None = None,
    lora_scales: list[str] | None = None,
) -> SweepSettings:
    """Check every argument (nothing is read but the prompt file, nothing loads); raise InputError."""
    generations = arguments.checked_generations(
        model, out, prompts, seeds, steps, size, guidance, base_model, quantize, force_new, yes, lora_paths,
        lora_scales, writes=WRITES, why=" steps",
    )  # fmt: skip
    arguments.check_at_least(repeats, 1, "--repeats")
    parse_coefficients(coefficients)
    arms = parse_baselines(baselines)
    compare = _parse_compare(compare_coefficients)
    if compare and x_range is not None:
        raise InputError("--x-range: applies to --coefficients numbers only; give files to --compare-coefficients")
    return SweepSettings(
        **generations,
        thresholds=parse_thresholds(thresholds),
        repeats=repeats,
        coefficients=coefficients,
        traces=traces,
        x_range=_parse_x_range(x_range),
        save_images=save_images,
        baselines=arms,
        compare_coefficients=compare,
        isolate=bool(isolate),
    )


def _parse_compare(text: str | None) -> tuple[str, ...]:
    """'packaged,fit.json' -> the sources; each must be a source --coefficients takes (numbers: no commas)."""
    if text is None:
        return ()
    sources = tuple(part.strip() for part in str(text).split(",") if part.strip())
    if not sources:
        raise InputError("--compare-coefficients: expected comma-separated rescale sources, e.g. packaged,fit.json")
    for source in sources:
        if source != "packaged" and not isinstance(parse_coefficients(source), Path):
            raise InputError(
                f"--compare-coefficients: {source!r} is not 'packaged' or a file (a fit.json, a calibration .json "
                "or a .py module); coefficient numbers go to --coefficients"
            )
    if len(set(sources)) != len(sources):
        raise InputError("--compare-coefficients: a source given twice")
    return sources


def _parse_x_range(text: str | None) -> tuple[float, float] | None:
    # heavy (pandas): loaded after the arguments are checked
    from calib.fit.coefficient_sources import parse_x_range

    return parse_x_range(text) if text is not None else None


def rescale_settings(rescale: RescaleFunction) -> dict:
    """A rescale function as a fingerprint records it: everything but its provenance (where it was read from)."""
    return {k: v for k, v in rescale.to_dict().items() if k != "provenance"}


def fingerprint_settings(
    settings: SweepSettings, rescale: RescaleFunction | None = None, variant: str | None = None
) -> dict:
    """What makes two sweeps the same sweep. Before the model loads the variant (and so the packaged
    coefficients) may be unknown; those keys join once it has."""
    fp = settings_fingerprint(settings, variant, thresholds=settings.thresholds, repeats=settings.repeats)
    if rescale is not None:
        fp["coefficients"] = rescale_settings(rescale)
    # the arm settings join only when given, so a sweep without them keeps its old fingerprint
    if settings.baselines:
        fp["baselines"] = list(settings.baselines)
    if settings.compare_coefficients:
        fp["compare_coefficients"] = list(settings.compare_coefficients)
    if settings.isolate:
        fp["isolate"] = True
    return fp
