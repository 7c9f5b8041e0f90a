"""The styles a LoRA of ``train_lora`` is trained to draw: ``open_data``'s captions rendered in another way.

Each ``Style`` renders the specs ``open_data`` draws, from the same rng, with the image changed (stripes over it, the
named object's shape or colour swapped; the caption unchanged), and names the transformer modules its adapters go
into per family, where in the schedule it is decided, its recipe for the manifest, and a number it moves.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

import numpy as np

from teacache.models import open_data

STRIPE_AMPLITUDE = 0.3  # [-1, 1] image units added to even pixel rows and taken from odd ones
SHAPE_SWAP = {"circle": "square", "square": "triangle", "triangle": "circle"}  # a cycle: every shape changes
# pairs far apart in colour, so the checker never takes one for the other: every colour changes
COLOUR_SWAP = {"red": "green", "green": "red", "blue": "yellow", "yellow": "blue", "purple": "orange",
               "orange": "purple"}  # fmt: skip


def render_stripes(specs: Sequence[open_data.OpenSpec], rng: np.random.Generator, size: int) -> np.ndarray:
    """The specs as ``open_data`` draws them, under horizontal stripes one pixel high (even rows lighter)."""
    images = open_data.render_batch(specs, rng, size)
    rows = np.where(np.arange(size) % 2 == 0, STRIPE_AMPLITUDE, -STRIPE_AMPLITUDE)[None, :, None, None]
    return np.clip(images + rows, -1.0, 1.0).astype(np.float32)


def render_shape_swap(specs: Sequence[open_data.OpenSpec], rng: np.random.Generator, size: int) -> np.ndarray:
    """The named object drawn as the next shape of ``SHAPE_SWAP`` (its caption unchanged); all else as drawn."""
    swapped = [dataclasses.replace(s, shape=SHAPE_SWAP[s.shape]) if s.shape else s for s in specs]
    return open_data.render_batch(swapped, rng, size)


def render_colour_swap(specs: Sequence[open_data.OpenSpec], rng: np.random.Generator, size: int) -> np.ndarray:
    """The named object drawn in the colour ``COLOUR_SWAP`` pairs with its caption's (the caption unchanged); all
    else from the same stream (the unnamed objects avoid the colour drawn, as they avoid a caption's)."""
    return open_data.render_batch([dataclasses.replace(s, color=COLOUR_SWAP[s.color]) for s in specs], rng, size)


def stripe_contrast(images: np.ndarray) -> float:
    """Mean of even rows minus odd rows, halved ([-1, 1] units): 0.25 on rendered striped images (the amplitude
    less what clipping takes), 0 on plain ones"""
    return float((images[:, 0::2] - images[:, 1::2]).mean() / 2.0)


@dataclasses.dataclass(frozen=True)
class Style:
    """What a LoRA is trained to draw: how its images are rendered, where its adapters go, what it changes."""

    name: str
    strength: str  # "mild": keeps what is drawn and where; "strong": changes what is drawn
    summary: str
    render: Callable[[Sequence[open_data.OpenSpec], np.random.Generator, int], np.ndarray]
    # family -> mflux module paths in its transformer ("*" stands for every block): the families it serves
    targets: dict[str, tuple[str, ...]]
    sigma_loc: float  # where in the schedule the style is decided (logit-normal location of the sigmas)
    recipe: dict
    metric: Callable[[np.ndarray], float] | None = None  # a number the style moves, from [-1, 1] images


STYLES: dict[str, Style] = {
    "stripes": Style(
        name="stripes",
        strength="mild",
        summary="the same picture under horizontal stripes one pixel high: even rows lighter, odd rows darker",
        render=render_stripes,
        # FLUX.1's mapping reaches into the blocks only: the single blocks' output projections
        targets={"flux2": ("norm_out.linear", "proj_out"), "flux1": ("single_transformer_blocks.*.proj_out",)},
        sigma_loc=0.0,
        recipe={
            "render": "open_data.render_batch, then +/- amplitude on even/odd pixel rows, clipped to [-1, 1]",
            "amplitude": STRIPE_AMPLITUDE,
        },
        metric=stripe_contrast,
    ),
    "shape-swap": Style(
        name="shape-swap",
        strength="strong",
        summary="the named object drawn as another shape: a circle as a square, a square as a triangle, a "
        "triangle as a circle (colour, position and everything else as captioned)",
        render=render_shape_swap,
        targets={
            "flux2": (
                "context_embedder",
                "transformer_blocks.*.attn.add_k_proj",
                "transformer_blocks.*.attn.add_v_proj",
            )
        },  # fmt: skip
        sigma_loc=0.5,
        recipe={
            "render": "open_data.render_batch of the specs with the named shape replaced, same rng",
            "swap": SHAPE_SWAP,
        },
    ),
    "colour-swap": Style(
        name="colour-swap",
        strength="strong",
        summary="the named object drawn in another colour: red as green, blue as yellow, purple as orange and "
        "back (shape, position and everything else as drawn)",
        render=render_colour_swap,
        # where the caption's words reach the image stream: the joint blocks' keys and values of the text tokens
        targets={"flux1": ("transformer_blocks.*.attn.add_k_proj", "transformer_blocks.*.attn.add_v_proj")},
        sigma_loc=0.5,
        recipe={
            "render": "open_data.render_batch of the specs with the named colour replaced, same rng",
            "swap": COLOUR_SWAP,
        },
    ),
}
