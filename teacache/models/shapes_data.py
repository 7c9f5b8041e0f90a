"""The tiny-shapes data: vocabulary, prompt parsing, procedural rendering and the data recipe.

Pure numpy (no MLX, no mflux), so scoring a prompt's adherence or drawing training data is cheap.
``teacache.models.shapes`` builds the model and pipeline on top of it.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Sequence

import numpy as np

from teacache import variants
from teacache.errors import InputError
from teacache.models.vocabulary import PAD, caption_words, tokenize_caption

# ---------------------------------------------------------------------------------------------------
# Data recipe. Bump RECIPE_VERSION whenever anything below changes what an image or a token id means:
# the manifest records it and the loader refuses weights trained on another recipe.
# ---------------------------------------------------------------------------------------------------
RECIPE_VERSION = 1
IMAGE_SIZE = 32
PATCH = 2
LATENT_SIDE = IMAGE_SIZE // PATCH  # 16 x 16 = 256 image tokens
LATENT_CHANNELS = 3 * PATCH * PATCH  # 12
TEXT_LEN = 12

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
SHAPES: tuple[str, ...] = ("circle", "square", "triangle", "ring")
# Anchor of each position as (x, y) in pixels; pixel (row i, column j) has its centre at (j + .5, i + .5).
POSITIONS: dict[str, tuple[float, float]] = {
    "left": (9.0, 16.0),
    "right": (23.0, 16.0),
    "top": (16.0, 9.0),
    "bottom": (16.0, 23.0),
    "center": (16.0, 16.0),
}
JITTER = 1.5  # the shape's centre moves uniformly within +-JITTER pixels of its anchor
SIZE_RANGE = (4.5, 7.0)  # "radius" r, uniform: circle radius, square half-side 0.85 r, triangle height 1.7 r
PROMPT_TEMPLATE = "a {color} {shape} on a {background} background at the {position}"
MODEL_NAME = variants.built_by("teacache.models.shapes:load_tiny_shapes").name
FILLER_WORDS: tuple[str, ...] = ("a", "on", "background", "at", "the")
VOCAB: tuple[str, ...] = (PAD, *FILLER_WORDS, *PALETTE, *SHAPES, *POSITIONS)
TOKEN_IDS: dict[str, int] = {word: i for i, word in enumerate(VOCAB)}
HELD_OUT_MODULUS = 10  # about 1 combination in 10 is never drawn for training


@dataclasses.dataclass(frozen=True)
class ShapeSpec:
    """What one image shows; every field is a word of the vocabulary."""

    color: str
    shape: str
    background: str
    position: str

    def __post_init__(self) -> None:
        for field, allowed in (
            ("color", PALETTE),
            ("shape", SHAPES),
            ("background", PALETTE),
            ("position", POSITIONS),
        ):
            value = getattr(self, field)
            if value not in allowed:
                raise InputError(f"{field}: unknown {value!r}; expected one of {', '.join(allowed)}")
        if self.color == self.background:
            raise InputError(f"color and background are both {self.color!r}: the shape would be invisible")

    @property
    def prompt(self) -> str:
        return PROMPT_TEMPLATE.format(**dataclasses.asdict(self))

    @property
    def held_out(self) -> bool:
        return is_held_out(self)


def tokenize(text: str) -> np.ndarray:
    """Prompt -> ``TEXT_LEN`` int32 ids, right-padded with 0 (``<pad>``); the empty prompt is all padding."""
    return tokenize_caption(text, TOKEN_IDS, TEXT_LEN, MODEL_NAME)


def parse_prompt(text: str) -> ShapeSpec:
    """Read a prompt back into a spec: the colour before the shape, the colour before "background"."""
    words = caption_words(text, TOKEN_IDS, MODEL_NAME, TEXT_LEN)
    shapes = [w for w in words if w in SHAPES]
    positions = [w for w in words if w in POSITIONS]
    if len(shapes) != 1 or len(positions) != 1:
        raise InputError(
            f"prompt: needs exactly one shape ({', '.join(SHAPES)}) and one position "
            f"({', '.join(POSITIONS)}): {text!r}; e.g. {ShapeSpec('red', 'circle', 'blue', 'left').prompt!r}"
        )
    i_shape = words.index(shapes[0])
    color = next((w for w in reversed(words[:i_shape]) if w in PALETTE), None)
    background = None
    if "background" in words:
        i_bg = words.index("background")
        background = next((w for w in reversed(words[:i_bg]) if w in PALETTE), None)
    if color is None or background is None:
        raise InputError(
            f"prompt: needs a colour before the shape and a colour before 'background': {text!r}; "
            f"e.g. {ShapeSpec('red', 'circle', 'blue', 'left').prompt!r}"
        )
    return ShapeSpec(color=color, shape=shapes[0], background=background, position=positions[0])


def is_held_out(spec: ShapeSpec) -> bool:
    """A fixed ~10% of all combinations, by hash: never drawn for training, used for evaluation."""
    key = f"{spec.color}|{spec.shape}|{spec.background}|{spec.position}".encode()
    return int.from_bytes(hashlib.sha256(key).digest()[:8], "big") % HELD_OUT_MODULUS == 0


def all_specs() -> list[ShapeSpec]:
    """Every combination (8 colours x 7 backgrounds x 4 shapes x 5 positions = 1120), in a fixed order."""
    return [ShapeSpec(c, s, b, p) for c in PALETTE for b in PALETTE if b != c for s in SHAPES for p in POSITIONS]


def split_specs(split: str) -> list[ShapeSpec]:
    """``"train"``, ``"held_out"`` or ``"all"``."""
    if split == "all":
        return all_specs()
    if split not in ("train", "held_out"):
        raise InputError(f"split: unknown {split!r}; expected train, held_out or all")
    want = split == "held_out"
    return [s for s in all_specs() if is_held_out(s) == want]


def sample_spec(rng: np.random.Generator, split: str = "train") -> ShapeSpec:
    """One combination drawn uniformly from a split."""
    specs = split_specs(split)
    return specs[int(rng.integers(len(specs)))]


def sample_specs(rng: np.random.Generator, n: int, split: str = "train") -> list[ShapeSpec]:
    specs = split_specs(split)
    return [specs[i] for i in rng.integers(len(specs), size=n)]


def evaluation_specs(n: int = 64, seed: int = 0) -> list[ShapeSpec]:
    """``n`` distinct held-out combinations in a fixed order: the model card's and the tests' prompts."""
    specs = split_specs("held_out")
    if n > len(specs):
        raise InputError(f"n: only {len(specs)} held-out combinations exist, asked for {n}")
    order = np.random.default_rng(seed).permutation(len(specs))[:n]
    return [specs[i] for i in order]


def _shape_masks(shape_ids: np.ndarray, cx: np.ndarray, cy: np.ndarray, r: np.ndarray) -> np.ndarray:
    """(B,) shape indices, centres and sizes -> (B, H, W) boolean masks (each shape's centroid at cx, cy)."""
    coords = np.arange(IMAGE_SIZE, dtype=np.float32) + 0.5
    dx = coords[None, None, :] - cx[:, None, None]
    dy = coords[None, :, None] - cy[:, None, None]
    r = r[:, None, None]
    dist = np.sqrt(dx**2 + dy**2)
    circle = dist <= r
    ring = circle & (dist >= r - np.maximum(2.2, 0.4 * r))
    square = (np.abs(dx) <= 0.85 * r) & (np.abs(dy) <= 0.85 * r)
    height = 1.7 * r
    from_apex = dy + 2.0 * height / 3.0  # apex up; the centroid of a triangle sits 2/3 of the way down
    triangle = (from_apex >= 0) & (from_apex <= height) & (np.abs(dx) <= from_apex * 0.577)
    stacked = np.stack([circle, square, triangle, ring])  # order of SHAPES
    return stacked[shape_ids, np.arange(len(shape_ids))]


def render_batch(specs: Sequence[ShapeSpec], rng: np.random.Generator) -> np.ndarray:
    """Specs -> (B, H, W, 3) float32 in [-1, 1]; position and size jitter drawn from ``rng``."""
    n = len(specs)
    offsets = rng.uniform(-JITTER, JITTER, size=(n, 2))
    sizes = rng.uniform(*SIZE_RANGE, size=n)
    anchors = np.array([POSITIONS[s.position] for s in specs], dtype=np.float64).reshape(n, 2)
    shape_ids = np.array([SHAPES.index(s.shape) for s in specs], dtype=np.int64)
    masks = _shape_masks(shape_ids, anchors[:, 0] + offsets[:, 0], anchors[:, 1] + offsets[:, 1], sizes)
    fg = np.array([PALETTE[s.color] for s in specs], dtype=np.float32).reshape(n, 1, 1, 3)
    bg = np.array([PALETTE[s.background] for s in specs], dtype=np.float32).reshape(n, 1, 1, 3)
    images = np.where(masks[..., None], fg, bg) / 255.0
    return (images * 2.0 - 1.0).astype(np.float32)


def render(spec: ShapeSpec, rng: np.random.Generator) -> np.ndarray:
    """One spec -> (H, W, 3) float32 image in [-1, 1]."""
    return render_batch([spec], rng)[0]


def patchify(images):
    """(B, H, W, 3) -> (B, 256, 12) tokens, channel order as mflux's FLUX.2 patchify + pack (c, dy, dx)."""
    b = images.shape[0]
    x = images.transpose(0, 3, 1, 2).reshape(b, 3, LATENT_SIDE, PATCH, LATENT_SIDE, PATCH)
    x = x.transpose(0, 1, 3, 5, 2, 4).reshape(b, LATENT_CHANNELS, LATENT_SIDE * LATENT_SIDE)
    return x.transpose(0, 2, 1)


def unpatchify(latents):
    """(B, 256, 12) tokens -> (B, H, W, 3); the inverse of :func:`patchify`."""
    b = latents.shape[0]
    x = latents.reshape(b, LATENT_SIDE, LATENT_SIDE, LATENT_CHANNELS).transpose(0, 3, 1, 2)
    x = x.reshape(b, 3, PATCH, PATCH, LATENT_SIDE, LATENT_SIDE).transpose(0, 1, 4, 2, 5, 3)
    return x.reshape(b, 3, IMAGE_SIZE, IMAGE_SIZE).transpose(0, 2, 3, 1)


def to_uint8(images) -> np.ndarray:
    """[-1, 1] images (any leading shape, channels last) -> uint8, rounded like mflux's ImageUtil."""
    array = np.asarray(images, dtype=np.float32)
    return (np.clip(array / 2.0 + 0.5, 0.0, 1.0) * 255.0).round().astype(np.uint8)


def recipe() -> dict:
    """The data recipe as data: stored in the manifest, compared on load."""
    return {
        "version": RECIPE_VERSION,
        "image_size": IMAGE_SIZE,
        "patch": PATCH,
        "text_len": TEXT_LEN,
        "vocab": list(VOCAB),
        "palette": {k: list(v) for k, v in PALETTE.items()},
        "shapes": list(SHAPES),
        "positions": {k: list(v) for k, v in POSITIONS.items()},
        "jitter_px": JITTER,
        "size_range": list(SIZE_RANGE),
        "prompt_template": PROMPT_TEMPLATE,
        "held_out": f"sha256('color|shape|background|position')[:8] % {HELD_OUT_MODULUS} == 0",
        "n_combinations": len(all_specs()),
        "n_held_out": len(split_specs("held_out")),
    }
