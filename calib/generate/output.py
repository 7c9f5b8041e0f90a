"""Where ``teacache-generate`` writes an image and what it writes into it: mflux's metadata, then TeaCache's.

The file name follows mflux (``--output``, ``{seed}`` filled in, ``_1`` appended rather than replacing a file) and
the project's output rule (:mod:`calib.run.outputs`: never into tracked files of this checkout). The image and
its ``--metadata`` sidecar are written under temporary names beside their place and renamed into it, so an
interrupted save leaves no partial file.
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

from calib.generate import Refusal
from calib.run.outputs import Writes, check_out_file

WRITES = Writes("teacache-generate")
PREFIX = "teacache_"


SIDECAR = ".metadata.json"  # mflux's --metadata file: the image's name with this suffix


def sidecar_of(path: Path) -> Path:
    return path.with_suffix(SIDECAR)


def output_path(args: argparse.Namespace, seed: int, check: bool = False) -> Path:
    """The path mflux would write this seed's image to, checked by the rule: a new name (mflux's ``_1``, ``_2``)
    when the image exists or, with ``--metadata``, when its sidecar does (mflux checks the image only and would
    replace a sidecar it did not write)."""
    path = Path(args.output.format(seed=seed))
    metadata = bool(getattr(args, "metadata", False))
    candidate, counter = path, 1
    while candidate.exists() or (metadata and sidecar_of(candidate).exists()):
        candidate = path.with_name(f"{path.stem}_{counter}{path.suffix}")
        counter += 1
    if check:
        try:
            check_out_file(candidate, "--output", what="image", writes=WRITES)
            if metadata:
                check_out_file(sidecar_of(candidate), "--metadata", what="metadata file", writes=WRITES,
                               beside=str(candidate))  # fmt: skip
        except ValueError as exc:
            raise Refusal(str(exc)) from None
    return candidate


def teacache_metadata(record: dict, skipped: list[int], steps: int) -> dict:
    """The ``teacache_*`` keys: the settings, where the threshold came from, and what the generation skipped."""
    choice = record["choice"]
    if choice is not None:
        source, target = choice.evidence, choice.target
    else:
        source, target = record.get("threshold_source", "--teacache-threshold or the variant's default"), None
    return {
        f"{PREFIX}threshold": float(record["threshold"]),
        f"{PREFIX}target": target,
        f"{PREFIX}threshold_source": source,
        f"{PREFIX}rescale": record["rescale_source"],
        f"{PREFIX}skip_first_n_steps": record["skip_first_n_steps"],
        f"{PREFIX}skip_last_n_steps": record["skip_last_n_steps"],
        f"{PREFIX}max_consecutive_skips": record["max_consecutive_skips"],
        f"{PREFIX}steps": int(steps),
        f"{PREFIX}skipped": len(skipped),
        f"{PREFIX}skipped_steps": [int(s) for s in skipped],
    }


def as_generated_image(image, model, args: argparse.Namespace):
    """mflux's GeneratedImage for what the pipeline returned (an embedded model returns its own image type)."""
    from mflux.models.common.config.model_config import ModelConfig
    from mflux.utils.generated_image import GeneratedImage

    if isinstance(image, GeneratedImage):
        return image
    return GeneratedImage(
        image=image.image,
        model_config=model.model_config,
        seed=image.seed,
        prompt=image.prompt,
        steps=image.steps,
        guidance=image.guidance,
        precision=ModelConfig.precision,
        quantization=args.quantize,
        generation_time=image.generation_time or 0.0,
        height=image.image.height,
        width=image.image.width,
        negative_prompt=image.negative_prompt or None,
    )


def save_image(image, model, args: argparse.Namespace, seed: int, teacache: dict) -> Path:
    """Save with mflux's metadata and the TeaCache keys beside it; returns the path written."""
    from mflux.utils.image_util import ImageUtil

    generated = as_generated_image(image, model, args)
    generated.generation_parameters = {**generated.generation_parameters, **teacache}
    path = output_path(args, seed, check=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=path.parent, prefix=f".{path.name}.") as tmp:
        staged = Path(tmp) / path.name
        ImageUtil.save_image(generated.image, staged, generated._get_metadata(), args.metadata, overwrite=True)
        sidecar = sidecar_of(staged)
        if sidecar.exists():
            os.replace(sidecar, sidecar_of(path))
        os.replace(staged, path)
    return path
