"""Train an open-scenes model: flow matching on captions that leave most of the picture open.

    python -m teacache.models.train_open --family flux2 --steps 12000 --batch 128 --seed 0 --out DIR
    python -m teacache.models.train_open --family flux1 --steps 9000 --batch 128 --seed 0 --out DIR

``--family flux2`` trains mflux's ``Flux2Transformer`` (the ``tiny-open-flux2`` layout: 32 px, 2x2
patches, 256 tokens x 12); ``--family flux1`` mflux's FLUX.1 ``Transformer`` (``tiny-open-flux1``:
64 px laid out as FLUX.1's 16-channel latent, 256 tokens x 64). Data: ``teacache.models.open_data``.

Resumable: every ``--checkpoint-every`` steps, at ``--time-limit`` seconds and on Ctrl-C the weights,
the optimizer's state and the losses so far go to DIR/checkpoint/ (atomically); the
same command resumes from there, and refuses a checkpoint written with other settings. Batch i is drawn
from ``numpy.random.default_rng([seed, i])``, so the data stream does not depend on where a run stopped
or on the worker processes. Progress goes to the terminal and to DIR/train.log. On the last step it writes
DIR/<name>.safetensors (float32), <name>.json (architecture, data recipe, SHA-256, training record) and
loss.png; ``teacache-bench open-card --model <name> --model-dir DIR`` adds samples, adherence, the signal
profile and MODEL_CARD.md.
"""

from __future__ import annotations

from teacache._platform import quiet_transformers

# A command, so it starts here: before mflux imports transformers (importing teacache preloaded OpenBLAS).
quiet_transformers()

# isort: split
import argparse
import json
import multiprocessing
import signal
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

import mlx.core as mx
import mlx.optimizers as optim
import numpy as np
from mflux.models.common.config.model_config import ModelConfig
from mlx import nn
from mlx.utils import tree_flatten, tree_unflatten

from teacache.io import FORMAT_VERSION, append_log, atomic_path, write_json
from teacache.models import open_data, open_models
from teacache.models.training import (
    add_optimizer_arguments,
    learning_rate,
    parse_arguments,
    plot_loss,
    save_weights,
    training_record,
)

PROG = "python -m teacache.models.train_open"
LOG_NAME = "train.log"
SIGMA_MIN = 0.001
GUIDANCE_RANGE = (1.0, 5.0)  # FLUX.1's guidance input, drawn independently of the image
SETTINGS = ("family", "steps", "batch", "seed", "lr", "warmup", "weight_decay", "sigma_loc", "sigma_scale",
            "prompt_dropout", "no_compile", "init_sha256", "distill_guidance", "guidance_max", "heads",
            "captions")  # fmt: skip


def setup_arg_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n")[0])
    p.add_argument("--family", choices=sorted(open_models.FAMILIES), required=True)
    add_optimizer_arguments(p, steps=10000, batch=128, lr=1e-3, warmup=200)
    p.add_argument("--sigma-loc", type=float, default=0.0, help="logit-normal location of the sigmas")
    p.add_argument("--sigma-scale", type=float, default=1.2, help="logit-normal scale of the sigmas")
    p.add_argument("--prompt-dropout", type=float, default=0.1, help="share of empty captions (for CFG)")
    p.add_argument("--workers", type=int, default=0, help="processes drawing batches (0: in this process)")
    p.add_argument("--time-limit", type=float, default=0.0, help="checkpoint and stop after this many s (0: none)")
    p.add_argument("--checkpoint-every", type=int, default=1000)
    p.add_argument(
        "--no-compile",
        action="store_true",
        help="run the training step uncompiled (FLUX.1 on CUDA: its first compiled step takes 250-300 s, so a run "
        "of under ~10 minutes trains more steps uncompiled; results/cuda-nvidia-h200/flux1-layout-study)",
    )
    p.add_argument("--init", type=Path, help="start from these weights (a model of this family) instead of fresh ones")
    p.add_argument(
        "--distill-guidance",
        action="store_true",
        help="FLUX.1-dev's guidance distillation (--family flux1, needs --init): the target is the --init model's "
        "classifier-free guided velocity at the scale the guidance input names, so one pass follows the caption "
        "as CFG would",
    )
    p.add_argument(
        "--heads",
        type=int,
        choices=(1, 4),
        help="--family flux1: attention heads at the same width 128 (1 of 128, FLUX.1's head width; 4 of 32)",
    )
    p.add_argument("--guidance-max", type=float, default=GUIDANCE_RANGE[1], help="largest guidance drawn (1..this)")
    p.add_argument(
        "--captions",
        choices=sorted(open_models.CAPTIONS),
        help="what the captions name (default: the model's own): any-shape leaves the shape open as well "
        "(open_data.ANY_SHAPE, its own vocabulary; weights of another vocabulary start word for word)",
    )
    p.add_argument("--out", type=Path, required=True, help="output folder")
    p.set_defaults(samples=0)
    return p


def draw_batch(
    index: int,
    seed: int,
    batch: int,
    family: str,
    dropout: float,
    captions: str | None = None,
    render: Callable = open_data.render_batch,
) -> tuple[np.ndarray, np.ndarray]:
    """Batch ``index`` of the train split: latent tokens and caption ids (a share of them empty). ``render``
    draws the images of the specs (``train_lora``'s styles render the same specs otherwise, from the same rng)."""
    rng = np.random.default_rng([seed, index])
    layout = open_models.layout_with(family, captions)
    specs = open_data.sample_specs(rng, batch, split="train", captions=layout.captions)
    tokens = layout.to_tokens(render(specs, rng, layout.image_size))
    captions = np.stack([open_data.tokenize(s.prompt, layout.name, layout.captions) for s in specs])
    captions[rng.random(batch) < dropout] = 0  # all padding = the empty prompt
    return tokens.astype(np.float32), captions


def architecture(args: argparse.Namespace) -> dict:
    """The layout's architecture, with ``--heads`` (flux1: at width 128, each head 128 / heads wide)."""
    arch = open_models.layout_with(args.family, args.captions).architecture
    if args.heads is None:
        return arch
    width = arch["transformer"]["width"]
    return {**arch, "transformer": {**arch["transformer"], "heads": args.heads, "head_dim": width // args.heads}}


def manifest_beside(weights: Path) -> dict | None:
    """The manifest train_open wrote beside ``weights`` (None: none there, e.g. a checkpoint's exported weights)."""
    manifest = weights.with_suffix(".json")
    return json.loads(manifest.read_text(encoding="utf-8")) if manifest.exists() else None


def init_weights(model: nn.Module, path: Path, vocab: tuple[str, ...]) -> None:
    """Load ``path`` into ``model``. Weights trained on another vocabulary (the manifest beside them names it)
    keep each word's rows; a word they lack starts as the mean of the nouns they had (the open shape's
    word thus starts as the mean of the three shapes')."""
    arrays = mx.load(str(path))
    manifest = manifest_beside(path)
    old_vocab = manifest["data_recipe"]["vocab"] if manifest else None
    if old_vocab is not None and tuple(old_vocab) != vocab:
        fresh = dict(tree_flatten(model.parameters()))
        nouns = [old_vocab.index(w) for w in open_data.SHAPES + (open_data.OPEN_SHAPE_WORD,) if w in old_vocab]
        for name, table in list(arrays.items()):
            if name.startswith("text_encoder.") and table.shape[0] == len(old_vocab) and name in fresh:
                rows = [table[old_vocab.index(w)] if w in old_vocab else table[nouns].mean(axis=0) for w in vocab]
                arrays[name] = mx.stack(rows)
    model.load_weights(list(arrays.items()), strict=True)


def earlier_training(init: Path) -> dict | None:
    """What the manifest beside ``--init`` says of the run that made those weights (and of its own start),
    so a model's card can trace every stage back to fresh weights; None when no manifest lies beside them."""
    manifest = manifest_beside(init)
    if manifest is None:
        return None
    training = manifest["training"]
    keep = ("steps", "batch", "lr", "seed", "prompt_dropout", "distill_guidance", "final_loss", "init_sha256")
    return {
        **{k: training.get(k) for k in keep},
        "command": training["provenance"]["command"],
        "date_utc": training["provenance"].get("date_utc"),
        "device_name": training["provenance"].get("device_name"),
        "started_from": training.get("started_from"),
    }


def guided_target(teacher: nn.Module, family: str, batch: int) -> Callable:
    """``f(xt, token_ids, sigma, guidance) -> v_empty + guidance (v_caption - v_empty)`` of the frozen
    teacher, both branches in one call: the velocity CFG at that scale would follow."""
    velocity = open_models.batched_velocity(teacher, family, 2 * batch)

    def target(xt, token_ids, sigma, guidance):
        teacher.set_batch_size(2 * batch)  # FLUX.1's attention keeps a batch size: the teacher's is twice ours
        both = velocity(teacher, mx.concatenate([xt, xt]), mx.concatenate([token_ids, mx.zeros_like(token_ids)]),
                        mx.concatenate([sigma, sigma]), mx.ones((2 * batch,)))  # fmt: skip
        caption, empty = both[:batch], both[batch:]
        return mx.stop_gradient(empty + guidance[:, None, None] * (caption - empty))

    return target


def make_train_step(model: nn.Module, optimizer: optim.Optimizer, args: argparse.Namespace, teacher=None):
    """One optimizer step; sigma, guidance and noise are drawn from the step's own key (so a resumed run
    draws what an uninterrupted one would). With a teacher the target is its guided velocity, not eps - x0."""
    velocity = open_models.batched_velocity(model, args.family, args.batch)
    guided = guided_target(teacher, args.family, args.batch) if teacher is not None else None

    def loss_fn(model, x0, token_ids, sigma, guidance, eps):
        s = sigma[:, None, None]
        xt = (1.0 - s) * x0 + s * eps
        target = guided(xt, token_ids, sigma, guidance) if guided is not None else eps - x0
        return mx.mean((velocity(model, xt, token_ids, sigma, guidance) - target) ** 2)

    loss_and_grad = nn.value_and_grad(model, loss_fn)

    def step(x0: mx.array, token_ids: mx.array, key: mx.array) -> mx.array:
        n = x0.shape[0]
        k_sigma, k_guidance, k_eps = mx.random.split(key, 3)
        z = mx.random.normal((n,), key=k_sigma)
        sigma = mx.clip(mx.sigmoid(z * args.sigma_scale + args.sigma_loc), SIGMA_MIN, 1.0)
        guidance = mx.random.uniform(GUIDANCE_RANGE[0], args.guidance_max, (n,), key=k_guidance)
        eps = mx.random.normal(x0.shape, key=k_eps)
        loss, grads = loss_and_grad(model, x0, token_ids, sigma, guidance, eps)
        optimizer.update(model, grads)
        return loss

    state = [model.state, optimizer.state] + ([teacher.state] if teacher is not None else [])
    if args.no_compile:
        return step, state
    return partial(mx.compile, inputs=state, outputs=state)(step), state


def _say(log: Path, line: str) -> None:
    """A progress line on the terminal and, timestamped, in the output folder's log."""
    print(line, flush=True)
    append_log(log, line)


def step_key(seed: int, index: int) -> mx.array:
    """The random key of training step ``index``: sigma, guidance and noise depend on (seed, index) alone."""
    return mx.random.key(seed * 1_000_003 + index)


class Checkpoint:
    """DIR/checkpoint/: state.safetensors (weights and optimizer state) and progress.json."""

    def __init__(self, out: Path, settings: dict) -> None:
        self.dir = out / "checkpoint"
        self.settings = settings

    def _saved(self) -> dict | None:
        progress = self.dir / "progress.json"
        return json.loads(progress.read_text(encoding="utf-8")) if progress.exists() else None

    def mismatch(self) -> str | None:
        """One line naming the settings a checkpoint in DIR was written with otherwise, or None (none, or same)."""
        saved = self._saved()
        if saved is None or saved["settings"] == self.settings:
            return None
        changed = sorted(k for k in self.settings if saved["settings"].get(k) != self.settings[k])
        return (f"--out: {self.dir} was written with other settings ({', '.join(changed)}); resume with the same "
                "ones or use another --out")  # fmt: skip

    def load(self, model: nn.Module, optimizer: optim.Optimizer) -> tuple[int, list[float]] | None:
        """(steps done, losses) of the checkpoint in DIR, its weights and optimizer state loaded; None: none."""
        saved = self._saved()
        if saved is None:
            return None
        arrays = mx.load(str(self.dir / "state.safetensors"))
        model.update(tree_unflatten([(k[6:], v) for k, v in arrays.items() if k.startswith("model.")]))
        optimizer.state = tree_unflatten([(k[10:], v) for k, v in arrays.items() if k.startswith("optimizer.")])
        return saved["done"], saved["losses"]

    def save(self, model: nn.Module, optimizer: optim.Optimizer, done: int, losses: list[float]) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        arrays = {f"model.{k}": v for k, v in tree_flatten(model.parameters())}
        arrays |= {f"optimizer.{k}": v for k, v in tree_flatten(optimizer.state)}
        with atomic_path(self.dir / "state.safetensors") as tmp:
            # MLX appends ".safetensors" to a name without it: write under that name, then move it to tmp
            mx.save_safetensors(str(tmp.with_suffix(".safetensors")), arrays)
            tmp.with_suffix(".safetensors").replace(tmp)
        write_json(self.dir / "progress.json", {"settings": self.settings, "done": done, "losses": losses})


def train(args: argparse.Namespace, checkpoint: Checkpoint) -> tuple[nn.Module, list[float], dict, str | None]:
    """The model, every step's loss, timings, and why it stopped early ("interrupted", "time limit"; None: done)."""
    mx.random.seed(args.seed)
    layout = open_models.layout_with(args.family, args.captions)
    model = open_models.build(args.family, seed=args.seed, architecture=architecture(args))
    if args.init is not None:
        init_weights(model, args.init, layout.captions.vocab)
    mx.eval(model.parameters())
    optimizer = optim.AdamW(learning_rate=learning_rate(args), weight_decay=args.weight_decay)
    optimizer.init(model.trainable_parameters())
    resumed = checkpoint.load(model, optimizer)
    done, losses = resumed or (0, [])
    mx.eval(model.parameters(), optimizer.state)
    teacher = None
    if args.distill_guidance:
        teacher = open_models.build(args.family, seed=args.seed, architecture=layout.architecture)  # its own heads
        init_weights(teacher, args.init, layout.captions.vocab)  # word for word, as the student starts
        teacher.freeze()
        mx.eval(teacher.parameters())
    step, state = make_train_step(model, optimizer, args, teacher)
    name = layout.name
    say = partial(_say, args.out / LOG_NAME)
    say(f"{name}: {open_models.parameter_count(model) / 1e6:.2f} M parameters on {mx.default_device()}, "
        f"steps {done}..{args.steps} x {args.batch}" + (" (resumed)" if resumed else ""))  # fmt: skip
    draw = partial(draw_batch, seed=args.seed, batch=args.batch, family=args.family, dropout=args.prompt_dropout,
                   captions=args.captions)  # fmt: skip
    pool = multiprocessing.get_context("spawn").Pool(args.workers) if args.workers > 0 else None
    batches = pool.imap(draw, range(done, args.steps), chunksize=2) if pool else map(draw, range(done, args.steps))
    stop = {"signal": False}
    signal.signal(signal.SIGINT, lambda *_: stop.update(signal=True))
    start = time.perf_counter()
    first_step = None
    pending = None
    try:
        for i, (x0, tokens) in zip(range(done, args.steps), batches, strict=False):
            loss = step(mx.array(x0), mx.array(tokens), step_key(args.seed, i))
            mx.async_eval(state, loss)
            if pending is not None:
                losses.append(pending.item())
                first_step = first_step or time.perf_counter() - start
            pending = loss
            done = i + 1
            elapsed = time.perf_counter() - start
            if done % 250 == 0:
                say(f"{name}: step {done}/{args.steps} loss {np.mean(losses[-250:]):.4f} {elapsed:.0f} s")
            over_time = args.time_limit and elapsed > args.time_limit
            if done < args.steps and (done % args.checkpoint_every == 0 or over_time or stop["signal"]):
                losses.append(pending.item())
                pending = None
                checkpoint.save(model, optimizer, done, losses)
                if over_time or stop["signal"]:
                    why = "interrupted" if stop["signal"] else "time limit"
                    say(f"{name}: {why}: checkpoint at step {done} in {checkpoint.dir}; the same command resumes")
                    return model, losses, {}, why
    finally:
        if pool:
            pool.terminate()
    if pending is not None:
        losses.append(pending.item())
    mx.eval(state)
    timing = {"wall_time_s_last_session": time.perf_counter() - start, "first_step_s_last_session": first_step}
    return model, losses, timing, None


def main(argv: list[str] | None = None) -> int:
    argv, args = parse_arguments(setup_arg_parser(), argv, PROG)
    if args is None:
        return 2
    args.init_sha256 = None
    if args.distill_guidance and (args.family != "flux1" or args.init is None):
        print(f"{PROG}: --distill-guidance: needs --family flux1 (guidance as an input) and --init (the teacher)",
              file=sys.stderr)  # fmt: skip
        return 2
    if args.heads is not None and (args.family != "flux1" or args.distill_guidance):
        print(f"{PROG}: --heads: only for --family flux1 trained on data (the teacher of --distill-guidance "
              "keeps its own)", file=sys.stderr)  # fmt: skip
        return 2
    if not 1.0 < args.guidance_max <= 20.0:
        print(f"{PROG}: --guidance-max: expected a number in (1, 20], got {args.guidance_max}", file=sys.stderr)
        return 2
    if args.init is not None:
        if not args.init.is_file():
            print(f"{PROG}: --init: {args.init} does not exist or is not a file", file=sys.stderr)
            return 2
        from teacache.io import file_sha256

        args.init_sha256 = file_sha256(args.init)
    checkpoint = Checkpoint(args.out, {k: getattr(args, k) for k in SETTINGS})
    mismatch = checkpoint.mismatch()
    if mismatch:  # before any model is built
        print(f"{PROG}: {mismatch}", file=sys.stderr)
        return 2
    ModelConfig.precision = mx.float32  # trained in float32 on every backend
    layout = open_models.layout_with(args.family, args.captions)
    model, losses, timing, stopped = train(args, checkpoint)
    if stopped is not None:
        return 130 if stopped == "interrupted" else 0
    weights = save_weights(model, args.out / layout.weights_name, layout.name, layout.captions.version)
    training = training_record(args, losses, timing, "teacache.models.train_open", argv, family=args.family,
                               prompt_dropout=args.prompt_dropout, distill_guidance=args.distill_guidance,
                               guidance_range=[GUIDANCE_RANGE[0], args.guidance_max],
                               init_sha256=args.init_sha256,
                               started_from=earlier_training(args.init) if args.init else None)  # fmt: skip
    print(f"{layout.name}: final loss {training['final_loss']:.4f} (last {training['final_loss_window']} steps)")
    manifest = {
        "format_version": FORMAT_VERSION,
        "name": layout.name,
        "weights": weights,
        "architecture": architecture(args),
        "data_recipe": open_data.recipe(layout.image_size, layout.captions),
        "sampling": open_models.sampling_record(args.family),
        "training": training,
        "evaluation": None,
    }
    write_json(args.out / layout.manifest_name, manifest)
    plot_loss(losses, args.out / "loss.png", f"{layout.name} training loss")
    print(f"wrote {args.out / layout.weights_name} ({weights['bytes']:,} bytes, sha256 {weights['sha256']})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
