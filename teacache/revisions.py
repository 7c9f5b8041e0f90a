"""Pinned Hugging Face revisions of the real models, and what the local cache holds.

A model repo can change under the same name. The drift tests compare the local cache's ``refs/main``
with the pins when the weights are present, so a moved model is reported as an artifact that moved,
not as a wrapper that broke. The pins are facts of the variants and live in the registry
(``VariantSpec.revision``); re-pin there with the commit your calibration used.
"""

from __future__ import annotations

import os
from pathlib import Path

from teacache import variants

PINNED_REVISIONS = variants.pinned_revisions()  # Hugging Face repo -> commit, a view of the registry


def hub_cache() -> Path:
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"])
    home = Path(os.environ.get("HF_HOME", Path.home() / ".cache" / "huggingface"))
    return home / "hub"


def local_revision(repo: str) -> str | None:
    """The commit the local cache's ``refs/main`` points to, or None when the model is not cached."""
    ref = hub_cache() / f"models--{repo.replace('/', '--')}" / "refs" / "main"
    return ref.read_text().strip() if ref.exists() else None
