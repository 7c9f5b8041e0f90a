"""The tiny-scenes data: vocabulary, captions, procedural 64x64 two-object scenes and the data recipe.

A scene is two objects in a relation on a background: "a big red striped circle left of a small blue
square on a white background". Each object has a size (small, big), a colour, a texture (plain or
striped) and a shape (circle, square, triangle); the relation (left of, right of, above, below) places
the first object against the second. Pure numpy (no MLX, no mflux), so drawing training data or
checking a prompt is cheap; ``teacache.models.scenes`` builds the model and pipeline on top of it.

The image reaches mflux's FLUX.1 transformer without a VAE: 64x64 RGB is laid out as mflux's latent of
a nominal 256x256 image (16 channels at 32x32; channels 0-11 hold one 2x2 pixel block, 12-15 are 0),
which mflux packs into 256 tokens of 64 values, as for any FLUX.1 image of that size.
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
from collections.abc import Sequence

import numpy as np

from teacache.errors import InputError
from teacache.models.vocabulary import PAD, caption_words, tokenize_caption

# ---------------------------------------------------------------------------------------------------
# Data recipe. Bump RECIPE_VERSION whenever anything below changes what an image or a token id means:
# the manifest records it and the loader refuses weights trained on another recipe.
# ---------------------------------------------------------------------------------------------------
RECIPE_VERSION = 1
IMAGE_SIZE = 64
NOMINAL_SIZE = 256  # the height/width mflux's FLUX.1 pipeline is called with: 16 px per token there
PIXELS_PER_LATENT = 2  # one latent position holds a 2x2 pixel block
LATENT_CHANNELS = 16  # FLUX.1's latent channels; 3 x 2 x 2 = 12 carry pixels, the rest are 0
LATENT_SIDE = IMAGE_SIZE // PIXELS_PER_LATENT  # 32
TOKEN_SIDE = LATENT_SIDE // 2  # mflux packs 2x2 latent positions per token: 16 x 16 = 256 tokens
TOKEN_CHANNELS = LATENT_CHANNELS * 4  # 64
TEXT_LEN = 16

PALETTE: dict[str, tuple[int, int, int]] = {
    "red": (220, 40, 40),
    "green": (40, 180, 60),
    "blue": (40, 70, 220),
    "yellow": (235, 210, 40),
    "purple": (140, 50, 180),
    "orange": (240, 140, 30),
    "white": (245, 245, 245),
    "black": (20, 20, 20),
}
SHAPES: tuple[str, ...] = ("circle", "square", "triangle")
SIZES: dict[str, tuple[float, float]] = {"small": (5.0, 7.0), "big": (9.5, 12.0)}  # "radius" r, uniform
TEXTURES: tuple[str, ...] = ("plain", "striped")  # "plain" is the caption's default and not written
STRIPE_PERIOD = 4.0  # px, diagonal; the dark half is the colour times STRIPE_SHADE
STRIPE_SHADE = 0.45
RELATIONS: dict[str, tuple[str, ...]] = {  # relation -> its words in a caption
    "left": ("left", "of"),
    "right": ("right", "of"),
    "above": ("above",),
    "below": ("below",),
}
MARGIN = 3.0  # px kept free between an object's bounding circle and the canvas edge
MIN_GAP = 4.0  # px between the two objects' centres along the relation's axis, beyond their sizes
MODEL_NAME = "tiny-scenes"
FILLER_WORDS: tuple[str, ...] = ("a", "of", "on", "background", "striped")
VOCAB: tuple[str, ...] = (PAD, *FILLER_WORDS, *SIZES, *PALETTE, *SHAPES, "left", "right", "above", "below")
TOKEN_IDS: dict[str, int] = {word: i for i, word in enumerate(VOCAB)}
HELD_OUT_MODULUS = 10  # about 1 combination of (colour, shape, relation, colour, shape) in 10 never trains


@dataclasses.dataclass(frozen=True)
class SceneObject:
    size: str
    color: str
    texture: str
    shape: str

    def __post_init__(self) -> None:
        for field, allowed in (("size", SIZES), ("color", PALETTE), ("texture", TEXTURES), ("shape", SHAPES)):
            value = getattr(self, field)
            if value not in allowed:
                raise InputError(f"{field}: unknown {value!r}; expected one of {', '.join(allowed)}")

    @property
    def words(self) -> str:
        texture = "" if self.texture == "plain" else f" {self.texture}"
        return f"{self.size} {self.color}{texture} {self.shape}"


@dataclasses.dataclass(frozen=True)
class SceneSpec:
    """What one image shows: ``first`` stands in ``relation`` to ``second`` on ``background``."""

    first: SceneObject
    relation: str
    second: SceneObject
    background: str

    def __post_init__(self) -> None:
        if self.relation not in RELATIONS:
            raise InputError(f"relation: unknown {self.relation!r}; expected one of {', '.join(RELATIONS)}")
        if self.background not in PALETTE:
            raise InputError(f"background: unknown {self.background!r}; expected one of {', '.join(PALETTE)}")
        colors = (self.first.color, self.second.color, self.background)
        if len(set(colors)) != 3:
            raise InputError(f"colours must differ (first, second, background): got {', '.join(colors)}")

    @property
    def prompt(self) -> str:
        relation = " ".join(RELATIONS[self.relation])
        return f"a {self.first.words} {relation} a {self.second.words} on a {self.background} background"

    @property
    def combination(self) -> str:
        """The attributes the held-out split is drawn on; sizes, textures and background vary freely."""
        return f"{self.first.color}|{self.first.shape}|{self.relation}|{self.second.color}|{self.second.shape}"

    @property
    def held_out(self) -> bool:
        return is_held_out(self)


def tokenize(text: str) -> np.ndarray:
    """Prompt -> ``TEXT_LEN`` int32 ids, right-padded with 0 (``<pad>``)."""
    return tokenize_caption(text, TOKEN_IDS, TEXT_LEN, MODEL_NAME)


_EXAMPLE = "a big red striped circle left of a small blue square on a white background"
_OBJECT = rf"a ({'|'.join(SIZES)}) ({'|'.join(PALETTE)})( striped)? ({'|'.join(SHAPES)})"
_RELATION = "|".join(" ".join(words) for words in RELATIONS.values())
_PROMPT = re.compile(rf"^{_OBJECT} ({_RELATION}) {_OBJECT} on a ({'|'.join(PALETTE)}) background$")


def parse_prompt(text: str) -> SceneSpec:
    """Read a caption back into a spec; one clear error names what the caption needs."""
    words = caption_words(text, TOKEN_IDS, MODEL_NAME, TEXT_LEN)
    match = _PROMPT.match(" ".join(words))
    if match is None:
        raise InputError(f"prompt: expected the form {_EXAMPLE!r} ('striped' is optional): {text!r}")
    g = match.groups()
    first = SceneObject(g[0], g[1], "striped" if g[2] else "plain", g[3])
    second = SceneObject(g[5], g[6], "striped" if g[7] else "plain", g[8])
    relation = g[4].split()[0]
    return SceneSpec(first=first, relation=relation, second=second, background=g[9])


def is_held_out(spec: SceneSpec) -> bool:
    """A fixed ~10% of (colour, shape, relation, colour, shape) combinations, by hash, never trained on."""
    return _key_held_out(spec.combination)


def combinations() -> list[str]:
    """Every (colour, shape, relation, colour, shape) key with two different colours, in a fixed order."""
    return [
        f"{c1}|{s1}|{r}|{c2}|{s2}"
        for c1 in PALETTE
        for s1 in SHAPES
        for r in RELATIONS
        for c2 in PALETTE
        if c2 != c1
        for s2 in SHAPES
    ]


def _key_held_out(key: str) -> bool:
    return int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "big") % HELD_OUT_MODULUS == 0


def split_combinations(split: str) -> list[str]:
    """``"train"``, ``"held_out"`` or ``"all"`` combination keys."""
    keys = combinations()
    if split == "all":
        return keys
    if split not in ("train", "held_out"):
        raise InputError(f"split: unknown {split!r}; expected train, held_out or all")
    return [k for k in keys if _key_held_out(k) == (split == "held_out")]


def sample_specs(rng: np.random.Generator, n: int, split: str = "train") -> list[SceneSpec]:
    """``n`` scenes: a combination from the split, then sizes, textures and a third colour at random."""
    keys = split_combinations(split)
    specs = []
    for i in rng.integers(len(keys), size=n):
        c1, s1, relation, c2, s2 = keys[i].split("|")
        backgrounds = [c for c in PALETTE if c not in (c1, c2)]
        sizes = rng.integers(len(SIZES), size=2)
        textures = rng.integers(len(TEXTURES), size=2)
        first = SceneObject(tuple(SIZES)[sizes[0]], c1, TEXTURES[textures[0]], s1)
        second = SceneObject(tuple(SIZES)[sizes[1]], c2, TEXTURES[textures[1]], s2)
        background = backgrounds[int(rng.integers(len(backgrounds)))]
        specs.append(SceneSpec(first=first, relation=relation, second=second, background=background))
    return specs


def evaluation_specs(n: int = 64, seed: int = 0) -> list[SceneSpec]:
    """``n`` held-out scenes in a fixed order: the model card's and the adherence check's prompts."""
    return sample_specs(np.random.default_rng(seed), n, split="held_out")


# ---------------------------------------------------------------------------------------------------
# Rendering
# ---------------------------------------------------------------------------------------------------
def _place(spec: SceneSpec, r1: float, r2: float, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Centres (x, y) of the two objects: apart along the relation's axis, anywhere along the other."""
    along = 0 if spec.relation in ("left", "right") else 1
    first_low = spec.relation in ("left", "above")  # smaller coordinate first (y grows downwards)
    low_r, high_r = (r1, r2) if first_low else (r2, r1)
    lo = MARGIN + low_r
    hi = IMAGE_SIZE - MARGIN - high_r
    gap = low_r + high_r + MIN_GAP
    a = rng.uniform(lo, hi - gap)
    b = rng.uniform(a + gap, hi)
    low, high = np.zeros(2), np.zeros(2)
    low[along], high[along] = a, b
    low[1 - along] = rng.uniform(MARGIN + low_r, IMAGE_SIZE - MARGIN - low_r)
    high[1 - along] = rng.uniform(MARGIN + high_r, IMAGE_SIZE - MARGIN - high_r)
    return (low, high) if first_low else (high, low)


def _masks(shape_ids: np.ndarray, centres: np.ndarray, r: np.ndarray) -> np.ndarray:
    """(N,) shape indices, (N, 2) centres and (N,) sizes -> (N, H, W) masks (centroid at the centre)."""
    coords = np.arange(IMAGE_SIZE, dtype=np.float32) + 0.5
    dx = coords[None, None, :] - centres[:, 0, None, None]
    dy = coords[None, :, None] - centres[:, 1, None, None]
    r = r[:, None, None]
    circle = dx**2 + dy**2 <= r**2
    square = (np.abs(dx) <= 0.85 * r) & (np.abs(dy) <= 0.85 * r)
    height = 1.7 * r
    from_apex = dy + 2.0 * height / 3.0  # apex up; the centroid sits 2/3 of the way down
    triangle = (from_apex >= 0) & (from_apex <= height) & (np.abs(dx) <= from_apex * 0.577)
    return np.stack([circle, square, triangle])[shape_ids, np.arange(len(shape_ids))]  # order of SHAPES


def _stripes() -> np.ndarray:
    coords = np.arange(IMAGE_SIZE, dtype=np.float32)
    return ((coords[None, :] + coords[:, None]) % STRIPE_PERIOD) >= STRIPE_PERIOD / 2


_STRIPES = _stripes()
_RGB = {name: np.array(rgb, np.float32) for name, rgb in PALETTE.items()}


def _fill(obj: SceneObject) -> np.ndarray:
    """(H, W, 3) colour of an object's pixels, its texture included."""
    color = _RGB[obj.color]
    if obj.texture == "striped":
        return np.where(_STRIPES[..., None], color * STRIPE_SHADE, color)
    return np.broadcast_to(color, (IMAGE_SIZE, IMAGE_SIZE, 3))


def render_batch(specs: Sequence[SceneSpec], rng: np.random.Generator) -> np.ndarray:
    """Specs -> (B, H, W, 3) float32 in [-1, 1]; sizes and placement drawn from ``rng``, spec by spec."""
    n = len(specs)
    sizes = np.empty((n, 2))
    centres = np.empty((n, 2, 2))
    for i, spec in enumerate(specs):
        sizes[i] = rng.uniform(*SIZES[spec.first.size]), rng.uniform(*SIZES[spec.second.size])
        centres[i] = _place(spec, sizes[i, 0], sizes[i, 1], rng)
    shape_ids = np.array([[SHAPES.index(s.first.shape), SHAPES.index(s.second.shape)] for s in specs])
    masks = _masks(shape_ids.ravel(), centres.reshape(-1, 2), sizes.ravel()).reshape(n, 2, IMAGE_SIZE, IMAGE_SIZE)
    images = np.empty((n, IMAGE_SIZE, IMAGE_SIZE, 3), np.float32)
    for i, spec in enumerate(specs):  # the first object is drawn on top of the second
        image = np.where(masks[i, 1, ..., None], _fill(spec.second), _RGB[spec.background])
        images[i] = np.where(masks[i, 0, ..., None], _fill(spec.first), image)
    return images / 255.0 * 2.0 - 1.0


def render(spec: SceneSpec, rng: np.random.Generator) -> np.ndarray:
    """One spec -> (H, W, 3) float32 image in [-1, 1]."""
    return render_batch([spec], rng)[0]


# ---------------------------------------------------------------------------------------------------
# Pixels <-> mflux's FLUX.1 latents and tokens
# ---------------------------------------------------------------------------------------------------
def to_latents(images):
    """(B, 64, 64, 3) -> (B, 16, 32, 32): channels (c, dy, dx) of each 2x2 block, then 4 zero channels."""
    b = images.shape[0]
    p = PIXELS_PER_LATENT
    x = images.reshape(b, LATENT_SIDE, p, LATENT_SIDE, p, 3).transpose(0, 5, 2, 4, 1, 3)
    x = x.reshape(b, 3 * p * p, LATENT_SIDE, LATENT_SIDE)
    zeros = np.zeros((b, LATENT_CHANNELS - 3 * p * p, LATENT_SIDE, LATENT_SIDE), dtype=x.dtype)
    return np.concatenate([x, zeros], axis=1)


def from_latents(latents):
    """(B, 16, 32, 32) -> (B, 3, 64, 64): the inverse of :func:`to_latents` on its first 12 channels.

    Works on numpy and MLX arrays alike (reshape/transpose only)."""
    b = latents.shape[0]
    p = PIXELS_PER_LATENT
    x = latents[:, : 3 * p * p].reshape(b, 3, p, p, LATENT_SIDE, LATENT_SIDE)
    return x.transpose(0, 1, 4, 2, 5, 3).reshape(b, 3, IMAGE_SIZE, IMAGE_SIZE)


def pack(latents):
    """(B, 16, 32, 32) -> (B, 256, 64), the token layout of mflux's ``FluxLatentCreator.pack_latents``."""
    b = latents.shape[0]
    x = latents.reshape(b, LATENT_CHANNELS, TOKEN_SIDE, 2, TOKEN_SIDE, 2).transpose(0, 2, 4, 1, 3, 5)
    return x.reshape(b, TOKEN_SIDE * TOKEN_SIDE, TOKEN_CHANNELS)


def to_uint8(images) -> np.ndarray:
    """[-1, 1] images (channels last) -> uint8, rounded like mflux's ImageUtil."""
    array = np.asarray(images, dtype=np.float32)
    return (np.clip(array / 2.0 + 0.5, 0.0, 1.0) * 255.0).round().astype(np.uint8)


def recipe() -> dict:
    """The data recipe as data: stored in the manifest, compared on load."""
    return {
        "version": RECIPE_VERSION,
        "image_size": IMAGE_SIZE,
        "nominal_size": NOMINAL_SIZE,
        "text_len": TEXT_LEN,
        "vocab": list(VOCAB),
        "palette": {k: list(v) for k, v in PALETTE.items()},
        "shapes": list(SHAPES),
        "sizes": {k: list(v) for k, v in SIZES.items()},
        "textures": list(TEXTURES),
        "stripe": {"period_px": STRIPE_PERIOD, "shade": STRIPE_SHADE, "direction": "diagonal"},
        "relations": {k: " ".join(v) for k, v in RELATIONS.items()},
        "margin_px": MARGIN,
        "min_gap_px": MIN_GAP,
        "held_out": f"sha256('c1|s1|relation|c2|s2')[:8] % {HELD_OUT_MODULUS} == 0",
        "n_combinations": len(combinations()),
        "n_held_out": len(split_combinations("held_out")),
    }
