"""Qwen-Image (and Qwen-Image-2512) on mflux's ``QwenImage``: a proxy transformer that pairs the CFG calls.

mflux 0.24.0, ``qwen/model/qwen_transformer/qwen_transformer.py``: ``img_in`` (l.51), timestep (l.53-54),
``txt_norm``/``txt_in`` (l.55-56), ``time_text_embed`` (l.57), rotary embeddings (l.63), the dual-stream
blocks (l.69), ``norm_out``/``proj_out`` (l.81-82). ``QwenImage.generate_image``
(``qwen/variants/txt2img/qwen_image.py:104-133``) calls the transformer twice per step, positive then
negative prompt (true CFG, combined outside the transformer), and is never compiled, so the proxy reads
the signal back on the host. The two calls of a step share one decision (taken on the first call) and
each keeps its own cached residual; which call is which is counted per generation and step, because
the transformer is not told its branch.
"""

from __future__ import annotations

import mlx.core as mx
from mflux.models.qwen.model.qwen_transformer.qwen_transformer import QwenTransformer
from mflux.models.qwen.model.qwen_transformer.qwen_transformer_block import QwenTransformerBlock
from mflux.models.qwen.variants.txt2img.qwen_image import QwenImage

from teacache.adapters._proxy import CachingProxy, original_transformer, protocol, proxy_installed
from teacache.core import StepController

FAMILY = "qwen"  # its variants, thresholds and names: teacache/variants/qwen.py


def time_embedding(transformer: QwenTransformer, t, config, embedded: mx.array) -> mx.array:
    """QwenTransformer.__call__ l.53-57: the (timestep-only) text/time embedding."""
    timestep = QwenTransformer._compute_timestep(t, config)
    timestep = mx.broadcast_to(timestep, (embedded.shape[0],)).astype(embedded.dtype)
    return transformer.time_text_embed(timestep, embedded)


def qwen_signal(transformer: QwenTransformer, t, config, hidden_states: mx.array):
    """Block 0's modulated image input: ``_modulate(img_norm1(img_in(h)), img_mod1)``.

    Caption-independent (it depends on the latents and the timestep only), so the positive and the
    negative call of a step see the same value. Returns (modulated, embedded image tokens, temb).
    The gate and ``teacache-calib record`` both call this function.
    """
    embedded = transformer.img_in(hidden_states)
    temb = time_embedding(transformer, t, config, embedded)
    block = transformer.transformer_blocks[0]
    img_mod1, _ = mx.split(block.img_mod_linear(block.img_mod_silu(temb)), 2, axis=-1)
    modulated, _gate = QwenTransformerBlock._modulate(block.img_norm1(embedded), img_mod1)
    return modulated, embedded, temb


class TeaCacheQwenTransformer(CachingProxy):
    """Stands in for ``QwenImage.transformer`` while TeaCache is applied; holds the original unchanged."""

    METHOD = "TeaCache"  # named in the refusals

    def __init__(self, transformer: QwenTransformer, controller: StepController) -> None:
        super().__init__(transformer, controller)
        self._call_generation = -1  # plain ints: kept out of the module's parameter tree
        self._call_step = -1
        self._calls_in_step = 0

    def _branch(self) -> int:
        """0 for the first call of a step, 1 for the second (CFG negative), ...

        The controller's step advances in its in-loop callback after both calls of a step, and every
        generation appends to its history, so (generation, step) changes exactly when a new step begins,
        also after a generation that failed between the two calls.
        """
        ctl = self._controller
        generation, step = len(ctl.history), ctl.step
        if (generation, step) != (self._call_generation, self._call_step):
            self._call_generation, self._call_step = generation, step
            self._calls_in_step = 0
        branch = self._calls_in_step
        self._calls_in_step += 1
        return branch

    def __call__(
        self,
        t: int,
        config,
        hidden_states: mx.array,
        encoder_hidden_states: mx.array,
        encoder_hidden_states_mask: mx.array,
        qwen_image_ids: mx.array | None = None,
        cond_image_grid=None,
    ) -> mx.array:
        if qwen_image_ids is not None or cond_image_grid is not None:
            raise NotImplementedError(f"{self.METHOD} on Qwen-Image supports text-to-image only (no edit conditioning)")
        self._controller._require_generation()
        return self._step(t, config, hidden_states, encoder_hidden_states, encoder_hidden_states_mask, self._branch())

    def _step(self, t, config, hidden_states, encoder_hidden_states, encoder_hidden_states_mask, branch) -> mx.array:
        """TeaCache's step: the modulated input is the signal, every block is the body."""
        modulated, embedded, temb = qwen_signal(self.transformer, t, config, hidden_states)

        def body() -> mx.array:
            return self._body(embedded, encoder_hidden_states, encoder_hidden_states_mask, temb, config)

        return self.cached_step(modulated, embedded, temb, branch=branch, body=body)

    def _body(self, hidden_states, encoder_hidden_states, encoder_hidden_states_mask, temb, config) -> mx.array:
        """QwenTransformer.__call__ from the text embedder through the last block (image stream)."""
        encoder_hidden_states, rotary = self._text_and_rotary(encoder_hidden_states, encoder_hidden_states_mask, config)
        return self._blocks(hidden_states, encoder_hidden_states, encoder_hidden_states_mask, temb, rotary)

    def _text_and_rotary(self, encoder_hidden_states, encoder_hidden_states_mask, config):
        """The embedded text and the rotary embedding of text and image: (encoder_hidden_states, rotary)."""
        tr = self.transformer
        encoder_hidden_states = tr.txt_in(tr.txt_norm(encoder_hidden_states))
        rotary = QwenTransformer._compute_rotary_embeddings(
            encoder_hidden_states_mask=encoder_hidden_states_mask,
            pos_embed=tr.pos_embed,
            config=config,
            cond_image_grid=None,
        )
        return encoder_hidden_states, rotary

    def _blocks(
        self, hidden_states, encoder_hidden_states, encoder_hidden_states_mask, temb, rotary, first: int = 0
    ) -> mx.array:
        """The blocks from ``first`` on; the image stream after the last."""
        for idx, block in enumerate(self.transformer.transformer_blocks[first:], start=first):
            encoder_hidden_states, hidden_states = QwenTransformer._apply_transformer_block(
                idx=idx,
                block=block,
                hidden_states=hidden_states,
                encoder_hidden_states=encoder_hidden_states,
                encoder_hidden_states_mask=encoder_hidden_states_mask,
                text_embeddings=temb,
                image_rotary_embeddings=rotary,
            )
        return hidden_states


class FBCacheQwenTransformer(TeaCacheQwenTransformer):
    """First-Block Cache on Qwen-Image: block 0 runs every call, its image-stream residual is the signal (one
    decision per step, on the first call), and the body a skipped step replaces is the remaining blocks."""

    METHOD = "First-Block Cache"

    @staticmethod
    def count_blocks(transformer: QwenTransformer) -> int:
        if not transformer.transformer_blocks:
            raise NotImplementedError("First-Block Cache on Qwen-Image needs a block; this model has none")
        return len(transformer.transformer_blocks)

    def _step(self, t, config, hidden_states, encoder_hidden_states, encoder_hidden_states_mask, branch) -> mx.array:
        tr = self.transformer
        embedded = tr.img_in(hidden_states)
        temb = time_embedding(tr, t, config, embedded)
        encoder_hidden_states, rotary = self._text_and_rotary(encoder_hidden_states, encoder_hidden_states_mask, config)
        encoder_hidden_states, first = QwenTransformer._apply_transformer_block(
            idx=0,
            block=tr.transformer_blocks[0],
            hidden_states=embedded,
            encoder_hidden_states=encoder_hidden_states,
            encoder_hidden_states_mask=encoder_hidden_states_mask,
            text_embeddings=temb,
            image_rotary_embeddings=rotary,
        )

        def rest() -> mx.array:  # the blocks after block 0
            return self._blocks(first, encoder_hidden_states, encoder_hidden_states_mask, temb, rotary, first=1)

        return self.cached_step(first - embedded, first, temb, branch=branch, body=rest)


FBCACHE_PROXY = FBCacheQwenTransformer  # teacache.fbcache installs it
is_applied = proxy_installed  # the adapter protocol's name for it


def matches(model) -> bool:
    return isinstance(model, QwenImage) and isinstance(original_transformer(model), QwenTransformer)


# the protocol's variant() and install() (the proxy swapped in; nothing on the fast path, threshold 0)
variant, install = protocol(FAMILY, TeaCacheQwenTransformer)
