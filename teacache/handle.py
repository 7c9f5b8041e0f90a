"""The public handle :func:`teacache.apply_teacache` returns: what a generation did, and the exact restore.

The schedule and First-Block Cache handles (:mod:`teacache.schedule`, :mod:`teacache.fbcache`) are subclasses.
"""

from __future__ import annotations

from teacache.core import StepController, TeaCacheStats
from teacache.errors import StateError
from teacache.gate import GateConfig


class TeaCacheHandle:
    """Returned by :func:`teacache.apply_teacache`; restores the pipeline exactly on ``restore()``/exit.

    The pipeline, adapter and controller it holds are its own: read what a generation did through
    ``stats``, ``history``, ``records`` and the cache properties.
    """

    def __init__(self, model, adapter, controller: StepController, variant: str, restore_fn) -> None:
        self._model = model
        self._adapter = adapter
        self._controller = controller
        self.variant = variant
        self._restore_fn = restore_fn
        self.active = True

    @property
    def config(self) -> GateConfig:
        """The gate settings this handle runs (``apply_teacache``'s keywords with their defaults filled in)."""
        return self._controller.gate_config

    @property
    def rel_l1_thresh(self) -> float:
        return self._controller.gate_config.rel_l1_thresh

    @property
    def rescale(self):
        return self._controller.gate_config.rescale

    @property
    def stats(self) -> TeaCacheStats:
        """Counts and decision log of the most recent generation."""
        return self._controller.stats

    @property
    def history(self) -> list[TeaCacheStats]:
        return list(self._controller.history)

    @property
    def records(self) -> list[dict]:
        """Calibration rows (``calibrate=True``), one per gated step and branch."""
        return list(self._controller.records)

    @property
    def cached_branches(self) -> list[int]:
        """The branches (CFG calls of a step, 0 first) with a cached residual, sorted."""
        return sorted(self._controller.state.residuals)

    @property
    def cache_bytes(self) -> int:
        """Bytes the cache holds now: one residual per branch and the anchor (0 on the fast path)."""
        return sum(a.nbytes for a in self._controller.state.cached)

    def restore(self) -> None:
        """Put the original transformer, predict function and callbacks back, and drop the cache. Idempotent."""
        if not self.active:
            return
        self.active = False
        self._restore_fn()
        self._controller.state.reset()

    def __enter__(self) -> TeaCacheHandle:
        """The handle itself; a restored one is refused, since generating inside it would run without TeaCache."""
        if not self.active:
            raise StateError(
                "handle: this TeaCache handle was restored, so the pipeline runs without TeaCache; call "
                "apply_teacache(...) again for a new handle"
            )
        return self

    def __exit__(self, *exc) -> None:
        self.restore()

    def __repr__(self) -> str:
        state = "active" if self.active else "restored"
        return f"TeaCacheHandle(variant={self.variant!r}, rel_l1_thresh={self.rel_l1_thresh}, {state})"
