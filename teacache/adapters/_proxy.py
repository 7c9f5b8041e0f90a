"""What every variant adapter shares: the cached step, the exact install/restore, the variant lookup."""

from __future__ import annotations

from collections.abc import Callable

import mlx.core as mx
from mlx import nn

from teacache.core import StepController, register_callback


class CachingProxy(nn.Module):
    """Holds the original transformer unchanged; subclasses re-walk its forward around ``cached_step``."""

    def __init__(self, transformer: nn.Module, controller: StepController) -> None:
        super().__init__()
        self.transformer = transformer
        self._controller = controller

    def cached_step(self, modulated, embedded, temb, branch: int, body: Callable[[], mx.array]) -> mx.array:
        """Compute the body or replay its residual, then the tail; the one place a skip happens."""
        ctl = self._controller
        if ctl.should_compute(modulated, branch=branch):
            body_out = body()
            residual = self._residual(body_out, embedded)
            ctl.store_residual(branch, residual)
        else:
            body_out = self._from_cache(embedded, ctl.residual(branch))
            residual = None
        output = self._tail(body_out, temb)
        ctl.observe_output(branch, output, residual)
        return output

    def _residual(self, body_out: mx.array, embedded: mx.array) -> mx.array:
        return body_out - embedded

    def _from_cache(self, embedded: mx.array, residual: mx.array) -> mx.array:
        return embedded + residual

    def _tail(self, hidden_states: mx.array, temb: mx.array) -> mx.array:
        tr = self.transformer
        return tr.proj_out(tr.norm_out(hidden_states, temb))


def install_proxy(model, controller: StepController, proxy_class: type, predict_factory=None):
    """Swap in the proxy (and an uncompiled predict, when the pipeline compiles one); return the exact undo.

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
