"""The open-scenes data: captions that name one object and leave the rest of the picture to chance.

A caption names an object's colour and shape, and sometimes its position ("a red circle at the left",
"a blue triangle"); under the ``ANY_SHAPE`` captions (``train_open --captions any-shape``) it names colour and
sometimes position and leaves the shape open too ("a red shape at the left"). Everything else is drawn at random
for each image: the background's tone and tint, a smooth multi-scale field over it, a lighting gradient,
up to two unnamed objects, the named object's size, the texture of every object and a fine grain.
Content at every scale is left open, so a model's estimate of the clean image commits during sampling,
coarse features first and fine ones last, as a real text-to-image model's does (DESIGN.md, "Test
subjects"); a caption that fixed the whole image would give a nearly straight flow whose output hardly
changes from step to step.

Pure numpy, at any image size (32 px for the FLUX.2 layout, 64 px for FLUX.1's), so drawing training
data or checking a prompt's adherence is cheap. The models that use it: ``teacache.models.open_models``.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
from collections.abc import Sequence

import numpy as np

from teacache.errors import InputError
from teacache.models.vocabulary import PAD, caption_words, tokenize_caption

# Bump RECIPE_VERSION whenever anything below changes what an image or a token id means: the manifest
# records it and the loader refuses weights trained on another recipe.
RECIPE_VERSION = 1
TEXT_LEN = 8
NAME = "open-scenes"

COLORS: dict[str, tuple[int, int, int]] = {
    "red": (225, 35, 35),
    "green": (35, 190, 60),
    "blue": (40, 70, 230),
    "yellow": (240, 215, 30),
    "purple": (150, 45, 195),
    "orange": (245, 135, 25),
}
SHAPES: tuple[str, ...] = ("circle", "square", "triangle")
# Anchors as fractions of the side, (x, y); a named position puts the object's centre within JITTER of it.
POSITIONS: dict[str, tuple[float, float]] = {
    "left": (0.27, 0.5),
    "right": (0.73, 0.5),
    "top": (0.5, 0.27),
    "bottom": (0.5, 0.73),
    "center": (0.5, 0.5),
}
NAMED_POSITION_SHARE = 0.6  # training captions that name the position; the others leave it open
JITTER = 0.05
FREE_RANGE = (0.22, 0.78)  # an unnamed position: the centre anywhere in this square
SIZE_RANGE = (0.13, 0.18)  # the named object's "radius", a fraction of the side
DISTRACTOR_SIZE_RANGE = (0.06, 0.11)
MAX_DISTRACTORS = 2
BACKGROUND_TONE = (-0.8, 0.8)  # grey level of the background, in [-1, 1] image units
BACKGROUND_TINT = 0.22  # each channel moves by up to this much: backgrounds stay unsaturated
FIELD_STD = 0.6  # the field over the background (amplitude ~ frequency**-FIELD_EXPONENT)
FIELD_EXPONENT = 0.3
LIGHT_RANGE = (0.0, 0.35)  # a linear lighting gradient across the image, random direction
TEXTURE_STD = 0.3  # objects' brightness varies by a fine random field of this spread (relative)
GRAIN_RANGE = (0.03, 0.45)  # per-pixel grain whose spread varies smoothly over the image within this range
LATENT_SCALE = 2.5  # latents = LATENT_SCALE x pixels, as a VAE's scaling factor: content spread ~ noise spread

FILLER_WORDS: tuple[str, ...] = ("a", "at", "the")
OPEN_SHAPE_WORD = "shape"  # what an ANY_SHAPE caption calls its object: the shape is left to chance
HELD_OUT_MODULUS = 9


@dataclasses.dataclass(frozen=True)
class Captions:
    """What a recipe's captions may name: the shape too (``NAMED_SHAPE``), or colour and position only
    (``ANY_SHAPE``: every object's shape is drawn at random). Each has its own vocabulary and recipe name,
    so weights trained on one are refused under the other."""

    name: str
    version: int
    names_shape: bool

    @property
    def nouns(self) -> tuple[str, ...]:
        return SHAPES if self.names_shape else (OPEN_SHAPE_WORD,)

    @functools.cached_property
    def vocab(self) -> tuple[str, ...]:
        return (PAD, *FILLER_WORDS, *COLORS, *self.nouns, *POSITIONS)

    @functools.cached_property
    def token_ids(self) -> dict[str, int]:  # read for every caption tokenized: built once
        return {word: i for i, word in enumerate(self.vocab)}


NAMED_SHAPE = Captions(NAME, RECIPE_VERSION, names_shape=True)
ANY_SHAPE = Captions("open-scenes-any-shape", 1, names_shape=False)


@dataclasses.dataclass(frozen=True)
class OpenSpec:
    """What a caption names: a colour, a shape or not (None: any shape), a position or not."""

    color: str
    shape: str | None
    position: str | None = None

    def __post_init__(self) -> None:
        if self.color not in COLORS:
            raise InputError(f"color: unknown {self.color!r}; expected one of {', '.join(COLORS)}")
        if self.shape is not None and self.shape not in SHAPES:
            raise InputError(f"shape: unknown {self.shape!r}; expected one of {', '.join(SHAPES)}")
        if self.position is not None and self.position not in POSITIONS:
            raise InputError(f"position: unknown {self.position!r}; expected one of {', '.join(POSITIONS)}")

    @property
    def prompt(self) -> str:
        where = f" at the {self.position}" if self.position else ""
        return f"a {self.color} {self.shape or OPEN_SHAPE_WORD}{where}"

    @property
    def held_out(self) -> bool:
        return is_held_out(self)


def tokenize(text: str, model: str = NAME, captions: Captions = NAMED_SHAPE) -> np.ndarray:
    """Prompt -> ``TEXT_LEN`` int32 ids, right-padded with 0 (``<pad>``); the empty prompt is all padding."""
    return tokenize_caption(text, captions.token_ids, TEXT_LEN, model)


def parse_prompt(text: str, model: str = NAME, captions: Captions = NAMED_SHAPE) -> OpenSpec:
    """Read a caption back into what it names: one colour, one shape (or the open shape), at most one position."""
    words = caption_words(text, captions.token_ids, model, TEXT_LEN)
    colors = [w for w in words if w in COLORS]
    nouns = [w for w in words if w in captions.nouns]
    positions = [w for w in words if w in POSITIONS]
    if len(colors) != 1 or len(nouns) != 1 or len(positions) > 1:
        example = OpenSpec("red", "circle" if captions.names_shape else None, "left").prompt
        raise InputError(
            f"prompt: needs one colour ({', '.join(COLORS)}), one of {', '.join(captions.nouns)} and at most one "
            f"position ({', '.join(POSITIONS)}): {text!r}; e.g. {example!r}"
        )
    shape = nouns[0] if captions.names_shape else None
    return OpenSpec(colors[0], shape, positions[0] if positions else None)


def parse_any_shape_prompt(text: str) -> OpenSpec:
    """``parse_prompt`` for a model trained on ``ANY_SHAPE`` captions: "a red shape at the left"."""
    return parse_prompt(text, ANY_SHAPE.name, ANY_SHAPE)


def captions_of(text: str) -> Captions:
    """The captions a prompt is written in: ``ANY_SHAPE`` when it calls its object "shape"."""
    return ANY_SHAPE if OPEN_SHAPE_WORD in text.lower().split() else NAMED_SHAPE


def is_held_out(spec: OpenSpec) -> bool:
    """A fixed ~1 in 9 of all combinations, by hash: never drawn for training, used for evaluation."""
    key = f"{spec.color}|{spec.shape or OPEN_SHAPE_WORD}|{spec.position or '-'}".encode()
    return int.from_bytes(hashlib.sha256(key).digest()[:8], "big") % HELD_OUT_MODULUS == 0


def all_specs(captions: Captions = NAMED_SHAPE) -> list[OpenSpec]:
    """Every combination (6 colours x 3 shapes, or any shape, x 6 positions, one of them unnamed), fixed order."""
    shapes = SHAPES if captions.names_shape else (None,)
    return [OpenSpec(c, s, p) for c in COLORS for s in shapes for p in (*POSITIONS, None)]


def split_specs(split: str, captions: Captions = NAMED_SHAPE) -> list[OpenSpec]:
    """``"train"``, ``"held_out"`` or ``"all"``."""
    if split == "all":
        return all_specs(captions)
    if split not in ("train", "held_out"):
        raise InputError(f"split: unknown {split!r}; expected train, held_out or all")
    want = split == "held_out"
    return [s for s in all_specs(captions) if is_held_out(s) == want]


def sample_specs(
    rng: np.random.Generator, n: int, split: str = "train", captions: Captions = NAMED_SHAPE
) -> list[OpenSpec]:
    """``n`` specs of a split; a caption names its position with probability NAMED_POSITION_SHARE."""
    specs = split_specs(split, captions)
    named = [s for s in specs if s.position is not None]
    unnamed = [s for s in specs if s.position is None]
    pick_named = rng.random(n) < NAMED_POSITION_SHARE
    index = rng.random(n)
    # a split with no caption of one kind (the held-out one names every position) draws from the other
    pools = [named if (is_named and named) or not unnamed else unnamed for is_named in pick_named]
    return [pool[int(u * len(pool))] for pool, u in zip(pools, index, strict=True)]


def evaluation_specs(n: int = 64, seed: int = 0, captions: Captions = NAMED_SHAPE) -> list[OpenSpec]:
    """``n`` held-out combinations in a fixed order (repeating the split when n exceeds it)."""
    specs = split_specs("held_out", captions)
    order = np.random.default_rng(seed).permutation(len(specs))
    return [specs[order[i % len(specs)]] for i in range(n)]


def _smooth_field(rng: np.random.Generator, n: int, size: int, exponent: float) -> np.ndarray:
    """(n, size, size) random fields with amplitude ~ frequency**-exponent, each of unit spread."""
    white = rng.standard_normal((n, size, size))
    f = np.sqrt(np.fft.fftfreq(size)[:, None] ** 2 + np.fft.fftfreq(size)[None, :] ** 2)
    f[0, 0] = np.inf  # no constant term: the background's tone is drawn on its own
    spectrum = np.fft.fft2(white) * (f**-exponent)[None]
    field = np.fft.ifft2(spectrum).real
    return field / field.std(axis=(1, 2), keepdims=True)


def shape_masks(shape_ids: np.ndarray, cx: np.ndarray, cy: np.ndarray, r: np.ndarray, size: int) -> np.ndarray:
    """(B,) shape indices, centres and radii in pixels -> (B, size, size) boolean masks."""
    coords = np.arange(size, dtype=np.float64) + 0.5
    dx = coords[None, None, :] - cx[:, None, None]
    dy = coords[None, :, None] - cy[:, None, None]
    r = r[:, None, None]
    circle = dx**2 + dy**2 <= r**2
    square = (np.abs(dx) <= 0.85 * r) & (np.abs(dy) <= 0.85 * r)
    height = 1.8 * r
    from_apex = dy + 2.0 * height / 3.0  # apex up; the centroid sits 2/3 of the way down
    triangle = (from_apex >= 0) & (from_apex <= height) & (np.abs(dx) <= from_apex * 0.62)
    return np.stack([circle, square, triangle])[shape_ids, np.arange(len(shape_ids))]


def _paint(images, masks, colors, rng: np.random.Generator, size: int) -> None:
    """Objects of ``colors`` (B, 3) in [-1, 1] over ``images`` where ``masks``, with a fine brightness texture."""
    texture = 1.0 + TEXTURE_STD * _smooth_field(rng, len(masks), size, 0.5)
    rgb01 = (colors[:, None, None, :] + 1.0) / 2.0 * texture[..., None]
    images[masks] = (np.clip(rgb01, 0.0, 1.0) * 2.0 - 1.0)[masks]


def render_batch(specs: Sequence[OpenSpec], rng: np.random.Generator, size: int) -> np.ndarray:
    """Specs -> (B, size, size, 3) float32 in [-1, 1]; everything the captions leave open drawn from ``rng``."""
    n = len(specs)
    # background: tone + tint, a smooth field, a lighting gradient
    tone = rng.uniform(*BACKGROUND_TONE, size=(n, 1, 1, 1))
    tint = rng.uniform(-BACKGROUND_TINT, BACKGROUND_TINT, size=(n, 1, 1, 3))
    field = FIELD_STD * _smooth_field(rng, n, size, FIELD_EXPONENT)[..., None]
    angle = rng.uniform(0, 2 * np.pi, size=n)
    ramp = np.linspace(-1.0, 1.0, size)
    light = np.cos(angle)[:, None, None] * ramp[None, None, :] + np.sin(angle)[:, None, None] * ramp[None, :, None]
    light = rng.uniform(*LIGHT_RANGE, size=(n, 1, 1)) * light
    images = tone + tint + field + light[..., None]

    names = list(COLORS)
    rgb = {c: np.array(v, dtype=np.float64) / 127.5 - 1.0 for c, v in COLORS.items()}
    # unnamed objects: any shape, any other colour, smaller than the named one, anywhere
    count = rng.integers(0, MAX_DISTRACTORS + 1, size=n)
    for k in range(MAX_DISTRACTORS):
        others = [[c for c in names if c != s.color] for s in specs]
        colors = np.stack([rgb[o[int(rng.integers(len(o)))]] for o in others])
        shape_ids = rng.integers(len(SHAPES), size=n)
        centres = rng.uniform(0.1, 0.9, size=(n, 2)) * size
        radii = rng.uniform(*DISTRACTOR_SIZE_RANGE, size=n) * size
        masks = shape_masks(shape_ids, centres[:, 0], centres[:, 1], radii, size) & (count > k)[:, None, None]
        _paint(images, masks, colors, rng, size)
    # the named object, on top
    anchors = np.array([POSITIONS[s.position] if s.position else (np.nan, np.nan) for s in specs])
    free = rng.uniform(*FREE_RANGE, size=(n, 2))
    jitter = rng.uniform(-JITTER, JITTER, size=(n, 2))
    centres = np.where(np.isnan(anchors), free, anchors + jitter) * size
    radii = rng.uniform(*SIZE_RANGE, size=n) * size
    shape_ids = np.array([SHAPES.index(s.shape) if s.shape else 0 for s in specs])
    open_shape = np.array([s.shape is None for s in specs])
    if open_shape.any():  # drawn only then, so a batch of named shapes keeps the stream it always had
        shape_ids[open_shape] = rng.integers(len(SHAPES), size=int(open_shape.sum()))
    masks = shape_masks(shape_ids, centres[:, 0], centres[:, 1], radii, size)
    _paint(images, masks, np.stack([rgb[s.color] for s in specs]), rng, size)
    low, high = np.log(GRAIN_RANGE[0]), np.log(GRAIN_RANGE[1])
    spread = np.exp(low + (high - low) / (1.0 + np.exp(-2.0 * _smooth_field(rng, n, size, 1.5))))
    images = images + spread[..., None] * rng.standard_normal(images.shape)
    return np.clip(images, -1.0, 1.0).astype(np.float32)


def to_uint8(images) -> np.ndarray:
    """[-1, 1] images (any leading shape, channels last) -> uint8, rounded like mflux's ImageUtil."""
    array = np.asarray(images, dtype=np.float32)
    return (np.clip(array / 2.0 + 0.5, 0.0, 1.0) * 255.0).round().astype(np.uint8)


def recipe(size: int, captions: Captions = NAMED_SHAPE) -> dict:
    """The data recipe as data: stored in the manifest, compared on load."""
    return {
        "name": captions.name,
        "version": captions.version,
        "image_size": size,
        "text_len": TEXT_LEN,
        "vocab": list(captions.vocab),
        "caption_names_shape": captions.names_shape,
        "colors": {k: list(v) for k, v in COLORS.items()},
        "shapes": list(SHAPES),
        "positions": {k: list(v) for k, v in POSITIONS.items()},
        "named_position_share": NAMED_POSITION_SHARE,
        "jitter": JITTER,
        "free_range": list(FREE_RANGE),
        "size_range": list(SIZE_RANGE),
        "distractors": {"max": MAX_DISTRACTORS, "size_range": list(DISTRACTOR_SIZE_RANGE)},
        "background": {
            "tone": list(BACKGROUND_TONE),
            "tint": BACKGROUND_TINT,
            "field_std": FIELD_STD,
            "field_exponent": FIELD_EXPONENT,
            "light_range": list(LIGHT_RANGE),
        },  # fmt: skip
        "texture_std": TEXTURE_STD,
        "grain_range": list(GRAIN_RANGE),
        "grain_spread_field": "log-spread = logistic(2 x field), field ~ 1/f^1.5",
        "latent_scale": LATENT_SCALE,
        "held_out": f"sha256('color|shape|position or -')[:8] % {HELD_OUT_MODULUS} == 0",
        "n_combinations": len(all_specs(captions)),
        "n_held_out": len(split_specs("held_out", captions)),
    }
