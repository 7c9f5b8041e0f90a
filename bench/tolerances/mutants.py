"""Deliberately broken wrappers: each one a bug the tolerances exist to catch.

Every mutant is the real adapter with one method overridden, installed through the adapter's own
``install`` (``proxy_class=``) or with a broken controller or restore. ``teacache-bench gapcheck``
runs them and reports whether each tolerance separates them from the measured noise.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import mlx.core as mx

from teacache.adapters import adapter_for
from teacache.core import StepController, is_applied
from teacache.handle import TeaCacheHandle
from teacache.signal import rel_l1


class StaleResidualController(StepController):
    """The residual is stored once and never refreshed."""

    def store_residual(self, branch: int, residual: mx.array) -> None:
        self.state.residuals.setdefault(branch, residual)


class AnchorOnComputeController(StepController):
    """The anchor (previous modulated input) advances only on computed steps."""

    def _decide(self, modulated: mx.array, step: int, while_reading: Callable[[], None] | None = None) -> bool:
        x = None if self.state.anchor is None else rel_l1_item(modulated, self.state.anchor)
        decision = self.gate.decide(step, self.num_steps, x, self.sigma)
        if decision.compute:
            self.state.anchor = modulated
        return decision.compute


class LateDecisionController(StepController):
    """Each step acts on the decision taken for the step before."""

    def _decide(self, modulated: mx.array, step: int, while_reading: Callable[[], None] | None = None) -> bool:
        decision = super()._decide(modulated, step, while_reading)
        previous = getattr(self, "_late_previous", True)
        self._late_previous = decision
        return True if step == 0 else previous

    def _reset_generation(self) -> None:
        super()._reset_generation()
        self._late_previous = True


class NeverEngagesController(StepController):
    """The cache never engages: every step is computed."""

    def _decide(self, modulated: mx.array, step: int, while_reading: Callable[[], None] | None = None) -> bool:
        super()._decide(modulated, step, while_reading)
        return True


def rel_l1_item(a: mx.array, b: mx.array) -> float:
    return rel_l1(a, b).item()


def wrong_tokens_proxy(base: type) -> type:
    class WrongTokens(base):
        """The residual is taken over the wrong tokens (shifted by one along the sequence)."""

        def _residual(self, body_out, embedded):
            return mx.roll(body_out - embedded, 1, axis=1)

    return WrongTokens


def tail_twice_proxy(base: type) -> type:
    class TailTwice(base):
        """The output normalisation of the tail is applied twice."""

        def _tail(self, hidden_states, temb):
            tr = self.transformer
            return tr.proj_out(tr.norm_out(tr.norm_out(hidden_states, temb), temb))

    return TailTwice


@dataclass(frozen=True)
class Mutant:
    name: str
    description: str
    controller: type = StepController
    proxy: Callable[[type], type] | None = None
    leaky_restore: bool = False
    caught_by: tuple[str, ...] = ()  # the tolerances that exist to catch it


MUTANTS = (
    Mutant("stale-residual", "residual never refreshed", StaleResidualController, caught_by=("ssim_floor",)),
    Mutant(
        "anchor-on-compute",
        "anchor advanced only on computed steps",
        AnchorOnComputeController,
        caught_by=("skip_band", "ssim_floor"),
    ),
    Mutant("wrong-tokens", "residual over the wrong tokens", proxy=wrong_tokens_proxy, caught_by=("ssim_floor",)),
    Mutant("tail-twice", "tail applied twice", proxy=tail_twice_proxy, caught_by=("proxy_noop", "ssim_floor")),
    Mutant(
        "late-decision", "skip decision one step late", LateDecisionController, caught_by=("skip_band", "ssim_floor")
    ),
    Mutant("never-engages", "a cache that never engages", NeverEngagesController, caught_by=("skip_band",)),
    Mutant("leaky-restore", "restore leaves the proxy in place", leaky_restore=True, caught_by=("restore",)),
)
MUTANTS_BY_NAME = {m.name: m for m in MUTANTS}


def apply_mutant(model, mutant: Mutant, gate_config) -> TeaCacheHandle:
    """Install ``mutant`` on ``model`` the way apply_teacache installs the real wrapper."""
    adapter = adapter_for(model)
    controller = mutant.controller(gate_config)
    proxy_base = _proxy_class(adapter)
    proxy = mutant.proxy(proxy_base) if mutant.proxy else proxy_base
    restore = adapter.install(model, controller, proxy_class=proxy)
    if mutant.leaky_restore:

        def restore() -> None:  # takes the callback away, leaves the proxy (and predict) in place
            registry = model.callbacks
            for lst in (registry.before_loop, registry.in_loop, registry.after_loop, registry.interrupt):
                lst[:] = [c for c in lst if c is not controller]

    return TeaCacheHandle(model, adapter, controller, adapter.variant(model), restore)


def _proxy_class(adapter) -> type:
    for value in vars(adapter).values():
        if isinstance(value, type) and value.__name__.startswith("TeaCache") and value.__name__.endswith("Transformer"):
            return value
    raise TypeError(f"adapter {adapter.__name__} has no proxy class")


def leftovers(model, original_transformer) -> list[str]:
    """What a restore left behind: a proxy, a replaced predict function, a TeaCache callback."""
    found = []
    if model.transformer is not original_transformer:
        found.append("proxy transformer")
    if "_predict" in vars(model):
        found.append("replaced _predict")
    if is_applied(model):
        found.append("callback")
    return found
