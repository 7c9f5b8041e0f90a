"""What every variant adapter shares: the cached step, the exact install/restore, the variant lookup."""

from __future__ import annotations

from collections.abc import Callable

import mlx.core as mx
from mlx import nn

from teacache.core import StepController, register_callback
from teacache.variants import variant_of


def compile_like_mflux(fn: Callable) -> Callable:
    """``mx.compile(fn)``, except where mflux runs its own predict uncompiled (M1/M2)."""
    # heavy (mflux): loaded only when this runs
    from mflux.utils.apple_silicon import AppleSiliconUtil

    return fn if AppleSiliconUtil.is_m1_or_m2() else mx.compile(fn)


class CachingProxy(nn.Module):
    """Holds the original transformer unchanged; subclasses re-walk its forward around ``cached_step``.

    Where the pipeline compiles its predict (FLUX.2, Z-Image), the predict that stands in for it calls
    :meth:`compile_segments` once per generation, as mflux compiles its own predict once per generation:
    the head (up to the signal), the body and the tail then run ``mx.compile``d and only the skip decision,
    which reads the signal back on the host, runs in Python between them. While the device computes a
    signal the decision reads, the host builds the body's graph, so a computed step loses less to the read
    (FLUX.1-dev on the H200: +0.99 % -> +0.35 % per step); a skipped step drops the graph unevaluated.
    """

    def __init__(self, transformer: nn.Module, controller: StepController) -> None:
        super().__init__()
        self.transformer = transformer
        self._controller = controller
        object.__setattr__(self, "_segments", {})  # kept out of the module's parameter tree

    def segment_functions(self) -> dict[str, Callable]:
        """The pure array functions a generation may compile, by name; none unless the pipeline compiles."""
        return {}

    def compile_segments(self) -> None:
        """Fresh compiled segments for the next generation (a compiled function sees the weights of its trace)."""
        object.__setattr__(
            self, "_segments", {name: compile_like_mflux(fn) for name, fn in self.segment_functions().items()}
        )

    def segment(self, name: str, fn: Callable) -> Callable:
        """The compiled ``name`` segment of this generation, else ``fn`` itself."""
        return self._segments.get(name, fn)

    def cached_step(self, modulated, embedded, temb, branch: int, body: Callable[[], mx.array]) -> mx.array:
        """Compute the body or replay its residual, then the tail; the one place a skip happens."""
        ctl = self._controller
        built: list[mx.array] = []  # the body's graph, built while a decision reads its signal (dropped on a skip)
        if ctl.should_compute(modulated, branch=branch, while_reading=lambda: built.append(body())):
            body_out = built[0] if built else body()
            residual = self._residual(body_out, embedded)
            ctl.store_residual(branch, residual)
        else:
            body_out = self._from_cache(embedded, ctl.residual(branch))
            residual = None
        output = ctl.carry(self._tail(body_out, temb), branch)
        ctl.observe_output(branch, output, residual)
        return output

    def _residual(self, body_out: mx.array, embedded: mx.array) -> mx.array:
        return body_out - embedded

    def _from_cache(self, embedded: mx.array, residual: mx.array) -> mx.array:
        return embedded + residual

    def _tail(self, hidden_states: mx.array, temb: mx.array) -> mx.array:
        return self.segment("tail", self._norm_out_proj_out)(hidden_states, temb)

    def _norm_out_proj_out(self, hidden_states: mx.array, temb: mx.array) -> mx.array:
        tr = self.transformer
        return tr.proj_out(tr.norm_out(hidden_states, temb))


def install_proxy(model, controller: StepController, proxy_class: type, predict_factory=None):
    """Swap in the proxy (and a predict with the decision outside ``mx.compile``, when the pipeline compiles
    its own); return the exact undo.

    The fast path (threshold 0) swaps nothing in: it only registers the controller to count steps.
    """
    undo_callback = register_callback(model, controller)
    if controller.fast_path:
        return undo_callback
    original = model.transformer
    had_own_predict = "_predict" in vars(model)
    own_predict = vars(model).get("_predict")
    model.transformer = proxy_class(original, controller)
    if predict_factory is not None:
        object.__setattr__(model, "_predict", predict_factory)

    def restore() -> None:
        model.transformer = original
        if predict_factory is not None:
            if had_own_predict:
                object.__setattr__(model, "_predict", own_predict)
            else:
                object.__delattr__(model, "_predict")
        undo_callback()

    return restore


def original_transformer(model):
    """The pipeline's own transformer, also while a proxy stands in for it."""
    transformer = getattr(model, "transformer", None)
    return transformer.transformer if isinstance(transformer, CachingProxy) else transformer


def proxy_installed(model) -> bool:
    return isinstance(getattr(model, "transformer", None), CachingProxy)


def protocol(family: str, proxy_class: type, predict_factory=None):
    """``variant(model)`` and ``install(model, controller, proxy_class=...)`` of a family's adapter module: the
    variant from the registry, the proxy (and a segmented predict, for pipelines that compile their own) swapped
    in by :func:`install_proxy`."""

    def variant(model) -> str:
        return variant_of(model, family)

    def install(model, controller: StepController, proxy_class: type = proxy_class):
        return install_proxy(model, controller, proxy_class, predict_factory=predict_factory)

    return variant, install
