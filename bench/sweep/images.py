"""The images a sweep keeps (``sweep --save-images``): one PNG per run under ``images/``, named by its run id, as the
runs table's ``image_path`` records it, except for a run whose image is its pair's vanilla image.

A TeaCache run at threshold 0 is a bit-exact no-op: its final latents equal the vanilla run's (max-abs 0) and so
does its decoded image (PSNR inf), so its PNG would be a byte-identical copy of the vanilla one. The sweep does not
write that copy (:func:`shares_vanilla_image` on the row it measured); its row keeps its own ``image_path``, and
every reader takes the pair's vanilla image for it (:func:`image_file`). A threshold-0 run that is not exact (a bug
the noop check exists to catch) keeps its own image. Light: no MLX, no pandas.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path


def shares_vanilla_image(row: Mapping) -> bool:
    """Whether a runs row (a dict or a table row) records a run whose image is its pair's vanilla image: TeaCache at
    threshold 0 with bit-exact final latents (max-abs 0) and an identical decoded image (PSNR inf)."""
    if row["kind"] != "teacache" or float(row["threshold"]) != 0.0:
        return False
    return float(row["max_abs"]) == 0.0 and math.isinf(float(row["psnr"])) and float(row["psnr"]) > 0


def image_file(folder: Path, row: Mapping, vanilla: Mapping) -> Path | None:
    """The file under the sweep folder ``folder`` that holds the image of ``row``'s run: its own (``image_path``),
    or, for a run that shares its pair's vanilla image and has no file of its own, the vanilla run's (``vanilla``:
    the pair's vanilla row). None where the row records no image or neither file is on disk."""
    own = row["image_path"]
    if not isinstance(own, str):
        return None
    if (folder / own).is_file():
        return folder / own
    shared = vanilla["image_path"]
    if shares_vanilla_image(row) and isinstance(shared, str) and (folder / shared).is_file():
        return folder / shared
    return None
