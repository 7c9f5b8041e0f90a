"""Where ``teacache-generate`` writes an image and what it writes into it: mflux's metadata, then TeaCache's.

The file name follows mflux (``--output``, ``{seed}`` filled in, ``_1`` appended rather than replacing a file) and
the project's output rule (:mod:`teacache.outputs`: never into tracked files of this checkout). The image and
its ``--metadata`` sidecar are written under temporary names beside their place and renamed into it, so an
interrupted save leaves no partial file.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import tempfile
from pathlib import Path

from calib.generate import Refusal
from calib.run.arguments import shown
from teacache.outputs import Writes, check_in_checkout, check_out_file

WRITES = Writes("teacache-generate")
PREFIX = "teacache_"


SIDECAR = ".metadata.json"  # mflux's --metadata file: the image's name with this suffix


def image_extensions() -> list[str]:
    """The file name endings PIL can save an image as (what mflux's save writes with)."""
    import PIL.Image

    PIL.Image.init()
    return sorted(ext for ext, fmt in PIL.Image.registered_extensions().items() if fmt in PIL.Image.SAVE)


def _name_max(path: Path) -> int:
    """The longest file name the folder that would hold ``path`` takes (255 where the system does not say)."""
    folder = path.parent
    try:
        while not folder.exists() and folder != folder.parent:
            folder = folder.parent
        return os.pathconf(folder, "PC_NAME_MAX")
    except (OSError, ValueError):
        return 255


def given_path(args: argparse.Namespace, seed: int) -> Path:
    """``--output`` with ``{seed}`` filled in; a name that cannot become one image file is refused in one line."""
    try:
        text = args.output.format(seed=seed)
    except (KeyError, IndexError, ValueError) as exc:
        raise Refusal(
            f"--output: {args.output!r}: only {{seed}} may stand in braces ({type(exc).__name__}: {exc})"
        ) from None
    path = Path(text)
    _check_name_length(path)  # first: looking at a name the system cannot hold is an OSError
    if not text.strip() or path.is_dir():
        raise Refusal(
            f"--output: {text!r} is a folder; expected the name of the image to write, e.g. {path / 'image.png'}"
        )
    if path.suffix.lower() not in image_extensions():
        raise Refusal(
            f"--output: {path.name!r} does not end in an image format's extension; expected a name like "
            f"{path.stem or 'image'}.png (or .jpg, .webp, .tiff, ...)"
        )
    return path


def _check_name_length(path: Path, arg: str = "--output") -> None:
    """The image and its sidecar names fit the folder's file system (a name over 255 bytes fails only on save)."""
    limit = _name_max(path)
    folder = next((part for part in path.parent.parts if len(os.fsencode(part)) > limit), None)
    if folder is not None:
        raise Refusal(f"--output: the folder name {shown(folder)} is longer than this file system takes ({limit})")
    longest = max(len(os.fsencode(path.name)), len(os.fsencode(path.stem + SIDECAR)))
    if longest > limit:
        raise Refusal(
            f"--output: {shown(path.name)} is too long a file name ({longest} bytes with its {SIDECAR} sidecar; "
            f"this file system takes at most {limit}); choose a shorter name"
        )


def sidecar_of(path: Path) -> Path:
    return path.with_suffix(SIDECAR)


def output_path(args: argparse.Namespace, seed: int, check: bool = False) -> Path:
    """The path mflux would write this seed's image to, checked by the rule: a new name (mflux's ``_1``, ``_2``)
    when the image exists or, with ``--metadata``, when its sidecar does (mflux checks the image only and would
    replace a sidecar it did not write).

    ``check``: the name is an image file's and fits the file system, and the rule refuses the path the user
    named (not the ``_1`` name made beside a tracked file)."""
    given = given_path(args, seed)
    if check:
        try:
            check_in_checkout(given, "--output", writes=WRITES)
        except ValueError as exc:
            raise Refusal(str(exc)) from None
    metadata = bool(getattr(args, "metadata", False))
    candidate, counter = given, 1
    while candidate.exists() or (metadata and sidecar_of(candidate).exists()):
        candidate = given.with_name(f"{given.stem}_{counter}{given.suffix}")
        counter += 1
    if check:
        _check_name_length(candidate)
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
        f"{PREFIX}rule": record.get("rule", "teacache"),
        f"{PREFIX}threshold": float(record["threshold"]),
        f"{PREFIX}target": target,
        f"{PREFIX}threshold_source": source,
        f"{PREFIX}rescale": record["rescale_source"],
        f"{PREFIX}skip_first_n_steps": record["skip_first_n_steps"],
        f"{PREFIX}skip_last_n_steps": record["skip_last_n_steps"],
        f"{PREFIX}max_consecutive_skips": record["max_consecutive_skips"],
        f"{PREFIX}forecast": bool(record.get("forecast", False)),
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
        lora_paths=getattr(model, "lora_paths", None) or None,
        lora_scales=getattr(model, "lora_scales", None) or None,
    )


def written_facts(model, image) -> dict:
    """The metadata keys that describe the file as written, the same way for every model: ``model`` is the name
    ``--model`` takes (an embedded model's variant, not the Hugging Face repo of the pipeline it is built on), and
    ``width``/``height`` the image's own size (tiny-open-flux1 samples at FLUX.1's nominal 256x256 and decodes
    64x64)."""
    from teacache import variants

    facts = {"width": image.width, "height": image.height}
    name = getattr(model, "teacache_variant", None)
    spec = variants.find(name) if name else None
    if spec is not None and spec.embedded:
        facts["model"] = spec.name
    return facts


@contextlib.contextmanager
def _quiet_info(logger: logging.Logger):
    """``logger`` says only warnings and errors inside the block (mflux's 'saved successfully at' lines name the
    staged file, a folder removed right after; this command's own line names the file written)."""
    level = logger.level
    logger.setLevel(max(level, logging.WARNING))
    try:
        yield
    finally:
        logger.setLevel(level)


def save_image(image, model, args: argparse.Namespace, seed: int, teacache: dict) -> Path:
    """Save with mflux's metadata and the TeaCache keys beside it; returns the path written."""
    from mflux.utils.image_util import ImageUtil

    generated = as_generated_image(image, model, args)
    generated.generation_parameters = {**generated.generation_parameters, **teacache}
    metadata = {**generated._get_metadata(), **written_facts(model, generated.image)}
    path = output_path(args, seed, check=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    # a fixed prefix: the staging folder's name must not be longer than the image's own
    with tempfile.TemporaryDirectory(dir=path.parent, prefix=".teacache-generate-") as tmp:
        staged = Path(tmp) / path.name
        with _quiet_info(logging.getLogger(ImageUtil.__module__)):  # its lines would name the staging folder
            ImageUtil.save_image(generated.image, staged, metadata, args.metadata, overwrite=True)
        sidecar = staged.with_suffix(SIDECAR)
        if sidecar.exists():
            os.replace(sidecar, path.with_suffix(SIDECAR))
        os.replace(staged, path)
    return path
