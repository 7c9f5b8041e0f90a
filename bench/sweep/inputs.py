"""The input files a sweep names (``--traces``, ``--coefficients``, ``--compare-coefficients``), read and checked
before the model loads, so a bad file is refused before any work."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from bench.common import parse_coefficients
from bench.sweep.settings import SweepSettings
from calib.run import arguments
from teacache.errors import InputError
from teacache.loading import resolve_spec

if TYPE_CHECKING:
    from calib.traces.runs import Traces
    from teacache.rescale import RescaleFunction


def read_traces(path: Path, steps: int) -> Traces:
    """The traces predictions replay, read and validated by the one trace reader, for runs of ``steps`` steps."""
    # heavy (pandas): loaded after the arguments are checked
    from bench.sweep.replay import read_replay_traces
    from calib.traces.errors import TraceError

    arguments.check_input_file(path, "--traces")
    try:
        return read_replay_traces([path], steps, num_steps_arg="--steps")
    except TraceError as exc:  # the reader names its input TRACES; here it is the --traces argument
        raise InputError(f"--traces: {str(exc).removeprefix('TRACES: ')}") from None


def check_inputs(settings: SweepSettings) -> tuple[Traces | None, RescaleFunction | None]:
    """The input files, read and checked before the model loads: (traces frame or None, fixed rescale or None)."""
    traces = read_traces(settings.traces, settings.steps) if settings.traces is not None else None
    if traces is not None:
        variant = resolve_spec(settings.model, settings.base_model).name
        others = [v for v in traces.variants if v != variant]
        if others:
            raise InputError(
                f"--traces: {settings.traces} holds traces of {', '.join(others)}, not of {variant}: its replay "
                f"would predict nothing about this sweep; record {variant}'s traces (teacache-calib record)"
            )
    rescale = None
    if settings.coefficients != "packaged" or settings.x_range is not None:
        # heavy (pandas): loaded after the arguments are checked
        from calib.fit.coefficient_sources import resolve_coefficients

        if isinstance(parse_coefficients(settings.coefficients), Path):
            arguments.check_input_file(Path(settings.coefficients.split("#", 1)[0]), "--coefficients")
        rescale = resolve_coefficients(settings.coefficients, None, settings.x_range)[0]
    for source in settings.compare_coefficients:  # files read now; packaged ones once the variant is known
        if source != "packaged":
            # heavy (pandas): loaded after the arguments are checked
            from calib.fit.coefficient_sources import resolve_coefficients

            arguments.check_input_file(Path(source.split("#", 1)[0]), "--compare-coefficients")
            resolve_coefficients(source, None, None, arg="--compare-coefficients")
    return traces, rescale


def resolve_rescales(settings: SweepSettings, primary: RescaleFunction, variant: str) -> dict[str, RescaleFunction]:
    """Every TeaCache arm's rescale function by source: --coefficients' (``primary``) first."""
    # heavy (pandas): loaded after the arguments are checked
    from calib.fit.coefficient_sources import resolve_coefficients

    found = {settings.coefficients: primary}
    for source in settings.rescale_sources[1:]:
        found[source] = resolve_coefficients(source, variant, None, arg="--compare-coefficients")[0]
    return found
