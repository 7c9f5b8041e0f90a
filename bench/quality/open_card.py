"""Evaluate an open-scenes model and write its card: adherence, seed diversity, samples, signal profile.

    teacache-bench open-card --model tiny-open-flux2 [--model-dir DIR] [--traces TRACES] [--prompts 48]

Adherence: ``bench.quality.open_adherence`` on the held-out combinations (never drawn for training) in
turn and on captions of the training split, seed = index, vanilla, the model's own steps and guidance;
the checker's own accuracy on rendered images of the same captions is reported beside it, as its ceiling.
Diversity: one caption, eight seeds; the mean per-pixel spread across seeds, against the same for
rendered images (what the recipe leaves open) and against 0 (a caption that fixes the picture).
The profile: ``bench.report.dynamics`` on the traces given (``teacache-calib record`` output).
Writes samples.png and MODEL_CARD.md into the model folder and the ``evaluation`` section of its manifest.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from bench.quality import open_adherence
from bench.report import dynamics
from calib.run.command import command
from teacache import variants
from teacache.errors import InputError
from teacache.io import atomic_path, write_json, write_text
from teacache.models import open_data, open_models

PROG = "teacache-bench open-card"
NAMES = {layout.name: family for family, layout in open_models.FAMILIES.items()}
DIVERSITY_SPEC = ("red", "circle", "left")  # the caption shown across seeds (its shape word where captions name one)
DIVERSITY_SEEDS = 8
TRAIN_CAPTIONS_SEED = 2027  # the training-split captions scored beside the held-out ones


def setup_arg_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n")[0])
    p.add_argument("--model", choices=sorted(NAMES), required=True)
    p.add_argument("--model-dir", type=Path, help="folder of the weights and manifest (default: the packaged one)")
    p.add_argument("--traces", type=Path, help="traces.parquet recorded from this model, for the profile")
    p.add_argument("--prompts", type=int, default=48, help="captions scored in each set (held out, training)")
    return p


def _generate(pipeline, family: str, prompt: str, seed: int) -> np.ndarray:
    """One vanilla image at the variant's own generation settings (size, steps, guidance)."""
    settings = variants.get(open_models.FAMILIES[family].name).generation
    image = pipeline.generate_image(
        seed=seed,
        prompt=prompt,
        num_inference_steps=settings.steps,
        height=settings.height,
        width=settings.width,
        guidance=settings.guidance,
    ).image
    return np.asarray(image)


def _generation_text(name: str) -> str:
    """The settings every card image is generated with, as the card states them."""
    g = variants.get(name).generation
    return f"{g.steps} steps, guidance {g.guidance}"


def _scores(images: list, specs: list) -> dict[str, float]:
    return open_adherence.summarize([open_adherence.check(im, s) for im, s in zip(images, specs, strict=True)])


def diversity_prompt(captions: open_data.Captions) -> str:
    color, shape, position = DIVERSITY_SPEC
    return open_data.OpenSpec(color, shape if captions.names_shape else None, position).prompt


def _share(value: float) -> str:
    return "not named" if value != value else f"{value:.1%}"  # NaN: no caption names it


def _history(training: dict) -> str:
    """How the weights came to be, stage by stage back to fresh weights (the manifest's ``started_from`` chain)."""
    stages, stage = [], training
    while stage is not None:
        what = "guidance distillation from the stage before" if stage.get("distill_guidance") else "flow matching"
        stages.append(f"`{stage.get('command') or stage['provenance']['command']}` ({what}, {stage['steps']} steps)")
        last, stage = stage, stage.get("started_from")
    if last.get("init_sha256"):  # a start from weights whose own run the manifest does not record
        stages.append(f"a run that made the weights with SHA-256 `{last['init_sha256']}` (not recorded here)")
    if len(stages) == 1:
        return "These weights come from one run."
    return "These weights come from " + ", after ".join(stages) + "."


def spread_across_seeds(images: np.ndarray) -> float:
    """Mean over pixels of the standard deviation across images, in [0, 1] units."""
    return float((images.astype(np.float64) / 255.0).std(axis=0).mean())


def plot_samples(rows: list[list[np.ndarray]], titles: list[str], path: Path) -> None:
    # heavy (matplotlib): loaded only when this runs, and pyplot only after the Agg backend is chosen
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cols = max(len(r) for r in rows)
    fig, axes = plt.subplots(len(rows), cols, figsize=(1.5 * cols, 1.75 * len(rows)), dpi=110, squeeze=False)
    for ax in axes.ravel():
        ax.axis("off")
    for i, (row, row_titles) in enumerate(zip(rows, titles, strict=True)):
        for j, (image, title) in enumerate(zip(row, row_titles, strict=True)):
            axes[i, j].imshow(image, interpolation="nearest")
            axes[i, j].set_title(title, fontsize=6)
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png")
    plt.close(fig)


CARD = """# {name}

A small trained text-to-image model embedded in this package as a test subject for TeaCache: mflux's own
{transformer} trained with flow matching on the open-scenes recipe (`teacache.models.open_data`){distilled}. Its
captions name one object ({names}, and in {named_pct} % of training captions its position); the background's
tone, tint and multi-scale field, a lighting gradient, up to two unnamed objects, every object's texture and
a grain of varying strength are drawn at random. So the model's estimate of the clean image commits during
sampling, as a real model's does, and its output changes from step to step about as much as real models'
(the profile below); the earlier trained models, whose captions fixed the whole picture, changed 10-30x less.

It is a test instrument, not an image generator: figures measured on it say how the toolkit behaves on
realistic step dynamics, not how much TeaCache speeds up a real model.

## Architecture and training

| part | setting |
| --- | --- |
| transformer | {transformer}: `{arch}` |
| text stand-in | learned embeddings of {vocab} words x {text_dim}, {text_len} tokens |
| image | {size}x{size} RGB as latent tokens ({layout}), latents = {scale} x pixels |
| parameters | {params:,} (float32, {bytes:,} bytes) |
| training | `{command}`; {steps} steps x batch {batch}, seed {seed}, AdamW lr {lr}, \
logit-normal sigma (loc {sigma_loc}, scale {sigma_scale}), {dropout:.0%} empty captions |
{init}| final loss | {loss:.4f} (mean of the last {window} steps; {loss_meaning}) |
| trained on | {device}; {versions}; {date} |

Training is resumable: the same command continues from `DIR/checkpoint/` after a time limit or Ctrl-C, and a resumed
run gives the same weights as an uninterrupted one (the data and the noise depend on the seed and the step index
alone). {history}

![training loss](loss.png)

## Prompt adherence

Two sets of {n_prompts} captions, seed = index, {generation}, vanilla, float32 on {eval_device}, scored by
`bench.quality.open_adherence` from pixels alone: the {n_held} held-out combinations (never drawn for training)
in turn, and captions drawn from the training split (new seeds). The checker's accuracy on rendered images of
the same captions is its ceiling:

| check | held out | training captions | rendered (checker's ceiling) |
| --- | ---: | ---: | ---: |
{adherence_rows}

## What the caption leaves open

One caption, "{div_prompt}", {div_seeds} seeds: the mean per-pixel spread across seeds is {div_model:.3f}
(rendered images of the same caption: {div_truth:.3f}; a caption that fixed the picture: 0). The top row of the
samples shows it.

![samples](samples.png)

## Per-step signal profile

{profile}

## Weights

`{weights}`, SHA-256 `{sha}`; the loader refuses a file that does not match it.
"""


@command(PROG)
def main(argv: list[str] | None = None) -> int:
    args = setup_arg_parser().parse_args(argv)
    family = NAMES[args.model]
    layout = open_models.FAMILIES[family]
    folder = args.model_dir or layout.folder
    weights, manifest_path = folder / layout.weights_name, folder / layout.manifest_name
    for path, what in ((weights, "weights"), (manifest_path, "manifest")):
        if not path.is_file():
            raise InputError(f"--model-dir: no {what} file {path}")
    if args.traces is not None and not args.traces.is_file():
        raise InputError(f"--traces: {args.traces} does not exist or is not a file")
    if args.prompts < 1:
        raise InputError(f"--prompts: expected a number >= 1, got {args.prompts}")
    loader = open_models.load_tiny_open_flux1 if family == "flux1" else open_models.load_tiny_open_flux2
    pipeline = loader(weights, manifest_path)
    from teacache.provenance import device_info

    start = time.perf_counter()
    captions = layout.captions
    specs = open_data.evaluation_specs(args.prompts, captions=captions)
    train_specs = open_data.sample_specs(np.random.default_rng(TRAIN_CAPTIONS_SEED), args.prompts, captions=captions)
    generated = [_generate(pipeline, family, s.prompt, i) for i, s in enumerate(specs)]
    scores = _scores(generated, specs)
    train_generated = [_generate(pipeline, family, s.prompt, i) for i, s in enumerate(train_specs)]
    train_scores = _scores(train_generated, train_specs)
    rendered = open_data.render_batch(specs + train_specs, np.random.default_rng(0), layout.image_size)
    ceiling = _scores([open_data.to_uint8(im) for im in rendered], specs + train_specs)
    div_prompt = diversity_prompt(captions)
    spec = open_data.parse_prompt(div_prompt, layout.name, captions)
    seeds = np.stack([_generate(pipeline, family, div_prompt, s) for s in range(DIVERSITY_SEEDS)])
    truth = open_data.to_uint8(
        open_data.render_batch([spec] * DIVERSITY_SEEDS, np.random.default_rng(1), layout.image_size)
    )
    # rows: one caption across seeds; held-out captions; training captions (seed = index)
    rows = [list(seeds), generated[:8], train_generated[:8]]
    titles = [[f"{div_prompt.removeprefix('a ')}\nseed {s}" for s in range(DIVERSITY_SEEDS)]] + [
        [f"{sp.prompt.removeprefix('a ').replace(' at the ', ' ')}\n{what}" for sp in group[:8]]
        for group, what in ((specs, "held out"), (train_specs, "training caption"))
    ]
    plot_samples(rows, titles, folder / "samples.png")
    manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    profile = "No traces given (`--traces`)."
    evaluation = {
        "what": "vanilla generate_image, seed = index, held-out captions, no TeaCache",
        "scorer": "bench.quality.open_adherence",
        "n_prompts": len(specs),
        "held_out_combinations": len(open_data.split_specs("held_out", captions)),
        "adherence": scores,
        "adherence_training_captions": train_scores,
        "checker_on_rendered": ceiling,
        "diversity": {
            "prompt": div_prompt,
            "seeds": DIVERSITY_SEEDS,
            "model": spread_across_seeds(seeds),
            "rendered": spread_across_seeds(truth),
        },  # fmt: skip
        "device": device_info(),
        "seconds": time.perf_counter() - start,
    }
    if args.traces is not None:
        from calib.traces.reader import load_traces

        measured = dynamics.parts(load_traces([args.traces], require=("x_rel_l1", "y_rel_l1")).frame)
        evaluation["profile"] = measured
        prompt_set = variants.get(args.model).campaign_sizes.sweep_prompts
        profile = (f"Recorded with `teacache-calib record --model {args.model} --prompts {prompt_set} --seeds 0,1`"
                   " (8 captions x 2 seeds, 28 steps), medians of y by part of the schedule; the real models' rows are "
                   "mlx-teacache's published traces (`teacache-bench dynamics`):\n\n"
                   + dynamics.markdown({args.model: measured}))  # fmt: skip
    manifest["evaluation"] = evaluation
    write_json(manifest_path, manifest)
    tr, w = manifest["training"], manifest["weights"]
    arch = manifest["architecture"]
    card = CARD.format(
        name=args.model, named_pct=round(100 * open_data.NAMED_POSITION_SHARE),
        names="colour and shape" if captions.names_shape else "its colour; its shape is drawn at random",
        history=_history(tr),
        loss_meaning=("the squared distance from the teacher's guided velocity" if tr.get("distill_guidance")
                      else "the floor is high by design: what the caption leaves open cannot be predicted"),
        distilled=(", then taught to follow its guidance input as FLUX.1-dev does (guidance distillation: one pass at "
                   "guidance g follows the caption as classifier-free guidance at scale g would)"
                   if tr.get("distill_guidance") else ""),
        transformer="FLUX.1 `Transformer`" if family == "flux1" else "`Flux2Transformer`",
        arch=", ".join(f"{k}={v}" for k, v in arch["transformer"].items()), vocab=arch["text_encoder"]["vocab_size"],
        text_dim=arch["text_encoder"]["dim"], text_len=arch["text_encoder"]["text_len"], size=layout.image_size,
        layout=("256 x 64: FLUX.1's 16-channel latent at 32x32, packed 2x2" if family == "flux1"
                else "256 x 12: 2x2 patches"),
        scale=open_data.LATENT_SCALE, params=w["parameters"], bytes=w["bytes"],
        command=tr["provenance"]["command"],
        init=(f"| started from | weights with SHA-256 `{tr['init_sha256']}` (this model's earlier training run) |\n"
              if tr.get("init_sha256") else ""),
        steps=tr["steps"], batch=tr["batch"], seed=tr["seed"], lr=tr["lr"], sigma_loc=tr["sigma_loc"],
        sigma_scale=tr["sigma_scale"], dropout=tr["prompt_dropout"], loss=tr["final_loss"],
        window=tr["final_loss_window"],
        device=tr["provenance"].get("device_name", "?"),
        versions=", ".join(f"{k} {v}" for k, v in tr["provenance"]["versions"].items() if v),
        date=tr["provenance"].get("date_utc", "?"), n_prompts=len(specs),
        eval_device=evaluation["device"].get("device_name", "this machine"),
        generation=_generation_text(layout.name),
        adherence_rows="\n".join(f"| {k} | {_share(scores[k])} | {_share(train_scores[k])} | {_share(ceiling[k])} |"
                                  for k in ("color", "shape", "position", "all")),
        n_held=len(open_data.split_specs("held_out", captions)),
        div_prompt=div_prompt, div_seeds=DIVERSITY_SEEDS, div_model=evaluation["diversity"]["model"],
        div_truth=evaluation["diversity"]["rendered"], profile=profile, weights=layout.weights_name, sha=w["sha256"],
    )  # fmt: skip
    write_text(folder / "MODEL_CARD.md", card)
    print(f"{args.model}: adherence " + ", ".join(f"{k} {v:.3f}" for k, v in scores.items())
          + "; checker on rendered " + ", ".join(f"{k} {v:.3f}" for k, v in ceiling.items())
          + f"; spread across seeds {evaluation['diversity']['model']:.3f}"
          + f" (rendered {evaluation['diversity']['rendered']:.3f})")  # fmt: skip
    print(f"wrote {folder / 'MODEL_CARD.md'}, samples.png, evaluation in {manifest_path.name}")
    return 0
