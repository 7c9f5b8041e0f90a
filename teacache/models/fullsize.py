"""Full-size random-weight models: mflux's own transformer classes at their real configs, weights from a seed.

``random-<variant>`` (``random-flux1-dev``, ``random-flux2-klein-base-4b``, ``random-qwen-image``,
``random-z-image``, ...) is the variant's real transformer, built by the mflux class with the config
mflux loads it with (no shrunken widths, no patched blocks), every Linear drawn uniform in
+-1/sqrt(fan_in) from ``seed``; nothing is downloaded. The pipeline around it is mflux's own
(``generate_image``, scheduler, callbacks, CFG), with stand-ins that cost milliseconds: text encoders
that give embeddings of the real shapes (FLUX.1: 512 T5 tokens x 4096 + CLIP 768; FLUX.2 Klein: 512
Qwen3 tokens x 7680 or 12288; Qwen-Image: prompt-length tokens x 3584; Z-Image: prompt-length tokens
x 2560) and a 1x1-projection VAE. ``quantize=4/8`` quantizes the transformer with mflux's own
per-family rule (``WeightApplier._quantize`` with the family's weight definition); ``keep_bfloat16`` puts
named linears of a quantized transformer back in bfloat16 (the quantized no-op measured on CUDA).

Random weights make meaningless images: these models are for time, memory and the no-op oracles at
real size, on whatever hardware is at hand. ``blocks`` (a smoke-test option) keeps every width but
builds only that many blocks of each kind: such a model is NOT full size, and says so in its name.
"""

from __future__ import annotations

import contextlib
import hashlib
import math
import os
from collections.abc import Iterator, Sequence

import mlx.core as mx
from mflux.models.common.config.model_config import ModelConfig
from mflux.models.common.tokenizer.tokenizer_output import TokenizerOutput
from mlx import nn
from mlx.utils import tree_flatten, tree_unflatten

from teacache import variants
from teacache.errors import InputError, TeaCacheError
from teacache.loading import quantize_like_mflux
from teacache.models._init import redraw_linears
from teacache.variants import RANDOM_PREFIX, parse_random_name

NOT_FULL_SIZE = "NOT full size"
MEANINGLESS = "random weights: the images mean nothing; use these models for time, memory and no-op oracles"
# Drawn weights are evaluated in pieces of about this many bytes, so the float temporaries of a 20 B model
# never exist all at once.
_EVAL_CHUNK_BYTES = 1 << 31


def family_of(variant: str) -> str:
    return variants.get(variant).family


def mflux_config(variant: str) -> ModelConfig:
    """The ModelConfig mflux builds the variant's transformer with (the registry names its factory)."""
    return getattr(ModelConfig, variants.get(variant).mflux_config)()


def model_label(variant: str, blocks: int | None = None) -> str:
    """The name outputs show: ``random-flux1-dev``, or ``random-flux1-dev[blocks=1, NOT full size]``."""
    label = RANDOM_PREFIX + variant
    return label if blocks is None else f"{label}[blocks={blocks}, {NOT_FULL_SIZE}]"


# --- the transformers ---------------------------------------------------------------------------


@contextlib.contextmanager
def _global_random_state_kept() -> Iterator[None]:
    """mflux's constructors draw their initial weights from MLX's global key: put that key back after."""
    hi, lo = (int(v) for v in mx.random.state[0].tolist())
    try:
        yield
    finally:
        mx.random.seed((hi << 32) | lo)


def full_transformer(variant: str, blocks: int | None = None) -> nn.Module:
    """mflux's transformer of ``variant`` at its real config, with mflux's (lazy, unevaluated) initial weights.

    ``blocks`` builds that many blocks of each kind instead of the real count (widths unchanged). The
    global MLX random state is left as it was.
    """
    with _global_random_state_kept():
        return _construct(parse_random_name(variant), blocks)


def _construct(variant: str, blocks: int | None) -> nn.Module:
    """The family's transformer class (the registry's ``Family.transformer``), given the config its way."""
    fam, config = variants.family(family_of(variant)), mflux_config(variant)
    kwargs = {
        "model_config": {"model_config": config},
        "overrides": dict(config.transformer_overrides),
        "": {},  # the constructor's defaults are the released config
    }[fam.transformer_config]
    if blocks is not None:
        kwargs.update(dict.fromkeys(fam.block_keywords, blocks))
    return variants.attribute(fam.transformer)(**kwargs)  # heavy (mflux): imported only when this runs


def parameter_count(module: nn.Module) -> int:
    """Number of parameters, read from shapes: nothing is evaluated."""
    return sum(int(math.prod(p.shape)) for _, p in tree_flatten(module.parameters()))


def draw_weights(module: nn.Module, seed: int, dtype: mx.Dtype, evaluate: bool = True) -> None:
    """Draw every Linear (in name order) uniform in +-1/sqrt(fan_in), in ``dtype``, from keys derived from ``seed``.

    The other parameters keep mflux's constructor values (norm scales 1, pad tokens 0) cast to ``dtype``.
    With ``evaluate`` the weights are materialised piece by piece. The global MLX random state is neither
    read nor changed.
    """
    redraw_linears(module, seed, dtype=dtype, evaluate_every_bytes=_EVAL_CHUNK_BYTES if evaluate else None)
    module.set_dtype(dtype)
    if evaluate:
        mx.eval(module.parameters())


class NotEnoughMemoryError(TeaCacheError, RuntimeError):
    """A full-size model needs more memory than this machine has available: refused before any weight is drawn
    (drawing them would end with the process killed for memory, with no word first)."""


def available_memory() -> int | None:
    """Bytes of memory available to this process now (psutil where installed, else ``os.sysconf``); None when
    neither can tell. On Apple silicon this memory is the GPU's too."""
    try:
        import psutil
    except ImportError:
        psutil = None
    if psutil is not None:
        return int(psutil.virtual_memory().available)
    try:
        return int(os.sysconf("SC_AVPHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
    except (AttributeError, ValueError, OSError):
        return None


def memory_needed(parameters: int, dtype: mx.Dtype) -> int:
    """Peak bytes of drawing a transformer of ``parameters`` in ``dtype``: every weight at that precision (a
    quantized model is drawn there first) plus one piece of float temporaries."""
    return parameters * dtype.size + _EVAL_CHUNK_BYTES


def check_memory(variant: str, parameters: int, dtype: mx.Dtype, available: int | None) -> None:
    """NotEnoughMemoryError when drawing the transformer cannot fit in ``available`` bytes (None: not known)."""
    needed = memory_needed(parameters, dtype)
    if available is None or needed <= available:
        return
    gib, precision = 1 << 30, str(dtype).removeprefix("mlx.core.")
    raise NotEnoughMemoryError(
        f"model: {RANDOM_PREFIX}{variant} ({parameters / 1e9:.1f} B parameters in {precision}) "
        f"needs about {needed / gib:.1f} GiB of memory to build and this machine has {available / gib:.1f} GiB "
        "available; use a machine with more memory, or blocks= for a smoke test that is not full size"
    )


def random_transformer(
    variant: str, seed: int = 0, quantize: int | None = None, blocks: int | None = None, available: int | None = None
):
    """The full-size transformer with drawn weights in mflux's precision, quantized on request.

    Refused (NotEnoughMemoryError) before any weight is drawn when it cannot fit in ``available`` bytes, by
    default :func:`available_memory`.
    """
    variant = parse_random_name(variant)
    if quantize not in (None, 4, 8):
        raise InputError(f"quantize: expected 4, 8 or None, got {quantize!r}")
    transformer = full_transformer(variant, blocks)
    check_memory(
        model_label(variant, blocks).removeprefix(RANDOM_PREFIX),
        parameter_count(transformer),
        ModelConfig.precision,
        available_memory() if available is None else available,
    )
    draw_weights(transformer, seed, ModelConfig.precision)
    if family_of(variant) == "zimage":
        from teacache.models._releases import stream_in_model_precision

        stream_in_model_precision(transformer)
    if quantize is not None:
        quantize_like_mflux(transformer, quantize, variants.attribute(variants.family(family_of(variant)).weights))
    return transformer


def keep_bfloat16(transformer: nn.Module, names: Sequence[str]) -> None:
    """Replace each named QuantizedLinear by a bfloat16 Linear with its dequantized weight (and its bias).

    The same values, through the bfloat16 matmul instead of the quantized kernel. MLX's CUDA quantized matmul with
    K equal to the group size (FLUX.1's ``x_embedder``, 64 -> 3072) reads output memory it never wrote, so with it
    quantized vanilla differs from itself by whatever the allocator hands back; with it kept, what remains is
    rounding (results/cuda-nvidia-h200/quantized-noop/RUN.md). The code that measurement's ``measure.py`` ran.
    """
    layers = dict(transformer.named_modules())
    for name in names:
        if not isinstance(layers.get(name), nn.QuantizedLinear):
            found = "no such layer" if name not in layers else type(layers[name]).__name__
            raise InputError(f"keep_bfloat16: {name!r} is not a quantized linear of the transformer ({found})")
    for name in names:
        q = layers[name]
        weight = mx.dequantize(q.weight, q.scales, q.biases, q.group_size, q.bits).astype(mx.bfloat16)
        linear = nn.Linear(weight.shape[1], weight.shape[0], bias="bias" in q)
        linear.weight = weight
        if "bias" in q:
            linear.bias = q.bias
        transformer.update_modules(tree_unflatten([(name, linear)]))
    mx.eval(transformer.parameters())


# --- text stand-ins at the real shapes ----------------------------------------------------------


def _hashed_normal(text: str, shape: tuple[int, ...], salt: str = "") -> mx.array:
    digest = hashlib.sha256((salt + text).encode("utf-8")).digest()
    return mx.random.normal(shape, key=mx.random.key(int.from_bytes(digest[:4], "little"))).astype(
        ModelConfig.precision
    )


def prompt_tokens(text: str, template: int) -> int:
    """A tokenizer's length for ``text`` without its vocabulary: ``template`` chat-template tokens plus
    ~1.3 tokens per word (English text under a BPE vocabulary of ~150k)."""
    return template + math.ceil(1.3 * len(text.split()))


def flux2_prompt_pair(context_dim: int, tokens: int = 512):
    """Stands in for ``Flux2Klein._encode_prompt_pair``: (tokens, context_dim) embeddings per text, padded
    like the Qwen3 encoder's output (512 tokens, three hidden layers concatenated)."""
    # heavy (mflux): loaded only when this runs
    from mflux.models.flux2.model.flux2_text_encoder.prompt_encoder import Flux2PromptEncoder

    def encode(text: str):
        embeds = _hashed_normal(text, (1, tokens, context_dim))
        return embeds, Flux2PromptEncoder.prepare_text_ids(embeds)

    def encode_prompt_pair(*, prompt: str, negative_prompt: str | None, guidance: float):
        embeds, ids = encode(prompt)
        if guidance is not None and guidance > 1.0 and negative_prompt is not None:
            return (embeds, ids, *encode(negative_prompt))
        return embeds, ids, None, None

    return encode_prompt_pair


QWEN_CONTEXT_DIM = 3584  # Qwen2.5-VL-7B hidden size: QwenTransformer's joint_attention_dim
QWEN_TEMPLATE_TOKENS = 5  # the chat template's tail kept after mflux drops the first 34 tokens


class QwenPromptCacheRealShape(dict):
    """mflux's Qwen prompt cache, filled on demand with (1, tokens, 3584) embeddings and their masks.

    ``QwenPromptEncoder.encode_prompt`` returns ``prompt_cache["<prompt>|NEG|<negative>"]`` for a key it
    finds, so the tokenizer and the 7 B text encoder are never touched.
    """

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and "|NEG|" in key

    def __missing__(self, key: str):
        value = []
        for text in key.partition("|NEG|")[::2]:
            tokens = prompt_tokens(text, QWEN_TEMPLATE_TOKENS)
            value += [_hashed_normal(text, (1, tokens, QWEN_CONTEXT_DIM)), mx.ones((1, tokens), dtype=mx.int32)]
        value = tuple(value)
        mx.eval(value)
        self[key] = value
        return value


ZIMAGE_CAPTION_DIM = 2560  # Qwen3-4B hidden size: ZImageTransformer's cap_feat_dim
ZIMAGE_TEMPLATE_TOKENS = 10  # "<|im_start|>user\n ... <|im_end|>\n<|im_start|>assistant\n"
ZIMAGE_MAX_TOKENS = 512
_ZIMAGE_VOCAB = 4096


class ZImageTokenizerRealShape:
    """Stands in for Z-Image's Qwen3 tokenizer: hashed ids of the prompt's real length, padded to 512."""

    tokenizer = None
    max_length = ZIMAGE_MAX_TOKENS

    def tokenize(self, prompt: str, images=None, max_length: int | None = None, **_) -> TokenizerOutput:
        length = min(prompt_tokens(prompt, ZIMAGE_TEMPLATE_TOKENS), self.max_length)
        digest = hashlib.sha256(prompt.encode("utf-8")).digest()
        ids = mx.random.randint(1, _ZIMAGE_VOCAB, (length,), key=mx.random.key(int.from_bytes(digest[:4], "little")))
        padded = mx.concatenate([ids, mx.zeros((self.max_length - length,), dtype=ids.dtype)])
        mask = mx.concatenate([mx.ones((length,), mx.int32), mx.zeros((self.max_length - length,), mx.int32)])
        return TokenizerOutput(input_ids=padded[None].astype(mx.int32), attention_mask=mask[None])


class ZImageTextEncoderRealShape(nn.Module):
    """Stands in for the Qwen3-4B encoder: a fixed random 2560-wide embedding per token id, from ``seed``."""

    def __init__(self, seed: int = 0) -> None:
        super().__init__()
        self.table = mx.random.normal((_ZIMAGE_VOCAB, ZIMAGE_CAPTION_DIM), key=mx.random.key(seed + 2)).astype(
            ModelConfig.precision
        )

    def __call__(self, input_ids: mx.array, attention_mask: mx.array) -> mx.array:
        return self.table[input_ids]


# --- the pipelines --------------------------------------------------------------------------------


def _finish(model, variant: str, transformer, quantize: int | None, blocks: int | None):
    model.transformer = transformer
    model.bits = quantize
    model.teacache_variant = variant  # the gate's settings and packaged coefficients are the variant's
    model.random_model = model_label(variant, blocks)  # what outputs call it; the images mean nothing
    return model


def build_random_flux1(
    variant: str = "flux1-dev", *, seed: int = 0, quantize: int | None = None, blocks: int | None = None
):
    """mflux's ``Flux1`` with the full-size FLUX.1 transformer, 512 (dev, krea-dev) / 256 (schnell) T5 tokens."""
    from teacache.models.tiny_flux1 import (  # one family's mflux modules, not all four
        HashedPromptEmbeddings,
        build_tiny_flux1,
    )

    variant = parse_random_name(variant)
    model = build_tiny_flux1(seed=seed)  # the shell: callbacks, stand-in VAE
    model.model_config = mflux_config(variant)
    model.prompt_cache = HashedPromptEmbeddings(tokens=model.model_config.max_sequence_length)
    return _finish(model, variant, random_transformer(variant, seed, quantize, blocks), quantize, blocks)


def build_random_flux2(
    variant: str = "flux2-klein-base-4b", *, seed: int = 0, quantize: int | None = None, blocks: int | None = None
):
    """mflux's ``Flux2Klein`` with a full-size Klein transformer (4B: 5+20 blocks, 9B: 8+24) and its config."""
    from teacache.models.tiny_flux2 import build_tiny_flux2  # one family's mflux modules, not all four

    variant = parse_random_name(variant)
    config = mflux_config(variant)
    model = build_tiny_flux2(seed=seed)  # the shell: callbacks, compute precision, VAE
    model.model_config = config
    context_dim = config.transformer_overrides["joint_attention_dim"]
    object.__setattr__(model, "_encode_prompt_pair", flux2_prompt_pair(context_dim, config.max_sequence_length))
    return _finish(model, variant, random_transformer(variant, seed, quantize, blocks), quantize, blocks)


def build_random_qwen(
    variant: str = "qwen-image", *, seed: int = 0, quantize: int | None = None, blocks: int | None = None
):
    """mflux's ``QwenImage`` with the full-size 60-block transformer (20 B) and 3584-wide prompt embeddings."""
    from teacache.models.tiny_qwen import build_tiny_qwen_image  # one family's mflux modules, not all four

    variant = parse_random_name(variant)
    model = build_tiny_qwen_image(seed=seed)  # the shell: config, callbacks, VAE
    model.prompt_cache = QwenPromptCacheRealShape()
    return _finish(model, variant, random_transformer(variant, seed, quantize, blocks), quantize, blocks)


def build_random_zimage(
    variant: str = "z-image", *, seed: int = 0, quantize: int | None = None, blocks: int | None = None
):
    """mflux's ``ZImage`` (base) with the full-size transformer (6 B) and 2560-wide caption features."""
    from teacache.models.tiny_zimage import build_tiny_z_image  # one family's mflux modules, not all four

    variant = parse_random_name(variant)
    model = build_tiny_z_image(seed=seed)  # the shell: config, callbacks, compute precision, VAE
    model.tokenizers = {"z_image": ZImageTokenizerRealShape()}
    model.text_encoder = ZImageTextEncoderRealShape(seed)
    return _finish(model, variant, random_transformer(variant, seed, quantize, blocks), quantize, blocks)


def build_random(name: str, *, seed: int = 0, quantize: int | None = None, blocks: int | None = None):
    """Any ``random-<variant>`` pipeline by name (the family's ``random_builder``)."""
    variant = parse_random_name(name)
    builder = variants.random_builder(family_of(variant))
    return builder(variant, seed=seed, quantize=quantize, blocks=blocks)
