"""What every way of measuring a (prompt, seed) pair shares: its saved images (:mod:`bench.sweep.images`) and its
proxy-noop run.

The plain threshold sweep (:mod:`bench.sweep.command`) and the sweep with baseline arms
(:mod:`bench.sweep.arms`) write the same rows through these, so their tables name and measure alike.
"""

from __future__ import annotations

import dataclasses
import warnings
from pathlib import Path

import mlx.core as mx
import numpy as np

from bench.quality.metrics import image_metrics, latent_metrics
from bench.sweep.images import shares_vanilla_image
from calib.run.generation import generate
from teacache import apply_teacache
from teacache.io import atomic_path


def proxy_noop(model, args, config, ref, base: dict) -> dict:
    """The proxy fully active (signal, decision, residual) with every step forced to compute.

    Where the integration re-walks the forward or swaps a compiled predict for an uncompiled one,
    this measures how far that execution path alone moves the result (oracle 3 of the test pyramid).
    """
    steps = base["num_steps"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with apply_teacache(model, config=dataclasses.replace(config, skip_first_n_steps=steps)) as handle:
            gen = generate(model, *args)
    assert handle.stats.skipped == 0
    return {
        **base,
        "run_id": f"{base['pair_id']}-proxy-noop",
        "kind": "proxy-noop",
        "bit_exact": bool(mx.array_equal(gen.latents, ref.latents).item()),
        "wall_s_median": gen.loop_s,
        **latent_metrics(gen.latents, ref.latents),
        **image_metrics(gen.image, ref.image),
    }


def save_image(images_dir: Path | None, name: str, image: np.ndarray) -> str | None:
    """The image under ``images_dir`` (upscaled to about 256 px, nearest), as the path a row records."""
    if images_dir is None:
        return None
    from PIL import Image  # heavy: imported when an image is saved, so a bad argument is refused at once

    path = images_dir / f"{name}.png"
    scale = max(1, 256 // max(image.shape[:2]))
    with atomic_path(path) as tmp:
        Image.fromarray(image).resize((image.shape[1] * scale, image.shape[0] * scale), Image.NEAREST).save(
            tmp, format="PNG"
        )
    return _recorded(path)


def save_run_image(images_dir: Path | None, row: dict, image: np.ndarray, vanilla: np.ndarray) -> str | None:
    """:func:`save_image` for the run of ``row`` (its measured fields), named by its run id; the path its row records.

    A run that shares its pair's vanilla image (:func:`bench.sweep.images.shares_vanilla_image`, and its decoded
    image equal to ``vanilla``) gets no file of its own: the copy would be byte-identical. One an earlier run of it
    left goes, so that readers take the vanilla image. Its row names its own file all the same.
    """
    if images_dir is not None and shares_vanilla_image(row) and np.array_equal(image, vanilla):
        path = images_dir / f"{row['run_id']}.png"
        path.unlink(missing_ok=True)
        return _recorded(path)
    return save_image(images_dir, row["run_id"], image)


def _recorded(path: Path) -> str:
    return str(Path("images") / path.name)
