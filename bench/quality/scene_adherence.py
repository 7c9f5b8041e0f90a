"""Prompt adherence of ``tiny-scenes`` images, read from pixel statistics alone (no other model).

Every pixel takes the nearest (Euclidean RGB) of 16 reference colours: the 8 palette colours and their
stripe shades (colour x ``STRIPE_SHADE``); a shade counts as its colour. The checks:

- ``background``: the most common label on the image border is the caption's background.
- ``first_color`` / ``second_color``: among the pixels not of the border's colour, the object's colour
  has an 8-connected region of at least ``MIN_OBJECT_PIXELS`` (12): a third of the smallest object the
  renderer draws (a small triangle, 38 px), a 4x3 patch. On the committed model's 64 evaluation images,
  5 of the 320 colours named nowhere in their caption reach it (the largest 26 px), each a part of a
  misdrawn object (an orange's stripes read as yellow, a white's edge): a colour check passes on a
  partly drawn object, not on scattered pixels. A colour painted as the background is no object.
- ``relation``: both colours found, and the centroid of the first colour's largest region lies on the
  caption's side of the second's: left/right by x, above/below by y (y grows downwards).
- ``size``: only when the caption's sizes differ (else None, not counted): both colours found, and the
  big one's region is wider or taller (the longer side of its bounding box). Extent and not area: a big
  triangle can cover fewer pixels than a small circle (4 of 9,946 rendered pairs), never a shorter side.

``score`` is the share of the applicable checks passed (four, or five with ``size``). Each object's
texture is reported apart, not scored: striped when at least ``STRIPED_SHARE`` of its region is shade.
On 10,000 rendered scenes every check and texture reads right, with room: the centroids at least 14 px
apart along the relation's axis, the extents 2 px apart, a striped object's shade share at least 0.45.

    python -m bench.quality.scene_adherence        # 64 held-out prompts -> tiny-scenes.json + MODEL_CARD.md
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np
import PIL.Image
from scipy import ndimage

from calib.run import arguments
from calib.run.command import command
from teacache.errors import InputError
from teacache.io import project_root, read_json_object, write_json
from teacache.models import scenes_data
from teacache.models.scenes_data import PALETTE, STRIPE_SHADE, SceneObject, SceneSpec, parse_prompt

PROG = "python -m bench.quality.scene_adherence"
MAIN_CHECKS = ("background", "first_color", "second_color", "relation", "size")
MIN_OBJECT_PIXELS = 12
STRIPED_SHARE = 0.25  # rendered: about half of a striped object is shade, none of a plain one
MAX_MISSES_RECORDED = 16
WEIGHTS_NAME = "tiny-scenes.safetensors"
MANIFEST_NAME = "tiny-scenes.json"
PACKAGED_WEIGHTS = project_root() / "teacache" / "models" / "weights"
DEFAULT_MODEL_DIR = PACKAGED_WEIGHTS / Path(WEIGHTS_NAME).stem  # the folder bears the model's name, as its files
_COLOR_NAMES = tuple(PALETTE)
_BASE_RGB = np.array([PALETTE[name] for name in _COLOR_NAMES], dtype=np.float32)
_REFERENCE_RGB = np.concatenate([_BASE_RGB, _BASE_RGB * STRIPE_SHADE])  # colours, then their shades
_EIGHT_NEIGHBOURS = np.ones((3, 3), dtype=bool)


def to_uint8_rgb(image: np.ndarray | PIL.Image.Image) -> np.ndarray:
    """PIL image or uint8 array as is; a float array is read as [-1, 1], as rendered (``to_uint8``)."""
    if isinstance(image, PIL.Image.Image):
        image = image.convert("RGB")
    array = np.asarray(image)
    if array.ndim != 3 or array.shape[-1] != 3:
        raise InputError(f"image: expected H x W x 3, got shape {array.shape}")
    return array if array.dtype == np.uint8 else scenes_data.to_uint8(array)


def reference_labels(image: np.ndarray | PIL.Image.Image) -> tuple[np.ndarray, np.ndarray]:
    """(colour index, is-shade) per pixel: the nearest of the palette colours and their stripe shades."""
    rgb = to_uint8_rgb(image).astype(np.float32)
    nearest = ((rgb[:, :, None, :] - _REFERENCE_RGB[None, None]) ** 2).sum(-1).argmin(-1)
    return nearest % len(_COLOR_NAMES), nearest >= len(_COLOR_NAMES)


def _border(labels: np.ndarray) -> np.ndarray:
    return np.concatenate([labels[0], labels[-1], labels[1:-1, 0], labels[1:-1, -1]])


def _largest_region(mask: np.ndarray) -> np.ndarray:
    regions, count = ndimage.label(mask, structure=_EIGHT_NEIGHBOURS)
    if count <= 1:
        return mask
    return regions == 1 + int(np.bincount(regions.ravel())[1:].argmax())


def _read_object(labels: np.ndarray, shade: np.ndarray, color: int, background: int) -> dict:
    """What one colour's largest region shows: its pixels, centroid (x, y), extent and striped share."""
    region = _largest_region(labels == color) if color != background else np.zeros_like(labels, dtype=bool)
    pixels = int(region.sum())
    read = {"pixels": pixels, "found": pixels >= MIN_OBJECT_PIXELS, "centroid": None, "extent": 0}
    read["striped_share"] = None
    if pixels:
        rows, cols = np.nonzero(region)
        read["centroid"] = (float(cols.mean() + 0.5), float(rows.mean() + 0.5))
        read["extent"] = int(max(np.ptp(rows), np.ptp(cols)) + 1)
        read["striped_share"] = float(shade[region].mean())
    return read


def read_scene(image: np.ndarray | PIL.Image.Image, first_color: str, second_color: str) -> dict:
    """The border's colour and, for each of the two named colours, what its largest region shows."""
    labels, shade = reference_labels(image)
    background = int(np.bincount(_border(labels), minlength=len(_COLOR_NAMES)).argmax())
    return {
        "background": _COLOR_NAMES[background],
        "first": _read_object(labels, shade, _COLOR_NAMES.index(first_color), background),
        "second": _read_object(labels, shade, _COLOR_NAMES.index(second_color), background),
    }


def relation_holds(relation: str, first_xy: tuple[float, float], second_xy: tuple[float, float]) -> bool:
    """Whether the first centroid stands in ``relation`` to the second (image y grows downwards)."""
    (x1, y1), (x2, y2) = first_xy, second_xy
    return {"left": x1 < x2, "right": x1 > x2, "above": y1 < y2, "below": y1 > y2}[relation]


def _size_holds(spec: SceneSpec, first: dict, second: dict) -> bool | None:
    if spec.first.size == spec.second.size:
        return None
    if not (first["found"] and second["found"]):
        return False
    big, small = (first, second) if spec.first.size == "big" else (second, first)
    return big["extent"] > small["extent"]


def _texture_holds(obj: SceneObject, read: dict) -> bool:
    return read["found"] and (read["striped_share"] >= STRIPED_SHARE) == (obj.texture == "striped")


def score_adherence(image: np.ndarray | PIL.Image.Image, spec_or_prompt: SceneSpec | str) -> dict:
    """Each check's bool (``size`` None when the sizes are equal), ``score`` = share of the applicable
    ones passed, the textures (``first_texture``, ``second_texture``, not scored), ``found`` and
    ``expected``."""
    spec = parse_prompt(spec_or_prompt) if isinstance(spec_or_prompt, str) else spec_or_prompt
    found = read_scene(image, spec.first.color, spec.second.color)
    first, second = found["first"], found["second"]
    both = first["found"] and second["found"]
    result: dict = {
        "background": found["background"] == spec.background,
        "first_color": first["found"],
        "second_color": second["found"],
        "relation": both and relation_holds(spec.relation, first["centroid"], second["centroid"]),
        "size": _size_holds(spec, first, second),
    }
    applicable = [result[check] for check in MAIN_CHECKS if result[check] is not None]
    result["score"] = sum(applicable) / len(applicable)
    result["first_texture"] = _texture_holds(spec.first, first)
    result["second_texture"] = _texture_holds(spec.second, second)
    result["found"] = found
    result["expected"] = {
        "background": spec.background,
        "first": spec.first.words,
        "relation": spec.relation,
        "second": spec.second.words,
    }
    return result


def summarize(results: Iterable[dict]) -> dict:
    """Share passed per check (``size`` over the scenes whose sizes differ) and ``all`` (score 1.0)."""
    results = list(results)
    if not results:
        raise ValueError("results: nothing to summarize")
    summary = {}
    for check in MAIN_CHECKS:
        applicable = [r[check] for r in results if r[check] is not None]
        if applicable:
            summary[check] = float(np.mean(applicable))
    summary["all"] = float(np.mean([r["score"] == 1.0 for r in results]))
    return summary


def textures(results: Iterable[dict]) -> dict:
    """Share of objects whose texture reads as the caption says (reported apart from the score)."""
    reads = [r[f"{which}_texture"] for r in results for which in ("first", "second")]
    return {"objects": len(reads), "texture": float(np.mean(reads))}


def evaluate_pipeline(
    pipeline, specs: Sequence[SceneSpec], steps: int = 28, guidance: float = 3.5
) -> tuple[dict, list[dict]]:
    """One image per spec through ``pipeline.generate_image`` (seed = index, the nominal size), each
    scored; (summary, rows)."""
    side = scenes_data.NOMINAL_SIZE
    rows = []
    for seed, spec in enumerate(specs):
        out = pipeline.generate_image(
            seed=seed, prompt=spec.prompt, num_inference_steps=steps, height=side, width=side, guidance=guidance
        )
        rows.append({"prompt": spec.prompt, "seed": seed, **score_adherence(out.image, spec)})
    return summarize(rows), rows


def _miss(row: dict) -> dict:
    """A missed prompt, compactly: which checks failed and what was read back."""
    found = row["found"]

    def brief(read: dict) -> dict:
        centroid = None if read["centroid"] is None else [round(v, 1) for v in read["centroid"]]
        return {"pixels": read["pixels"], "centroid": centroid, "extent": read["extent"]}

    return {
        "prompt": row["prompt"],
        "seed": row["seed"],
        "failed": [check for check in MAIN_CHECKS if row[check] is False],
        "found": {"background": found["background"], "first": brief(found["first"]), "second": brief(found["second"])},
    }


def setup_arg_parser() -> argparse.ArgumentParser:
    parser = arguments.CommandParser(
        prog=PROG, description="Score tiny-scenes on held-out prompts; write the figures into its manifest and card."
    )
    parser.add_argument(
        "--model-dir",
        type=arguments.path_argument,
        default=DEFAULT_MODEL_DIR,
        help=f"folder with {WEIGHTS_NAME} and {MANIFEST_NAME} (default: the packaged model)",
    )
    parser.add_argument("--prompts", type=int, default=64, help="held-out prompts, one seed each")
    parser.add_argument("--steps", type=int, default=28)
    parser.add_argument("--guidance", type=float, default=3.5)
    return parser


def check_arguments(args: argparse.Namespace) -> dict:
    """Every argument, before the model loads; the manifest that will be updated."""
    folder = args.model_dir
    if not folder.is_dir():
        raise InputError(f"--model-dir: {folder} is not a folder with {WEIGHTS_NAME} and {MANIFEST_NAME}")
    arguments.check_input_file(folder / WEIGHTS_NAME, "--model-dir")
    arguments.check_input_file(folder / MANIFEST_NAME, "--model-dir")
    arguments.check_out_dir(folder, "--model-dir")  # the manifest and the card are rewritten there
    arguments.check_at_least(args.prompts, 1, "--prompts")
    arguments.check_at_least(args.steps, 1, "--steps")
    arguments.check_guidance(args.guidance)
    try:
        manifest = read_json_object(folder / MANIFEST_NAME, ValueError)
    except ValueError as exc:
        raise InputError(f"--model-dir: {exc}") from None
    recipe = manifest.get("data_recipe")
    vocab = recipe.get("vocab") if isinstance(recipe, dict) else None
    if vocab != list(scenes_data.VOCAB) or not {"weights", "training"} <= set(manifest):
        raise InputError(
            f"--model-dir: {folder / MANIFEST_NAME} is not a tiny-scenes manifest of this vocabulary "
            "(data_recipe.vocab, weights, training)"
        )
    return manifest


@command(PROG)
def main(argv: list[str] | None = None) -> int:
    args = setup_arg_parser().parse_args(argv)
    manifest = check_arguments(args)
    # heavy (mlx, mflux): loaded after the arguments are checked
    import mlx.core as mx
    from mflux.models.common.config.model_config import ModelConfig

    from teacache.models import scenes
    from teacache.models.train_scenes import write_model_card
    from teacache.provenance import device_info

    ModelConfig.precision = mx.float32  # the card's figures are float32 on every backend, as on a CPU
    try:
        pipeline = scenes.load_tiny_scenes(args.model_dir / WEIGHTS_NAME, args.model_dir / MANIFEST_NAME)
    except scenes.WeightsError as exc:
        raise InputError(f"--model-dir: {exc}") from exc
    specs = scenes_data.evaluation_specs(args.prompts)
    start = time.perf_counter()
    try:
        summary, rows = evaluate_pipeline(pipeline, specs, steps=args.steps, guidance=args.guidance)
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted; nothing written, {args.model_dir} is as it was", file=sys.stderr)
        return arguments.EXIT_INTERRUPTED
    seconds = time.perf_counter() - start
    print(f"adherence over {len(specs)} held-out prompts ({seconds:.1f} s): "
          + ", ".join(f"{k} {v:.3f}" for k, v in summary.items()))  # fmt: skip
    misses = [_miss(row) for row in rows if row["score"] < 1.0]
    manifest["evaluation"] = {
        "what": "vanilla generate_image, one seed per prompt (seed = index), held-out prompts, no TeaCache",
        "scorer": "bench.quality.scene_adherence",
        "n_prompts": len(specs),
        "num_inference_steps": args.steps,
        "guidance": args.guidance,
        "summary": summary,
        "n_size_checked": sum(row["size"] is not None for row in rows),
        "reported_apart": textures(rows),
        "seconds": seconds,
        "device": device_info(),
        "n_misses": len(misses),
        "misses": misses[:MAX_MISSES_RECORDED],
    }
    write_json(args.model_dir / MANIFEST_NAME, manifest)
    card = write_model_card(args.model_dir)
    print(f"wrote the evaluation into {args.model_dir / MANIFEST_NAME} and {card}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
