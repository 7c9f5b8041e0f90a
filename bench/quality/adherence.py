"""Prompt adherence of ``tiny-shapes`` images, read from pixel statistics alone (no other model).

Every pixel is labelled with its nearest palette colour. The background is the most common label on
the image border; the shape colour is the most common label among the other pixels; the shape is the
largest connected region of that colour, its position the anchor nearest to its centroid, and its type
a rule on its geometry (a hole -> ring; else whichever solid circle, square or triangle of the same
area and centroid overlaps it best). Colour, background and position make the ``score``; shape type,
the hardest to draw at 32x32 and the easiest to misread, is reported apart.

    teacache-bench adherence --model-dir teacache/models/weights     # 64 held-out prompts -> card
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Iterable, Sequence

import mlx.core as mx
import numpy as np
import PIL.Image
from scipy import ndimage

from calib.run import arguments
from calib.run.command import command
from teacache.errors import InputError
from teacache.io import write_json
from teacache.models import shapes, shapes_data
from teacache.models.shapes_data import PALETTE, POSITIONS, ShapeSpec, parse_prompt
from teacache.models.train_shapes import write_model_card
from teacache.provenance import device_info

PROG = "teacache-bench adherence"
WEIGHTS_NAME = "tiny-shapes.safetensors"
MANIFEST_NAME = "tiny-shapes.json"
MAIN_ATTRIBUTES = ("color", "background", "position")
ALL_ATTRIBUTES = (*MAIN_ATTRIBUTES, "shape")
MIN_SHAPE_PIXELS = 6  # fewer non-background pixels than this: no shape was drawn
_COLOR_NAMES = tuple(PALETTE)
_PALETTE_RGB = np.array([PALETTE[name] for name in _COLOR_NAMES], dtype=np.float32) / 255.0
_ANCHOR_NAMES = tuple(POSITIONS)
_ANCHORS = np.array([POSITIONS[name] for name in _ANCHOR_NAMES], dtype=np.float64)
_EIGHT_NEIGHBOURS = np.ones((3, 3), dtype=bool)


def to_rgb01(image: np.ndarray | PIL.Image.Image) -> np.ndarray:
    """PIL image or uint8 array -> float RGB in [0, 1]; float arrays are read as [-1, 1], as rendered."""
    if isinstance(image, PIL.Image.Image):
        image = np.asarray(image.convert("RGB"))
    array = np.asarray(image)
    if array.ndim != 3 or array.shape[-1] != 3:
        raise InputError(f"image: expected H x W x 3, got shape {array.shape}")
    if array.dtype == np.uint8:
        return array.astype(np.float32) / 255.0
    return np.clip((array.astype(np.float32) + 1.0) / 2.0, 0.0, 1.0)


def palette_labels(rgb: np.ndarray) -> np.ndarray:
    """(H, W, 3) in [0, 1] -> (H, W) index of the nearest palette colour (Euclidean in RGB)."""
    distances = ((rgb[:, :, None, :] - _PALETTE_RGB[None, None]) ** 2).sum(-1)
    return distances.argmin(-1)


def _border(labels: np.ndarray) -> np.ndarray:
    return np.concatenate([labels[0], labels[-1], labels[1:-1, 0], labels[1:-1, -1]])


def _largest_component(mask: np.ndarray) -> np.ndarray:
    components, count = ndimage.label(mask, structure=_EIGHT_NEIGHBOURS)
    if count <= 1:
        return mask
    sizes = np.bincount(components.ravel())[1:]
    return components == (1 + int(sizes.argmax()))


def centroid(mask: np.ndarray) -> tuple[float, float]:
    """(x, y) in pixel units with pixel centres at +0.5, the convention of ``shapes_data.POSITIONS``."""
    rows, cols = np.nonzero(mask)
    return float(cols.mean() + 0.5), float(rows.mean() + 0.5)


def nearest_position(xy: tuple[float, float]) -> str:
    return _ANCHOR_NAMES[int(((_ANCHORS - np.asarray(xy)) ** 2).sum(-1).argmin())]


def _templates(cx: float, cy: float, area: float, size: int) -> dict[str, np.ndarray]:
    """Solid circle, square and apex-up triangle of the given area, centroid at (cx, cy), as masks."""
    coords = np.arange(size, dtype=np.float64) + 0.5
    dx = coords[None, :] - cx
    dy = coords[:, None] - cy
    radius = np.sqrt(area / np.pi)
    half = np.sqrt(area) / 2.0
    height = np.sqrt(area / 0.577)  # the renderer's triangle: half-width 0.577 x distance from the apex
    from_apex = dy + 2.0 * height / 3.0
    return {
        "circle": dx**2 + dy**2 <= radius**2,
        "square": (np.abs(dx) <= half) & (np.abs(dy) <= half),
        "triangle": (from_apex >= 0) & (from_apex <= height) & (np.abs(dx) <= 0.577 * from_apex),
    }


def _iou(a: np.ndarray, b: np.ndarray) -> float:
    return float((a & b).sum()) / max(float((a | b).sum()), 1.0)


def classify_shape(mask: np.ndarray) -> str:
    """Shape type from one region's geometry.

    A hole (or an empty centroid) means ring; otherwise the solid circle, square or triangle of the same
    area and centroid that overlaps the hole-filled region best (intersection over union). Matching
    whole templates tolerates the ragged edges and notched corners of generated shapes.
    """
    filled = ndimage.binary_fill_holes(mask)
    area = float(filled.sum())
    hole = area - float(mask.sum())
    rows, cols = np.nonzero(filled)
    cy, cx = int(rows.mean()), int(cols.mean())
    # a ring's centroid falls in its hole, also when the ring is not quite closed
    centre = mask[max(cy - 1, 0) : cy + 2, max(cx - 1, 0) : cx + 2]
    if hole >= max(3.0, 0.06 * area) or centre.mean() < 0.2:
        return "ring"
    templates = _templates(cols.mean() + 0.5, rows.mean() + 0.5, area, mask.shape[0])
    return max(templates, key=lambda name: _iou(filled, templates[name]))


def read_image(image: np.ndarray | PIL.Image.Image) -> dict:
    """What an image shows: background, shape colour, position, shape type (None where nothing is drawn)."""
    labels = palette_labels(to_rgb01(image))
    background = int(np.bincount(_border(labels), minlength=len(_COLOR_NAMES)).argmax())
    foreground = labels != background
    found = {"background": _COLOR_NAMES[background], "color": None, "position": None, "shape": None}
    found.update({"centroid": None, "shape_pixels": int(foreground.sum())})
    if foreground.sum() < MIN_SHAPE_PIXELS:
        return found
    color = int(np.bincount(labels[foreground], minlength=len(_COLOR_NAMES)).argmax())
    region = _largest_component(labels == color)
    xy = centroid(region)
    found.update(
        color=_COLOR_NAMES[color],
        position=nearest_position(xy),
        shape=classify_shape(region),
        centroid=xy,
        shape_pixels=int(region.sum()),
    )
    return found


def score_adherence(image: np.ndarray | PIL.Image.Image, spec_or_prompt: ShapeSpec | str) -> dict:
    """Per-attribute booleans (color, background, position, shape), ``score`` = the main three's mean.

    Also returns what was ``found`` and what was ``expected``.
    """
    spec = parse_prompt(spec_or_prompt) if isinstance(spec_or_prompt, str) else spec_or_prompt
    found = read_image(image)
    result: dict = {attr: found[attr] == getattr(spec, attr) for attr in ALL_ATTRIBUTES}
    result["score"] = sum(result[a] for a in MAIN_ATTRIBUTES) / len(MAIN_ATTRIBUTES)
    result["found"] = found
    result["expected"] = {attr: getattr(spec, attr) for attr in ALL_ATTRIBUTES}
    return result


def summarize(results: Iterable[dict]) -> dict:
    """Accuracy per attribute, the mean score, and the fraction with all three main attributes right."""
    results = list(results)
    if not results:
        raise ValueError("results: nothing to summarize")
    summary = {attr: float(np.mean([r[attr] for r in results])) for attr in ALL_ATTRIBUTES}
    summary["score"] = float(np.mean([r["score"] for r in results]))
    summary["all_three"] = float(np.mean([r["score"] == 1.0 for r in results]))
    summary["n"] = len(results)
    return summary


def evaluate_pipeline(
    pipeline,
    specs: Sequence[ShapeSpec],
    seeds: Sequence[int] | None = None,
    num_inference_steps: int = 28,
    guidance: float = 1.0,
) -> tuple[dict, list[dict]]:
    """Generate one image per spec through ``pipeline.generate_image`` and score each; (summary, rows)."""
    seeds = list(range(len(specs))) if seeds is None else list(seeds)
    rows = []
    for spec, seed in zip(specs, seeds, strict=True):
        out = pipeline.generate_image(
            seed=seed, prompt=spec.prompt, num_inference_steps=num_inference_steps, guidance=guidance
        )
        scored = score_adherence(np.asarray(out.image), spec)
        rows.append({"prompt": spec.prompt, "seed": seed, **scored})
    return summarize(rows), rows


def setup_arg_parser() -> argparse.ArgumentParser:
    parser = arguments.CommandParser(
        prog=PROG, description="Score tiny-shapes on held-out prompts and write the figures into its manifest and card."
    )
    parser.add_argument(
        "--model-dir", type=arguments.path_argument, required=True, help=f"folder with {WEIGHTS_NAME} and its .json"
    )
    parser.add_argument("--n", type=int, default=64, help="held-out prompts, one seed each (default 64)")
    parser.add_argument("--steps", type=int, default=28)
    parser.add_argument("--guidance", type=float, default=1.0)
    parser.add_argument("--prompt-seed", type=int, default=0, help="which held-out prompts (default 0)")
    parser.add_argument("--no-card", action="store_true", help="print the figures, leave the folder alone")
    return parser


def check_arguments(args: argparse.Namespace) -> None:
    """Every argument, before the model loads: a tiny-shapes folder, as many held-out prompts as exist."""
    folder = args.model_dir
    if not folder.is_dir():
        raise InputError(f"--model-dir: {folder} is not a folder with {WEIGHTS_NAME} and {MANIFEST_NAME}")
    arguments.check_input_file(folder / WEIGHTS_NAME, "--model-dir")
    arguments.check_input_file(folder / MANIFEST_NAME, "--model-dir")
    if not args.no_card:
        arguments.check_out_dir(folder, "--model-dir")  # the manifest and the card are rewritten there
    available = len(shapes_data.split_specs("held_out"))
    if not 1 <= args.n <= available:
        raise InputError(f"--n: expected 1 to {available} held-out prompts (that many exist), got {args.n}")
    arguments.check_at_least(args.steps, 1, "--steps")
    arguments.check_guidance(args.guidance)
    arguments.check_at_least(args.prompt_seed, 0, "--prompt-seed")


@command(PROG)
def main(argv: list[str] | None = None) -> int:
    args = setup_arg_parser().parse_args(argv)
    check_arguments(args)
    # heavy (mflux): loaded after the arguments are checked
    from mflux.models.common.config.model_config import ModelConfig

    ModelConfig.precision = mx.float32  # the card's figures are float32 on every backend, as on a CPU
    weights = args.model_dir / WEIGHTS_NAME
    pipeline = shapes.load_tiny_shapes(weights)
    specs = shapes_data.evaluation_specs(args.n, seed=args.prompt_seed)
    start = time.perf_counter()
    summary, rows = evaluate_pipeline(pipeline, specs, num_inference_steps=args.steps, guidance=args.guidance)
    seconds = time.perf_counter() - start
    line = ", ".join(f"{k} {summary[k]:.3f}" for k in (*ALL_ATTRIBUTES, "all_three"))
    print(f"adherence over {len(specs)} held-out prompts ({seconds:.1f} s): {line}")
    if args.no_card:
        return 0
    manifest_path = weights.with_suffix(".json")
    manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    manifest["evaluation"] = {
        "what": "vanilla generate_image, one seed per prompt (seed = index), held-out prompts",
        "n_prompts": len(specs),
        "prompt_seed": args.prompt_seed,
        "num_inference_steps": args.steps,
        "guidance": args.guidance,
        "summary": summary,
        "seconds": seconds,
        "device": device_info(),
        "misses": [
            {"prompt": r["prompt"], "seed": r["seed"], "found": r["found"]}
            for r in rows
            if not all(r[a] for a in ALL_ATTRIBUTES)
        ],
    }
    write_json(manifest_path, manifest)
    write_model_card(args.model_dir)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
