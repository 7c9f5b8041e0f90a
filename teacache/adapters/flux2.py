"""FLUX.2 (Klein 4B/9B and base) on mflux's ``Flux2Klein``, and the embedded ``tiny-shapes`` model.

mflux 0.24.0, ``flux2/model/flux2_transformer/transformer.py``: time embedding (l.82-88), embedders
(l.104-105), double-stream modulation computed once for all blocks (l.118-119), double blocks (l.136),
single-stream modulation (l.150), single blocks (l.159), slice + norm_out/proj_out (l.170-173).
The pipeline's ``_predict`` closure runs CFG inside and is ``mx.compile``d as one function; a skip decision
reads a value back on the host, impossible inside a compiled function, so while TeaCache is applied the
pipeline gets a predict with the same semantics whose transformer calls run in compiled segments (head up
to the signal, body, tail; compiled afresh each generation, as mflux compiles its predict) with the
decision in Python between them; the original predict is put back on restore.
Under CFG one decision is taken per step (on the conditional branch) and each branch keeps its residual.
"""

from __future__ import annotations

import mlx.core as mx
from mflux.models.common.config.model_config import ModelConfig
from mflux.models.flux2.model.flux2_transformer.transformer import Flux2Transformer

from teacache.adapters._proxy import CachingProxy, original_transformer, protocol, proxy_installed

FAMILY = "flux2"  # its variants, thresholds and names: teacache/variants/flux2.py


def time_embedding(transformer: Flux2Transformer, timestep, like: mx.array) -> mx.array:
    """Flux2Transformer.__call__ l.82-88 without guidance (Klein passes guidance=None)."""
    if not isinstance(timestep, mx.array):
        timestep = mx.array(timestep, dtype=like.dtype)
    if timestep.ndim == 0:
        timestep = mx.full((like.shape[0],), timestep, dtype=like.dtype)
    timestep = timestep.astype(like.dtype)
    timestep = timestep * mx.where(mx.max(timestep) <= 1.0, 1000.0, 1.0).astype(like.dtype)
    return transformer.time_guidance_embed(timestep, None).astype(ModelConfig.precision)


def flux2_signal(transformer: Flux2Transformer, hidden_states: mx.array, timestep):
    """Block 0's modulated image input: ``(1 + scale_msa) * norm1(x_embedder(h)) + shift_msa``.

    Returns (modulated, embedded hidden states, temb, image modulation params). The gate and
    ``teacache-calib record`` both call this function.
    """
    temb = time_embedding(transformer, timestep, hidden_states)
    embedded = transformer.x_embedder(hidden_states)
    mod_img = transformer.double_stream_modulation_img(temb)
    (shift_msa, scale_msa, _gate), _ = mod_img
    modulated = (1 + scale_msa) * transformer.transformer_blocks[0].norm1(embedded) + shift_msa
    return modulated, embedded, temb, mod_img


class TeaCacheFlux2Transformer(CachingProxy):
    """Stands in for the pipeline's ``transformer`` while TeaCache is applied."""

    METHOD = "TeaCache"  # named in the refusals

    def __call__(
        self,
        hidden_states: mx.array,
        encoder_hidden_states: mx.array,
        timestep,
        img_ids: mx.array,
        txt_ids: mx.array,
        guidance=None,
        kv_cache=None,
        branch: int = 0,
    ) -> mx.array:
        if guidance is not None or kv_cache is not None:
            raise NotImplementedError(
                f"{self.METHOD} on FLUX.2 supports text-to-image without guidance embedding or KV cache"
            )
        return self._step(hidden_states, encoder_hidden_states, timestep, img_ids, txt_ids, branch)

    def _step(self, hidden_states, encoder_hidden_states, timestep, img_ids, txt_ids, branch: int) -> mx.array:
        """TeaCache's step: the modulated input is the signal, every block is the body."""
        modulated, embedded, temb, mod_img = self.segment("head", self._head)(hidden_states, timestep)

        def body() -> mx.array:
            return self.segment("body", self._body)(embedded, encoder_hidden_states, temb, mod_img, img_ids, txt_ids)

        return self.cached_step(modulated, embedded, temb, branch=branch, body=body)

    def segment_functions(self) -> dict:
        return {"head": self._head, "body": self._body, "tail": self._norm_out_proj_out}

    def _head(self, hidden_states: mx.array, timestep):
        return flux2_signal(self.transformer, hidden_states, timestep)

    def _body(self, hidden_states, encoder_hidden_states, temb, mod_img, img_ids, txt_ids) -> mx.array:
        """Flux2Transformer.__call__ from the context embedder to the slice before norm_out."""
        encoder_hidden_states, mod_txt, rotary = self._text_and_rotary(encoder_hidden_states, temb, img_ids, txt_ids)
        return self._blocks(hidden_states, encoder_hidden_states, temb, mod_img, mod_txt, rotary)

    def _text_and_rotary(self, encoder_hidden_states, temb, img_ids, txt_ids):
        """The embedded text, its modulation and the joint rotary embedding: (encoder, mod_txt, rotary)."""
        tr = self.transformer
        encoder_hidden_states = tr.context_embedder(encoder_hidden_states)
        if img_ids.ndim == 3:
            img_ids = img_ids[0]
        if txt_ids.ndim == 3:
            txt_ids = txt_ids[0]
        image_rotary_emb = tr.pos_embed(img_ids)
        text_rotary_emb = tr.pos_embed(txt_ids)
        rotary = (
            mx.concatenate([text_rotary_emb[0], image_rotary_emb[0]], axis=0),
            mx.concatenate([text_rotary_emb[1], image_rotary_emb[1]], axis=0),
        )
        return encoder_hidden_states, tr.double_stream_modulation_txt(temb), rotary

    def _blocks(self, hidden_states, encoder_hidden_states, temb, mod_img, mod_txt, rotary, first_double: int = 0):
        """The double blocks from ``first_double`` on, then every single block; the image tokens before norm_out."""
        tr = self.transformer
        for idx in range(first_double, len(tr.transformer_blocks)):
            encoder_hidden_states, hidden_states = self._double(
                idx, hidden_states, encoder_hidden_states, mod_img, mod_txt, rotary
            )
        hidden_states = mx.concatenate([encoder_hidden_states, hidden_states], axis=1)
        mod_single = tr.single_stream_modulation(temb)[0]
        for idx, block in enumerate(tr.single_transformer_blocks):
            hidden_states = block(
                hidden_states=hidden_states, temb_mod_params=mod_single, image_rotary_emb=rotary, kv_cache=None,
                kv_cache_layer_idx=idx,
            )  # fmt: skip
        return hidden_states[:, encoder_hidden_states.shape[1] :, ...]

    def _double(self, idx, hidden_states, encoder_hidden_states, mod_img, mod_txt, rotary):
        """Double block ``idx``: (encoder_hidden_states, hidden_states) after it."""
        return self.transformer.transformer_blocks[idx](
            hidden_states=hidden_states,
            encoder_hidden_states=encoder_hidden_states,
            temb_mod_params_img=mod_img,
            temb_mod_params_txt=mod_txt,
            image_rotary_emb=rotary,
            kv_cache=None,
            kv_cache_layer_idx=idx,
        )


class FBCacheFlux2Transformer(TeaCacheFlux2Transformer):
    """First-Block Cache on FLUX.2: the first double block runs every step, its image-stream residual is the
    signal, and the body a skipped step replaces is the remaining double and single blocks (``teacache.fbcache``).
    Compiled segments: head (embeddings), first (block 0 and the residual), rest, tail."""

    METHOD = "First-Block Cache"

    @staticmethod
    def count_blocks(transformer: Flux2Transformer) -> int:
        if not transformer.transformer_blocks:
            raise NotImplementedError("First-Block Cache on FLUX.2 needs a double block first; this model has none")
        return len(transformer.transformer_blocks) + len(transformer.single_transformer_blocks)

    def _step(self, hidden_states, encoder_hidden_states, timestep, img_ids, txt_ids, branch: int) -> mx.array:
        embedded, temb, mod_img = self.segment("head", self._fb_head)(hidden_states, timestep)
        signal, first, encoder, mod_txt, rotary = self.segment("first", self._first)(
            embedded, encoder_hidden_states, temb, mod_img, img_ids, txt_ids
        )

        def rest() -> mx.array:
            return self.segment("rest", self._rest)(first, encoder, temb, mod_img, mod_txt, rotary)

        return self.cached_step(signal, first, temb, branch=branch, body=rest)

    def segment_functions(self) -> dict:
        return {"head": self._fb_head, "first": self._first, "rest": self._rest, "tail": self._norm_out_proj_out}

    def _fb_head(self, hidden_states: mx.array, timestep):
        """The embeddings of ``flux2_signal`` without TeaCache's modulated input: (embedded, temb, mod_img)."""
        tr = self.transformer
        temb = time_embedding(tr, timestep, hidden_states)
        return tr.x_embedder(hidden_states), temb, tr.double_stream_modulation_img(temb)

    def _first(self, embedded, encoder_hidden_states, temb, mod_img, img_ids, txt_ids):
        """TeaCacheFlux2Transformer._body up to and through block 0: (block 0's image residual, its image output,
        its text output, the text modulation, the rotary embedding)."""
        encoder_hidden_states, mod_txt, rotary = self._text_and_rotary(encoder_hidden_states, temb, img_ids, txt_ids)
        encoder_hidden_states, first = self._double(0, embedded, encoder_hidden_states, mod_img, mod_txt, rotary)
        return first - embedded, first, encoder_hidden_states, mod_txt, rotary

    def _rest(self, hidden_states, encoder_hidden_states, temb, mod_img, mod_txt, rotary) -> mx.array:
        """TeaCacheFlux2Transformer._body after block 0."""
        return self._blocks(hidden_states, encoder_hidden_states, temb, mod_img, mod_txt, rotary, first_double=1)


FBCACHE_PROXY = FBCacheFlux2Transformer  # teacache.fbcache installs it
is_applied = proxy_installed  # the adapter protocol's name for it


def segmented_predict(transformer):
    """Flux2Klein._predict's closure, telling the proxy which CFG branch each call is; the proxy's segments
    are compiled for this generation and the rest (decision, CFG combination) runs eagerly."""
    transformer.compile_segments()

    def predict(
        latents, latent_ids, prompt_embeds, text_ids, negative_prompt_embeds, negative_text_ids, guidance, timestep
    ):
        def branch_noise(embeds, ids, branch: int):
            return transformer(
                hidden_states=latents,
                encoder_hidden_states=embeds,
                timestep=timestep,
                img_ids=latent_ids,
                txt_ids=ids,
                guidance=None,
                branch=branch,
            )

        noise = branch_noise(prompt_embeds, text_ids, 0)
        if negative_prompt_embeds is not None and negative_text_ids is not None:
            negative_noise = branch_noise(negative_prompt_embeds, negative_text_ids, 1)
            noise = negative_noise + guidance * (noise - negative_noise)
        return noise

    return predict


def matches(model) -> bool:
    return isinstance(original_transformer(model), Flux2Transformer) and callable(getattr(model, "_predict", None))


# the protocol's variant() and install() (the proxy swapped in; nothing on the fast path, threshold 0)
variant, install = protocol(FAMILY, TeaCacheFlux2Transformer, predict_factory=segmented_predict)
