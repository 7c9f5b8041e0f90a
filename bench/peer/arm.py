"""mlx-teacache as an arm: its ``apply_teacache`` run on a model the way this toolkit's arms are run.

mlx-teacache (the ``peer`` extra) applies TeaCache to mflux's FLUX.1, FLUX.2 Klein, Qwen-Image and Z-Image
pipelines. Here it gets the same coefficients (as its five numbers, c4..c0) and threshold as our arm and
runs inside the same paired, interleaved timing loops (``bench.baselines.measure_pair`` for the sweep,
``bench.timing.fullsize`` for full-size models); what it reports per step (its decision and rel-L1) comes from its
own stats. Its skip window is its default (first and last step forced) unless given.

Where it cannot run (not installed, no variant of it matches the pipeline, an mflux release outside the
range it declares, coefficients it cannot take) :func:`refusal` says why, and the callers write that in
place of a measurement.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field, replace

from teacache.provenance import installed_version

PEER = "mlx-teacache"
# Every gated step computes: any positive threshold, and a slope no rel-L1 stays under. Its gate, signal,
# host read-back and eager predict all run; nothing is skipped (its threshold 0 would bypass the gate).
EVERY_STEP = {"rel_l1_thresh": 1e-3, "coefficients": (0.0, 0.0, 0.0, 1e6, 0.0)}


def version() -> str | None:
    return installed_version(PEER)


def refusal(model=None, rescale=None, threshold: float | None = None) -> str | None:
    """Why mlx-teacache cannot run this (None: it can). Loads nothing."""
    peer_version = version()
    if peer_version is None:
        return f"{PEER} is not installed (the 'peer' extra)"
    mflux_range = _declared_mflux_range()
    mflux_version = installed_version("mflux")
    if mflux_range is not None and mflux_version is not None and mflux_version not in mflux_range:
        return f"{PEER} {peer_version} declares mflux {mflux_range}; mflux {mflux_version} is installed"
    if model is not None:
        import mlx_teacache

        if mlx_teacache.match_variant(getattr(model, "model_config", None), type(model)) is None:
            config = getattr(model, "model_config", None)
            name = getattr(config, "model_name", None)
            return f"{PEER} {peer_version} has no variant for {type(model).__name__} ({name})"
    if rescale is not None:
        from bench.peer.gate import peer_coefficients

        try:
            peer_coefficients(rescale)
        except ValueError as exc:
            return str(exc).removeprefix("--coefficients: ")
    if threshold is not None:
        from bench.peer.gate import threshold_refusal

        return threshold_refusal(threshold)
    return None


def _release(text: str) -> tuple[int, ...] | None:
    """The numeric release of a version string ("0.24.0", "0.26", "0.25.1rc1" -> (0, 25, 1)), padded to 3."""
    import re

    match = re.match(r"\d+(?:\.\d+)*", text.strip())
    if match is None:
        return None
    parts = tuple(int(p) for p in match.group(0).split("."))
    return parts + (0,) * (3 - len(parts))


class MfluxRange:
    """The mflux versions mlx-teacache's metadata declares (its 'mflux' extra), e.g. ``<0.26,>=0.17.5``."""

    _COMPARE = {"<": lambda a, b: a < b, "<=": lambda a, b: a <= b, ">": lambda a, b: a > b,
                ">=": lambda a, b: a >= b, "==": lambda a, b: a == b, "!=": lambda a, b: a != b}  # fmt: skip

    def __init__(self, text: str) -> None:
        import re

        self.text = text
        self.clauses = [(op, _release(v)) for op, v in re.findall(r"(<=|>=|==|!=|<|>)\s*([0-9][^,;\s]*)", text)]

    def __contains__(self, version: str) -> bool:
        release = _release(version)
        return release is None or all(self._COMPARE[op](release, bound) for op, bound in self.clauses)

    def __str__(self) -> str:
        return self.text


def _declared_mflux_range() -> MfluxRange | None:
    from importlib.metadata import requires

    for text in requires(PEER) or []:
        name = text.split(";")[0].strip()
        if name.startswith("mflux") and not name[5:6].isalnum() and name[5:6] not in "-_":
            return MfluxRange(name[5:].strip().strip("()"))
    return None


@dataclass
class PeerResult:
    """One generation under mlx-teacache: its handle's report of every step."""

    generation: object  # calib.run.generation.Generation
    variant_id: str
    decisions: list[str]  # its kind per step: computed, forced, skipped, numerical-miss
    signal: list[float | None]  # its rel-L1 per step (None where it measured none)
    warnings: list[str] = field(default_factory=list)

    @property
    def skipped_steps(self) -> list[int]:
        return [i for i, kind in enumerate(self.decisions) if kind == "skipped"]


def generate_with(model, settings: dict, prompt: str, seed: int, steps: int, width: int, height: int, guidance):
    """One generation of ``model`` with mlx-teacache applied with ``settings`` (its apply_teacache arguments)."""
    import mlx_teacache

    from calib.run.generation import generate

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        handle = mlx_teacache.apply_teacache(model, **settings)
        try:
            gen = generate(model, prompt, seed, steps, width, height, guidance)
        finally:
            handle.restore()
    last = handle.stats.last_generation
    return PeerResult(
        generation=gen,
        variant_id=handle.variant_id,
        decisions=[d.decision for d in last.decisions],
        signal=[d.rel_l1 for d in last.decisions],
        warnings=sorted({f"{type(w.message).__name__}: {w.message}" for w in caught}),
    )


def settings_for(gate) -> dict:
    """apply_teacache's arguments for one of our ``GateConfig``s: its coefficients, threshold and window."""
    from bench.peer.gate import peer_coefficients

    return {
        "rel_l1_thresh": gate.rel_l1_thresh,
        "coefficients": peer_coefficients(gate.rescale),
        "skip_first_n_steps": gate.skip_first_n_steps,
        "skip_last_n_steps": gate.skip_last_n_steps,
    }


@dataclass(frozen=True)
class PeerArm:
    """A ``bench.timing.fullsize`` arm run by mlx-teacache: its apply_teacache arguments."""

    settings: dict


def run_in_session(session, arm: PeerArm, prompt: str, seed: int, steps: int | None = None) -> dict:
    """One generation of a ``bench.timing.fullsize_measure.Session`` under mlx-teacache, as its ``run`` returns it."""
    import math

    import mlx.core as mx

    from calib.run.generation import HostLatents

    steps = steps or session.steps
    mx.synchronize()
    mx.reset_peak_memory()
    result = generate_with(
        session.model, arm.settings, prompt, seed, steps, session.size, session.size, session.guidance
    )
    mx.synchronize()
    peak, gen = mx.get_peak_memory(), result.generation
    kept = replace(result, generation=None)  # its report without the device arrays, as the latents below
    return {
        "loop_s": gen.loop_s, "total_s": gen.total_s, "latents": HostLatents.of(gen.latents), "peak_bytes": peak,
        "skipped": len(result.skipped_steps), "cache_bytes": math.nan, "branches": None, "log": [], "peer": kept,
    }  # fmt: skip
