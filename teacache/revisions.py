"""Pinned Hugging Face revisions of the real models, and what the local cache holds.

A model repo can change under the same name. The drift tests compare the local cache's ``refs/main``
with these pins when the weights are present, so a moved model is reported as an artifact that moved,
not as a wrapper that broke. Pins as recorded by mlx-teacache's tests/hf_revisions.toml (the commits
its FLUX references were made with); re-pin with the commit your calibration used.
"""

from __future__ import annotations

import os
from pathlib import Path

PINNED_REVISIONS = {
    "black-forest-labs/FLUX.1-dev": "3de623fc3c33e44ffbe2bad470d0f45bccf2eb21",
    "black-forest-labs/FLUX.1-schnell": "741f7c3ce8b383c54771c7003378a50191e9efe9",
    "black-forest-labs/FLUX.2-klein-4B": "e7b7dc27f91deacad38e78976d1f2b499d76a294",
}


def hub_cache() -> Path:
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"])
    home = Path(os.environ.get("HF_HOME", Path.home() / ".cache" / "huggingface"))
    return home / "hub"


def local_revision(repo: str) -> str | None:
    """The commit the local cache's ``refs/main`` points to, or None when the model is not cached."""
    ref = hub_cache() / f"models--{repo.replace('/', '--')}" / "refs" / "main"
    return ref.read_text().strip() if ref.exists() else None
