"""SHA-256 manifest of every fixture and checkpoint the tests use: ``python -m tests.manifest --update``.

Entries are files of the repository, plus the parameters of tiny-flux1 built from seed 0 (drawn by
mflux's own classes: a new mflux or MLX release that changes them is an artifact that moved).
"""

from __future__ import annotations

import argparse
import hashlib
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MANIFEST = Path(__file__).with_name("manifest.json")
FILES = (
    "teacache/models/weights/tiny-shapes.safetensors",
    "teacache/models/weights/tiny-shapes.json",
)
TINY_FLUX1 = "tiny-flux1 parameters (seed 0)"


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def tiny_flux1_sha256() -> str:
    import numpy as np
    from mlx.utils import tree_flatten

    import teacache

    model = teacache.load_model("tiny-flux1", seed=0)
    digest = hashlib.sha256()
    for name, value in sorted(tree_flatten(model.transformer.parameters()) + tree_flatten(model.vae.parameters())):
        digest.update(name.encode())
        digest.update(np.asarray(value, dtype=np.float32).tobytes())
    return digest.hexdigest()


def current() -> dict[str, str]:
    entries = {name: file_sha256(ROOT / name) for name in FILES}
    entries[TINY_FLUX1] = tiny_flux1_sha256()
    return entries


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--update", action="store_true", help="rewrite tests/manifest.json")
    args = parser.parse_args()
    entries = current()
    if args.update:
        MANIFEST.write_text(json.dumps(entries, indent=2, sort_keys=True) + "\n")
    print(json.dumps(entries, indent=2, sort_keys=True))


if __name__ == "__main__":
    main()
