"""FLUX.1 (dev, schnell, krea-dev) on mflux's ``Flux1``: a proxy that re-walks ``Transformer.__call__``.

mflux 0.24.0, ``flux/model/flux_transformer/transformer.py``: embeddings (l.44-47), joint blocks (l.50),
concat (l.62), single blocks (l.65), slice + norm_out + proj_out (l.77-79). The body between the
embeddings and the tail is what a skipped step replaces by ``x_embedder(latents) + cached residual``.
``Flux1.generate_image`` is never compiled, so the proxy can read the signal back on the host.
"""

from __future__ import annotations

import mlx.core as mx
from mflux.models.flux.model.flux_transformer.transformer import Transformer
from mflux.models.flux.variants.txt2img.flux import Flux1

from teacache.adapters._proxy import CachingProxy, original_transformer, protocol, proxy_installed

FAMILY = "flux1"  # its variants, thresholds and names: teacache/variants/flux1.py


def flux1_signal(transformer: Transformer, t: int, config, hidden_states: mx.array, pooled_prompt_embeds: mx.array):
    """Block 0's modulated image input: ``transformer_blocks[0].norm1(x_embedder(h), temb)[0]``.

    Returns (modulated, embedded hidden states, text/time embedding) so the body reuses them.
    The gate and ``teacache-calib record`` both call this function.
    """
    embedded = transformer.x_embedder(hidden_states)
    temb = Transformer.compute_text_embeddings(t, pooled_prompt_embeds, transformer.time_text_embed, config)
    modulated = transformer.transformer_blocks[0].norm1(hidden_states=embedded, text_embeddings=temb)[0]
    return modulated, embedded, temb


class TeaCacheFlux1Transformer(CachingProxy):
    """Stands in for ``Flux1.transformer`` while TeaCache is applied; holds the original unchanged."""

    def __call__(
        self,
        t: int,
        config,
        hidden_states: mx.array,
        prompt_embeds: mx.array,
        pooled_prompt_embeds: mx.array,
        controlnet_block_samples: list[mx.array] | None = None,
        controlnet_single_block_samples: list[mx.array] | None = None,
        kontext_image_ids: mx.array | None = None,
    ) -> mx.array:
        tr = self.transformer
        modulated, embedded, temb = flux1_signal(tr, t, config, hidden_states, pooled_prompt_embeds)

        def text_and_rotary():
            """Transformer.__call__'s embedded prompt and rotary embedding: (encoder_hidden_states, rotary)."""
            encoder_hidden_states = tr.context_embedder(prompt_embeds)
            rotary = Transformer.compute_rotary_embeddings(prompt_embeds, tr.pos_embed, config, kontext_image_ids)
            return encoder_hidden_states, rotary

        controlnet = (controlnet_block_samples, controlnet_single_block_samples)
        return self._step(modulated, embedded, temb, text_and_rotary, controlnet)

    def _step(self, modulated, embedded, temb, text_and_rotary, controlnet) -> mx.array:
        """TeaCache's step: the modulated input is the signal, every block is the body."""

        def body() -> mx.array:  # Transformer.__call__ steps 1-5 (before norm_out), on the embedded image tokens
            encoder_hidden_states, rotary = text_and_rotary()
            return self._blocks(embedded, encoder_hidden_states, temb, rotary, *controlnet)

        return self.cached_step(modulated, embedded, temb, branch=0, body=body)

    def _blocks(
        self, hidden_states, encoder_hidden_states, temb, rotary, controlnet_block_samples,
        controlnet_single_block_samples, first_joint: int = 0,
    ) -> mx.array:  # fmt: skip
        """The joint blocks from ``first_joint`` on, then every single block; the image tokens before norm_out."""
        tr = self.transformer
        for idx in range(first_joint, len(tr.transformer_blocks)):
            encoder_hidden_states, hidden_states = self._joint(
                idx, hidden_states, encoder_hidden_states, temb, rotary, controlnet_block_samples
            )
        hidden_states = mx.concatenate([encoder_hidden_states, hidden_states], axis=1)
        for idx, block in enumerate(tr.single_transformer_blocks):
            hidden_states = tr._apply_single_transformer_block(
                idx=idx,
                block=block,
                hidden_states=hidden_states,
                encoder_hidden_states=encoder_hidden_states,
                text_embeddings=temb,
                image_rotary_embeddings=rotary,
                controlnet_single_block_samples=controlnet_single_block_samples,
            )
        return hidden_states[:, encoder_hidden_states.shape[1] :, ...]

    def _joint(self, idx, hidden_states, encoder_hidden_states, temb, rotary, controlnet_block_samples):
        """Joint block ``idx``: (encoder_hidden_states, hidden_states) after it."""
        tr = self.transformer
        return tr._apply_joint_transformer_block(
            idx=idx,
            block=tr.transformer_blocks[idx],
            hidden_states=hidden_states,
            encoder_hidden_states=encoder_hidden_states,
            text_embeddings=temb,
            image_rotary_embeddings=rotary,
            controlnet_block_samples=controlnet_block_samples,
        )


class FBCacheFlux1Transformer(TeaCacheFlux1Transformer):
    """First-Block Cache on FLUX.1: the first joint block runs every step, its image-stream residual is the signal,
    and the body a skipped step replaces is the remaining joint and single blocks (``teacache.fbcache``)."""

    @staticmethod
    def count_blocks(transformer: Transformer) -> int:
        if not transformer.transformer_blocks:
            raise NotImplementedError("First-Block Cache on FLUX.1 needs a joint block first; this model has none")
        return len(transformer.transformer_blocks) + len(transformer.single_transformer_blocks)

    def _step(self, _modulated, embedded, temb, text_and_rotary, controlnet) -> mx.array:
        encoder_hidden_states, rotary = text_and_rotary()
        encoder_hidden_states, first = self._joint(0, embedded, encoder_hidden_states, temb, rotary, controlnet[0])

        def rest() -> mx.array:  # the joint blocks after the first, then every single block
            return self._blocks(first, encoder_hidden_states, temb, rotary, *controlnet, first_joint=1)

        return self.cached_step(first - embedded, first, temb, branch=0, body=rest)


FBCACHE_PROXY = FBCacheFlux1Transformer  # teacache.fbcache installs it
is_applied = proxy_installed  # the adapter protocol's name for it


def matches(model) -> bool:
    return isinstance(model, Flux1) and isinstance(original_transformer(model), Transformer)


# the protocol's variant() and install() (the proxy swapped in; nothing on the fast path, threshold 0)
variant, install = protocol(FAMILY, TeaCacheFlux1Transformer)
