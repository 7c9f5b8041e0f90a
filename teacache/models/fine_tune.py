"""A stand-in fine-tune: an embedded model with its transformer weights changed reproducibly, saved by mflux.

    python -m teacache.models.fine_tune --model tiny-open-flux1 --noise 0.05 --seed 0 --out runs/fine-tune

A fine-tune is another set of weights for the same architecture, stored the way mflux stores a model
(``Flux1.save_model``: ``transformer/*.safetensors`` and the rest), and loaded back with
``--model FOLDER --base-model tiny-open-flux1`` (in Python, ``load_model(FOLDER, base_model=...)``). To
test that path without training one, each float weight of the transformer moves by ``noise`` times its own
standard deviation times a normal draw from a key of ``seed`` and the weight's name: the same command gives
the same weights. What it changes in the images (and whether a calibration of the base model still serves it)
grows with ``--noise``. Only mflux pipelines can be saved and loaded this way (tiny-open-flux1 is mflux's ``Flux1``).
"""

from __future__ import annotations

from teacache._platform import quiet_transformers

# A command, so it starts here: before mflux imports transformers (importing teacache preloaded OpenBLAS).
quiet_transformers()

# isort: split
import argparse
import contextlib
import hashlib
import math
import sys
from pathlib import Path

import mlx.core as mx
from mlx.utils import tree_flatten, tree_unflatten

from teacache.models import open_models

PROG = "python -m teacache.models.fine_tune"
# embedded models that are mflux pipelines, so mflux can save them: the FLUX.1 open model (mflux's Flux1)
MODELS = (open_models.FAMILIES["flux1"].name,)


def _key(seed: int, name: str) -> mx.array:
    """A random key of the seed and the weight's name: one weight's draw does not depend on the others'."""
    return mx.random.key(int.from_bytes(hashlib.sha256(f"{seed}:{name}".encode()).digest()[:4], "big"))


def perturb(transformer, noise: float, seed: int) -> int:
    """Move each float weight of ``transformer`` by noise x its standard deviation x N(0, 1); returns how many."""
    moved = []
    for name, value in tree_flatten(transformer.parameters()):
        if not mx.issubdtype(value.dtype, mx.floating) or value.size < 2:
            continue
        step = noise * mx.std(value.astype(mx.float32)) * mx.random.normal(value.shape, key=_key(seed, name))
        moved.append((name, (value.astype(mx.float32) + step).astype(value.dtype)))
    transformer.update(tree_unflatten(moved))
    mx.eval(transformer.parameters())
    return len(moved)


def build(model: str, noise: float, seed: int, out: Path):
    """The embedded model with its transformer perturbed, saved by mflux into ``out``; returns the pipeline."""
    from teacache import load_model

    pipeline = load_model(model)
    perturb(pipeline.transformer, noise, seed)
    with contextlib.redirect_stdout(sys.stderr):  # mflux's saver says where it writes: stdout keeps ours
        pipeline.save_model(str(out))
    return pipeline


def setup_arg_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n")[0])
    p.add_argument("--model", choices=MODELS, default=MODELS[0])
    p.add_argument("--noise", type=float, default=0.05, help="each weight moves by this x its standard deviation")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, required=True, help="the folder mflux saves the model into (new or empty)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = setup_arg_parser().parse_args(argv)
    if not (math.isfinite(args.noise) and args.noise >= 0):
        print(f"{PROG}: --noise: expected a finite number >= 0, got {args.noise}", file=sys.stderr)
        return 2
    if args.out.exists() and any(args.out.iterdir()):
        print(f"{PROG}: --out: {args.out} is not empty; expected a new or empty folder", file=sys.stderr)
        return 2
    build(args.model, args.noise, args.seed, args.out)
    files = sorted(args.out.rglob("*.safetensors"))
    print(f"{args.model} with each transformer weight moved by {args.noise:g} x its std (seed {args.seed}): saved "
          f"to {args.out} ({len(files)} safetensors files); load it with --model {args.out} --base-model "
          f"{args.model}")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
