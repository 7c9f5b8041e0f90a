"""The open-scenes models: data recipe, checker, resumable training, and the two committed models."""

from __future__ import annotations

import json

import numpy as np
import pytest

from bench.quality import open_adherence
from teacache.api import apply_teacache
from teacache.models import open_data, open_models
from teacache.models._weights import WeightsError
from teacache.models.open_data import OpenSpec


def test_captions_parse_back_and_the_held_out_split_is_never_drawn():
    for spec in open_data.all_specs():
        assert open_data.parse_prompt(spec.prompt) == spec
    held = set(open_data.split_specs("held_out"))
    assert held and held.isdisjoint(open_data.split_specs("train"))
    drawn = open_data.sample_specs(np.random.default_rng(0), 2000)
    assert not held.intersection(drawn)
    assert 0.5 < np.mean([s.position is not None for s in drawn]) < 0.7  # NAMED_POSITION_SHARE 0.6
    with pytest.raises(ValueError, match="one colour"):
        open_data.parse_prompt("a red blue circle")


def test_any_shape_captions_name_no_shape_and_draw_every_shape():
    captions = open_data.ANY_SHAPE
    for spec in open_data.all_specs(captions):
        assert spec.shape is None and spec.prompt.split()[2] == "shape"
        assert open_data.parse_prompt(spec.prompt, captions=captions) == spec
    held = set(open_data.split_specs("held_out", captions))
    assert held and held.isdisjoint(open_data.split_specs("train", captions))
    with pytest.raises(ValueError, match="unknown word 'circle'"):
        open_data.tokenize("a red circle", "tiny-open-flux1", captions)
    with pytest.raises(ValueError, match="unknown word 'shape'"):
        open_data.tokenize("a red shape")
    assert open_data.captions_of("a red shape at the left") is captions
    assert open_data.captions_of("a red square at the left") is open_data.NAMED_SHAPE
    # the named object's shape is chance: all three come out of one caption (checker on rendered images)
    images = open_data.render_batch([OpenSpec("red", None, "left")] * 24, np.random.default_rng(0), 64)
    found = set()
    for image in images:
        rgb = open_adherence._rgb01(image)
        region = np.linalg.norm(rgb - np.array(open_data.COLORS["red"]) / 255.0, axis=-1) < open_adherence.COLOR_RADIUS
        rows, cols = np.nonzero(region)
        found.add(open_adherence.best_shape(region, cols.mean() + 0.5, rows.mean() + 0.5))
    assert found == set(open_data.SHAPES)
    result = open_adherence.check(images[0], OpenSpec("red", None, "left"))
    assert result["shape"] is None and result["color"] is True
    assert np.isnan(open_adherence.summarize([result])["shape"])
    assert open_adherence.score_adherence(images[0], "a red shape at the left")["score"] == 1.0


def test_named_shape_batches_keep_the_stream_they_were_trained_on():
    """tiny-open-flux2 is reproducible from its seed: a batch of named shapes renders as before open shapes came
    (the SHA-256 of this batch as uint8, computed with the recipe as it was when tiny-open-flux2 was trained)."""
    import hashlib

    specs = open_data.evaluation_specs(24, seed=1) + open_data.sample_specs(np.random.default_rng(4), 40)
    batch = open_data.to_uint8(open_data.render_batch(specs, np.random.default_rng(7), 32))
    assert hashlib.sha256(batch.tobytes()).hexdigest() == (
        "90faec19465f04b22f4e4865ab6b4750f4ef5cffa72996800ab0c6316672fb4a"
    )


def test_one_caption_leaves_the_picture_open_and_the_rng_fixes_it():
    spec = OpenSpec("red", "circle", "left")
    a = open_data.render_batch([spec] * 4, np.random.default_rng(3), 32)
    b = open_data.render_batch([spec] * 4, np.random.default_rng(3), 32)
    assert np.array_equal(a, b)
    assert a.std(axis=0).mean() > 0.2  # images of one caption differ everywhere, not in a few pixels


@pytest.mark.parametrize("size", [32, 64])
def test_the_checker_reads_rendered_images_and_catches_a_moved_or_missing_object(size):
    specs = open_data.evaluation_specs(24, seed=1)
    images = open_data.render_batch(specs, np.random.default_rng(5), size)
    results = [open_adherence.check(open_data.to_uint8(im), s) for im, s in zip(images, specs, strict=True)]
    # measured on 200 rendered held-out captions: colour 99.5 % / 100 %, position 99.5 % / 100 % (32 / 64 px)
    assert open_adherence.summarize(results)["color"] >= 0.95
    named = OpenSpec("green", "square", "left")
    image = open_data.render_batch([named], np.random.default_rng(9), size)[0]
    assert open_adherence.check(image, named)["position"] is True
    mirrored = image[:, ::-1]  # left <-> right
    assert open_adherence.check(mirrored, named)["position"] is False
    grey = np.zeros_like(image)
    assert open_adherence.check(grey, named) == {"color": False, "shape": False, "position": False, "all": False}


def _train(out, *extra):
    from teacache.models import train_open

    argv = ["--family", "flux2", "--steps", "6", "--batch", "4", "--warmup", "2", "--no-compile",
            "--checkpoint-every", "3", "--out", str(out), *extra]  # fmt: skip
    return train_open.main(argv)


def test_a_resumed_training_gives_the_weights_of_an_uninterrupted_one(tmp_path, monkeypatch):
    monkeypatch.setenv("TQDM_DISABLE", "1")
    assert _train(tmp_path / "whole") == 0
    assert _train(tmp_path / "parts", "--time-limit", "1e-9") == 0  # stops after its first step
    assert json.loads((tmp_path / "parts" / "checkpoint" / "progress.json").read_text())["done"] == 1
    assert not (tmp_path / "parts" / "tiny-open-flux2.safetensors").exists()
    assert _train(tmp_path / "parts") == 0
    whole = json.loads((tmp_path / "whole" / "tiny-open-flux2.json").read_text())["weights"]["sha256"]
    parts = json.loads((tmp_path / "parts" / "tiny-open-flux2.json").read_text())["weights"]["sha256"]
    assert whole == parts


def test_a_checkpoint_of_other_settings_is_refused_before_a_model_is_built(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("TQDM_DISABLE", "1")
    assert _train(tmp_path, "--time-limit", "1e-9") == 0
    capsys.readouterr()
    saved = (tmp_path / "checkpoint" / "progress.json").read_bytes()
    monkeypatch.setattr(open_models, "build", lambda *a, **k: pytest.fail("a model was built"))
    assert _train(tmp_path, "--lr", "0.01") == 2
    err = capsys.readouterr().err
    assert "other settings (lr)" in err and len(err.strip().splitlines()) == 1
    assert (tmp_path / "checkpoint" / "progress.json").read_bytes() == saved


@pytest.mark.parametrize("extra", [[], ["--time-limit", "1000"]])
def test_ctrl_c_saves_a_checkpoint_says_so_and_exits_130(tmp_path, monkeypatch, capsys, extra):
    from teacache.models import train_open

    monkeypatch.setenv("TQDM_DISABLE", "1")
    monkeypatch.setattr(train_open.signal, "signal", lambda sig, handler: handler(sig, None))  # Ctrl-C at once
    assert _train(tmp_path, *extra) == 130
    assert "interrupted: checkpoint at step 1" in capsys.readouterr().out
    assert json.loads((tmp_path / "checkpoint" / "progress.json").read_text())["done"] == 1
    assert "interrupted" in (tmp_path / "train.log").read_text()
    assert not (tmp_path / "tiny-open-flux2.safetensors").exists()


@pytest.fixture(scope="module", params=["flux2", "flux1"])
def open_pipeline(request):
    loader = open_models.load_tiny_open_flux2 if request.param == "flux2" else open_models.load_tiny_open_flux1
    kwargs = {"height": 256, "width": 256, "guidance": 5.0} if request.param == "flux1" else {}
    prompt = "a blue shape at the top" if request.param == "flux1" else "a blue triangle at the top"
    return loader(), kwargs, prompt


def test_the_committed_models_load_checked_and_threshold_zero_is_a_no_op(open_pipeline, monkeypatch):
    monkeypatch.setenv("TQDM_DISABLE", "1")
    pipe, kwargs, prompt = open_pipeline
    before = pipe.generate_image(seed=0, prompt=prompt, num_inference_steps=8, **kwargs)
    with apply_teacache(pipe, rel_l1_thresh=0, coefficients=(1.0, 0.0)) as handle:
        wrapped = pipe.generate_image(seed=0, prompt=prompt, num_inference_steps=8, **kwargs)
    after = pipe.generate_image(seed=0, prompt=prompt, num_inference_steps=8, **kwargs)
    assert handle.stats.skipped == 0
    pixels = [np.asarray(out.image) for out in (before, wrapped, after)]
    assert np.array_equal(pixels[0], pixels[1]) and np.array_equal(pixels[0], pixels[2])
    other = pipe.generate_image(seed=1, prompt=prompt, num_inference_steps=8, **kwargs)
    assert not np.array_equal(pixels[0], np.asarray(other.image))


def test_weights_that_do_not_match_the_manifest_are_refused(tmp_path):
    layout = open_models.FAMILIES["flux2"]
    blob = bytearray((layout.folder / layout.weights_name).read_bytes())
    blob[-1] ^= 1
    (tmp_path / layout.weights_name).write_bytes(bytes(blob))
    (tmp_path / layout.manifest_name).write_bytes((layout.folder / layout.manifest_name).read_bytes())
    with pytest.raises(WeightsError, match="does not match its manifest"):
        open_models.load_tiny_open_flux2(tmp_path / layout.weights_name)


def test_the_sweep_scores_open_captions_with_the_open_checker():
    from bench.quality import scorers

    score = scorers.adherence_scorer("tiny-open-flux2")
    spec = OpenSpec("yellow", "square", "right")
    image = open_data.to_uint8(open_data.render_batch([spec], np.random.default_rng(2), 32)[0])
    assert score(image, spec.prompt) > 0.5
    assert score(np.zeros_like(image), spec.prompt) == 0.0


def test_a_run_started_from_weights_records_them_and_never_resumes_a_fresh_runs_checkpoint(
    tmp_path, monkeypatch, capsys
):
    monkeypatch.setenv("TQDM_DISABLE", "1")
    assert _train(tmp_path / "a") == 0
    start = tmp_path / "a" / "tiny-open-flux2.safetensors"
    assert _train(tmp_path / "b", "--time-limit", "1e-9") == 0  # a fresh run's checkpoint
    capsys.readouterr()
    assert _train(tmp_path / "b", "--init", str(start)) == 2  # refused: the checkpoint started from fresh weights
    assert "other settings (init_sha256)" in capsys.readouterr().err
    assert _train(tmp_path / "c", "--init", str(start)) == 0
    record = json.loads((tmp_path / "c" / "tiny-open-flux2.json").read_text())["training"]
    first = json.loads((tmp_path / "a" / "tiny-open-flux2.json").read_text())
    assert record["init_sha256"] == first["weights"]["sha256"]
    assert _train(tmp_path / "d", "--init", str(tmp_path / "none.safetensors")) == 2


def test_a_split_without_unnamed_positions_still_draws_from_itself():
    held = open_data.split_specs("held_out")
    drawn = open_data.sample_specs(np.random.default_rng(0), 200, split="held_out")
    assert set(drawn) <= set(held) and len(drawn) == 200


def test_generate_image_without_guidance_uses_the_variants_own():
    """The README's example passes no guidance: it must get the guidance the calibration was fitted at."""
    from teacache import variants
    from teacache.models import shapes

    pipeline = open_models.load_tiny_open_flux2()
    assert pipeline.default_guidance == variants.get("tiny-open-flux2").generation.guidance == 2.0
    assert shapes.TinyShapesPipeline.default_guidance == variants.get("tiny-shapes").generation.guidance
    seen = []
    original = pipeline._encode_prompt_pair

    def spy(**kwargs):
        seen.append(kwargs["guidance"])
        return original(**kwargs)

    pipeline._encode_prompt_pair = spy
    pipeline.generate_image(seed=0, prompt="a red circle", num_inference_steps=2)
    pipeline.generate_image(seed=0, prompt="a red circle", num_inference_steps=2, guidance=1.0)
    assert seen == [2.0, 1.0]


def test_the_distillation_target_is_the_teachers_guided_velocity():
    """At guidance 1 the target is the teacher's caption branch, at 0 its empty-caption branch, and in
    between the CFG line through both: what one pass of a guidance-distilled FLUX.1 is trained to follow."""
    import mlx.core as mx

    from teacache.models import train_open

    teacher = open_models.build("flux1", seed=1)
    target = train_open.guided_target(teacher, "flux1", batch=2)
    xt = mx.random.normal((2, 256, 64), key=mx.random.key(0))
    captions = open_models.FAMILIES["flux1"].captions
    tokens = mx.array(np.stack([open_data.tokenize("a red shape", "tiny-open-flux1", captions)] * 2))
    sigma = mx.array([0.9, 0.3])
    velocity = open_models.batched_velocity(teacher, "flux1", 2)
    caption = velocity(teacher, xt, tokens, sigma, mx.ones((2,)))
    empty = velocity(teacher, xt, mx.zeros_like(tokens), sigma, mx.ones((2,)))
    for g in (0.0, 1.0, 3.5):
        expected = empty + g * (caption - empty)
        got = target(xt, tokens, sigma, mx.full((2,), g))
        np.testing.assert_allclose(np.array(got), np.array(expected), rtol=0, atol=1e-5)
    assert not np.allclose(np.array(caption), np.array(empty))  # the caption matters to the teacher


@pytest.mark.parametrize(
    ("extra", "named"),
    [(["--distill-guidance"], "--distill-guidance"), (["--guidance-max", "0.5"], "--guidance-max")],
)
def test_distillation_without_a_teacher_or_a_bad_guidance_range_is_refused(tmp_path, monkeypatch, capsys, extra, named):
    monkeypatch.setattr(open_models, "build", lambda *a, **k: pytest.fail("a model was built"))
    assert _train(tmp_path, *extra) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and named in err
    assert not any(tmp_path.iterdir())


def test_a_four_head_flux1_trains_and_loads_from_its_manifest(tmp_path, monkeypatch):
    from teacache.models import train_open

    monkeypatch.setenv("TQDM_DISABLE", "1")
    argv = ["--family", "flux1", "--heads", "4", "--steps", "2", "--batch", "2", "--warmup", "1", "--no-compile",
            "--out", str(tmp_path)]  # fmt: skip
    assert train_open.main(argv) == 0
    manifest = json.loads((tmp_path / "tiny-open-flux1.json").read_text())
    assert (manifest["architecture"]["transformer"]["heads"], manifest["architecture"]["transformer"]["head_dim"]) == (
        4,
        32,
    )
    pipeline = open_models.load_tiny_open_flux1(tmp_path / "tiny-open-flux1.safetensors")
    attention = pipeline.transformer.transformer_blocks[0].attn
    assert (attention.num_heads, attention.head_dimension) == (4, 32)
    assert train_open.main([*argv[:2], "--family", "flux2", "--heads", "4", "--out", str(tmp_path / "x")]) == 2


def test_weights_of_another_vocabulary_start_a_run_word_for_word_and_the_chain_is_recorded(tmp_path, monkeypatch):
    """tiny-open-flux1 moved from named shapes to any shape (--captions any-shape): the earlier weights keep each
    word's rows, the open shape's word starts as the mean of the three shapes', a distillation's teacher starts the
    same way, and the manifest traces every stage back to fresh weights."""
    import mlx.core as mx
    from mlx.utils import tree_flatten

    from teacache.models import train_open

    monkeypatch.setenv("TQDM_DISABLE", "1")
    argv = ["--family", "flux1", "--steps", "2", "--batch", "2", "--warmup", "1", "--no-compile"]
    assert train_open.main([*argv, "--captions", "named-shape", "--out", str(tmp_path / "named")]) == 0
    start = tmp_path / "named" / "tiny-open-flux1.safetensors"
    old, new = open_data.NAMED_SHAPE.vocab, open_data.ANY_SHAPE.vocab
    before = {k: v for k, v in mx.load(str(start)).items() if k.startswith("text_encoder.")}
    layout = open_models.layout_with("flux1", "any-shape")
    model = open_models.build("flux1", architecture=layout.architecture)
    train_open.init_weights(model, start, new)
    for name, table in dict(tree_flatten(model.text_encoder.parameters())).items():
        if table.shape[0] != len(new):
            continue  # the position table
        old_table = np.array(before[f"text_encoder.{name}"])
        assert np.array_equal(np.array(table[new.index("red")]), old_table[old.index("red")])
        shapes = old_table[[old.index(s) for s in open_data.SHAPES]].mean(axis=0)
        np.testing.assert_allclose(np.array(table[new.index("shape")]), shapes, rtol=1e-6)
    distil = [*argv, "--captions", "any-shape", "--distill-guidance", "--init", str(start)]
    assert train_open.main([*distil, "--out", str(tmp_path / "student")]) == 0
    manifest = json.loads((tmp_path / "student" / "tiny-open-flux1.json").read_text())
    assert manifest["data_recipe"]["vocab"] == list(new) and not manifest["data_recipe"]["caption_names_shape"]
    record = manifest["training"]
    assert record["distill_guidance"] and not record["started_from"]["distill_guidance"]
    assert record["started_from"]["steps"] == 2 and record["started_from"]["started_from"] is None
    open_models.load_tiny_open_flux1(tmp_path / "student" / start.name)  # the model's own captions leave it open
    with pytest.raises(WeightsError, match="another vocabulary"):
        open_models.load_tiny_open_flux1(start)  # captions that name the shape


def test_the_card_tells_every_stage_of_the_weights_and_a_start_it_cannot_trace():
    from bench.quality.open_card import _history

    first = {"command": "train A", "steps": 10, "distill_guidance": False, "init_sha256": None, "started_from": None}
    second = {"provenance": {"command": "train B"}, "steps": 5, "distill_guidance": True, "started_from": first}
    assert _history({**first, "provenance": {"command": "train A"}}) == "These weights come from one run."
    told = _history(second)
    assert "`train B` (guidance distillation" in told and told.endswith("after `train A` (flow matching, 10 steps).")
    untraced = _history({"provenance": {"command": "train C"}, "steps": 3, "init_sha256": "ab12", "started_from": None})
    assert "weights with SHA-256 `ab12` (not recorded here)" in untraced
