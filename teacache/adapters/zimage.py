"""Z-Image (base) on mflux's ``ZImage``: a proxy transformer and a segmented predict while applied.

mflux 0.24.0, ``z_image/model/z_image_transformer/transformer.py``: time embedding (l.85-94, t = 1 - sigma),
patchify (l.97), image embedding (l.105-109), noise refiner over the image tokens (l.112), caption
embedding + context refiner (l.121-133), the main layers over [image; caption] (l.136-159), the final
layer (l.162), unpatchify (l.163) and ``return -output``. The body a skipped step replaces runs from the
noise refiner through the last main layer; its residual is taken over the image tokens (padding
included), the only part of the stream the tail reads. The tail is the final layer on those tokens,
unpatchify and the sign flip.
``ZImage._predict`` (``z_image/variants/z_image.py:224-252``) runs CFG inside (a second call with the
negative caption when guidance > 1) and is ``mx.compile``d off M1/M2; a skip decision reads a value back
on the host, impossible inside a compiled function, so while TeaCache is applied the pipeline gets a
predict with the same maths whose transformer calls run in compiled segments (head up to the signal,
body, tail; compiled afresh each generation) with the decision in Python between them; the original is
put back on restore. One decision per step (on the conditional branch), one cached residual per branch.
"""

from __future__ import annotations

from typing import NamedTuple

import mlx.core as mx
from mflux.models.z_image.model.z_image_transformer.transformer import ZImageTransformer

from teacache.adapters._proxy import CachingProxy, original_transformer, protocol, proxy_installed

FAMILY = "zimage"  # its variants, thresholds and names: teacache/variants/zimage.py


def time_embedding(transformer: ZImageTransformer, timestep, sigmas: mx.array) -> mx.array:
    """ZImageTransformer.__call__ l.85-94 (``timestep`` is 1 - sigma, as the pipeline passes it)."""
    if not isinstance(timestep, mx.array):
        if isinstance(timestep, int):
            sigma_t = sigmas[timestep].reshape((1,))
            timestep = mx.ones_like(sigma_t) - sigma_t
        else:
            timestep = mx.array(timestep, dtype=mx.float32)
    if timestep.ndim == 0:
        timestep = timestep.reshape((1,))
    t_emb = transformer.t_embedder(timestep.astype(mx.float32) * transformer.t_scale)
    stream_t_emb = getattr(ZImageTransformer, "stream_t_emb", None)  # mflux 0.22+; before, t_emb stays float32
    return t_emb if stream_t_emb is None else stream_t_emb(t_emb, transformer.float32)


def embed_image(transformer: ZImageTransformer, x: mx.array, cap_feats: mx.array):
    """Patchify and embed the image tokens (l.97-109); returns (embedded (1, N, dim), image rope, patchify info)."""
    key = f"{transformer.patch_size}-{transformer.f_patch_size}"
    x_emb, cap_emb, x_size, x_pos_ids, cap_pos_ids, x_pad_mask, cap_pad_mask = ZImageTransformer._patchify(
        image=x,
        cap_feats=cap_feats,
        patch_size=transformer.patch_size,
        f_patch_size=transformer.f_patch_size,
    )
    x_emb = transformer.all_x_embedder[key](x_emb)
    x_emb = mx.where(x_pad_mask[:, None], transformer.x_pad_token, x_emb)
    x_freqs_cis = transformer.rope_embedder(x_pos_ids)
    patches = {"x_size": x_size, "cap_emb": cap_emb, "cap_pos_ids": cap_pos_ids, "cap_pad_mask": cap_pad_mask}
    return mx.expand_dims(x_emb, axis=0), x_freqs_cis, patches


def zimage_signal(transformer: ZImageTransformer, x: mx.array, timestep, sigmas: mx.array, cap_feats: mx.array):
    """The modulated input of the first block that sees the image: ``noise_refiner[0]``'s
    ``attention_norm1(x) * (1 + scale_msa)`` (Z-Image's adaLN has no shift; ``transformer_block.py:37-45``).

    Caption-independent: the noise refiner sees the image tokens and the timestep only. Returns
    (modulated, embedded image tokens, t_emb, image rope, patchify info). The gate and
    ``teacache-calib record`` both call this function.
    """
    t_emb = time_embedding(transformer, timestep, sigmas)
    embedded, x_freqs_cis, patches = embed_image(transformer, x, cap_feats)
    layer = transformer.noise_refiner[0]
    modulation = mx.expand_dims(layer.adaLN_modulation[0](t_emb), axis=1)
    scale_msa = 1.0 + mx.split(modulation, 4, axis=2)[0]
    modulated = layer.attention_norm1(embedded) * scale_msa
    return modulated, embedded, t_emb, x_freqs_cis, patches


class TailInputs(NamedTuple):
    """What the tail needs besides the hidden states: the time embedding and the latent size to unpatchify."""

    t_emb: mx.array
    x_size: tuple[int, int, int]


class TeaCacheZImageTransformer(CachingProxy):
    """Stands in for the pipeline's ``transformer`` while TeaCache is applied; holds the original unchanged."""

    METHOD = "TeaCache"  # named in the refusals

    def __call__(
        self,
        x: mx.array,
        timestep,
        sigmas: mx.array,
        cap_feats: mx.array,
        controlnet_block_samples=None,
        branch: int = 0,
    ) -> mx.array:
        if controlnet_block_samples is not None:
            raise NotImplementedError(f"{self.METHOD} on Z-Image supports text-to-image without ControlNet")
        return self._step(x, timestep, sigmas, cap_feats, branch)

    def _step(self, x: mx.array, timestep, sigmas: mx.array, cap_feats: mx.array, branch: int) -> mx.array:
        """TeaCache's step: the modulated input is the signal, every block is the body."""
        if not self.transformer.noise_refiner:
            raise NotImplementedError("TeaCache on Z-Image gates on the first noise-refiner block; this one has none")
        modulated, embedded, t_emb, x_freqs_cis, *caption = self.segment("head", self._head)(
            x, timestep, sigmas, cap_feats
        )

        def body() -> mx.array:
            return self.segment("body", self._body)(embedded, t_emb, x_freqs_cis, *caption)

        tail = TailInputs(t_emb=t_emb, x_size=tuple(x.shape[1:]))  # (F, H, W), as _patchify reads it
        return self.cached_step(modulated, embedded, tail, branch=branch, body=body)

    def segment_functions(self) -> dict:
        return {"head": self._head, "body": self._body, "tail": self._final_layer}

    def _head(self, x: mx.array, timestep, sigmas: mx.array, cap_feats: mx.array):
        """zimage_signal with array outputs only: (modulated, embedded, t_emb, image rope, caption patches)."""
        modulated, embedded, t_emb, x_freqs_cis, patches = zimage_signal(
            self.transformer, x, timestep, sigmas, cap_feats
        )
        caption = (patches["cap_emb"], patches["cap_pos_ids"], patches["cap_pad_mask"])
        return modulated, embedded, t_emb, x_freqs_cis, *caption

    def _body(
        self, x_emb, t_emb, x_freqs_cis, cap_patches, cap_pos_ids, cap_pad_mask, first_noise: int = 0
    ) -> mx.array:
        """ZImageTransformer.__call__ l.108-159: refiners (the noise refiner from ``first_noise`` on) and main
        layers; returns the image tokens."""
        tr = self.transformer
        x_attn_mask = mx.ones((1, x_emb.shape[1]), dtype=mx.bool_)
        for layer in tr.noise_refiner[first_noise:]:
            x_emb = layer(x=x_emb, attn_mask=x_attn_mask, freqs_cis=x_freqs_cis, t_emb=t_emb)
        cap_emb = tr.cap_embedder[1](tr.cap_embedder[0](cap_patches))
        cap_emb = mx.where(cap_pad_mask[:, None], tr.cap_pad_token, cap_emb)
        cap_freqs_cis = tr.rope_embedder(cap_pos_ids)
        cap_attn_mask = mx.ones((1, cap_emb.shape[0]), dtype=mx.bool_)
        cap_emb = mx.expand_dims(cap_emb, axis=0)
        for layer in tr.context_refiner:
            cap_emb = layer(x=cap_emb, attn_mask=cap_attn_mask, freqs_cis=cap_freqs_cis)
        x_len = x_emb.shape[1]
        unified = mx.concatenate([x_emb, cap_emb], axis=1)
        unified_freqs_cis = mx.concatenate([x_freqs_cis, cap_freqs_cis], axis=0)
        unified_attn_mask = mx.ones((1, unified.shape[1]), dtype=mx.bool_)
        for layer in tr.layers:
            unified = layer(x=unified, attn_mask=unified_attn_mask, freqs_cis=unified_freqs_cis, t_emb=t_emb)
        return unified[:, :x_len]

    def _tail(self, hidden_states: mx.array, temb: TailInputs) -> mx.array:
        return self.segment("tail", self._final_layer)(hidden_states, temb.t_emb, temb.x_size)

    def _final_layer(self, hidden_states: mx.array, t_emb: mx.array, x_size: tuple[int, int, int]) -> mx.array:
        """Final layer on the image tokens, unpatchify, and the transformer's ``-output``."""
        tr = self.transformer
        key = f"{tr.patch_size}-{tr.f_patch_size}"
        out = tr.all_final_layer[key](hidden_states, t_emb)
        output = ZImageTransformer._unpatchify(
            x=out[0],
            size=x_size,
            patch_size=tr.patch_size,
            f_patch_size=tr.f_patch_size,
            out_channels=tr.out_channels,
        )
        return -output


class FBCacheZImageTransformer(TeaCacheZImageTransformer):
    """First-Block Cache on Z-Image: the first noise-refiner block (the first that sees the image) runs every step,
    its residual over the image tokens is the signal, and the body a skipped step replaces is the rest of the noise
    refiner, the caption's refiner and the main layers. Compiled segments: head, first, rest, tail."""

    METHOD = "First-Block Cache"

    @staticmethod
    def count_blocks(transformer: ZImageTransformer) -> int:
        if not transformer.noise_refiner:
            raise NotImplementedError("First-Block Cache on Z-Image runs the first noise-refiner block; none here")
        return len(transformer.noise_refiner) + len(transformer.context_refiner) + len(transformer.layers)

    def _step(self, x: mx.array, timestep, sigmas: mx.array, cap_feats: mx.array, branch: int) -> mx.array:
        embedded, t_emb, x_freqs_cis, *caption = self.segment("head", self._fb_head)(x, timestep, sigmas, cap_feats)
        signal, first = self.segment("first", self._first)(embedded, t_emb, x_freqs_cis)

        def rest() -> mx.array:
            return self.segment("rest", self._rest)(first, t_emb, x_freqs_cis, *caption)

        tail = TailInputs(t_emb=t_emb, x_size=tuple(x.shape[1:]))
        return self.cached_step(signal, first, tail, branch=branch, body=rest)

    def segment_functions(self) -> dict:
        return {"head": self._fb_head, "first": self._first, "rest": self._rest, "tail": self._final_layer}

    def _fb_head(self, x: mx.array, timestep, sigmas: mx.array, cap_feats: mx.array):
        """The embeddings of ``zimage_signal`` without TeaCache's modulated input."""
        tr = self.transformer
        t_emb = time_embedding(tr, timestep, sigmas)
        embedded, x_freqs_cis, patches = embed_image(tr, x, cap_feats)
        return embedded, t_emb, x_freqs_cis, patches["cap_emb"], patches["cap_pos_ids"], patches["cap_pad_mask"]

    def _first(self, x_emb, t_emb, x_freqs_cis):
        """The first noise-refiner block: (its residual, its output)."""
        x_attn_mask = mx.ones((1, x_emb.shape[1]), dtype=mx.bool_)
        first = self.transformer.noise_refiner[0](x=x_emb, attn_mask=x_attn_mask, freqs_cis=x_freqs_cis, t_emb=t_emb)
        return first - x_emb, first

    def _rest(self, x_emb, t_emb, x_freqs_cis, cap_patches, cap_pos_ids, cap_pad_mask) -> mx.array:
        """TeaCacheZImageTransformer._body after the first noise-refiner block."""
        return self._body(x_emb, t_emb, x_freqs_cis, cap_patches, cap_pos_ids, cap_pad_mask, first_noise=1)


FBCACHE_PROXY = FBCacheZImageTransformer  # teacache.fbcache installs it
is_applied = proxy_installed  # the adapter protocol's name for it


def segmented_predict(transformer):
    """ZImage._predict's closure, telling the proxy which CFG branch each call is; the proxy's segments are
    compiled for this generation and the rest (decision, CFG combination) runs eagerly."""
    transformer.compile_segments()

    def predict(latents, timestep, sigmas, text_encodings, negative_encodings, guidance):
        noise = transformer(timestep=timestep, x=latents, cap_feats=text_encodings, sigmas=sigmas, branch=0)
        if negative_encodings is None:
            return noise
        negative_noise = transformer(
            timestep=timestep, x=latents, cap_feats=negative_encodings, sigmas=sigmas, branch=1
        )
        return noise + guidance * (noise - negative_noise)

    return predict


def matches(model) -> bool:
    return isinstance(original_transformer(model), ZImageTransformer) and callable(getattr(model, "_predict", None))


# the protocol's variant() and install() (the proxy swapped in; nothing on the fast path, threshold 0)
variant, install = protocol(FAMILY, TeaCacheZImageTransformer, predict_factory=segmented_predict)
