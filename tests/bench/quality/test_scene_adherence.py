"""tiny-scenes adherence: the rules read the renderer's own images right, and each check fails when it should."""

from __future__ import annotations

import dataclasses
import json
import shutil

import numpy as np
import PIL.Image
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bench.quality import scene_adherence
from bench.quality.scene_adherence import MAIN_CHECKS, MIN_OBJECT_PIXELS, score_adherence, summarize, textures
from teacache.models import scenes_data
from teacache.models.scenes_data import PALETTE, RELATIONS, SHAPES, SIZES, TEXTURES, SceneObject, SceneSpec
from tests.conftest import refused, tree

FLIPPED = {"left": "right", "right": "left", "above": "below", "below": "above"}
OTHER_SIZE = {"small": "big", "big": "small"}


def rendered(spec: SceneSpec, seed: int = 0) -> np.ndarray:
    return scenes_data.to_uint8(scenes_data.render(spec, np.random.default_rng(seed)))


@st.composite
def scenes(draw) -> tuple[SceneSpec, list[str]]:
    """A spec of any attributes, and the palette colours it does not use (for a wrong caption)."""
    colors = draw(st.permutations(list(PALETTE)))

    def an_object(color: str) -> SceneObject:
        return SceneObject(
            draw(st.sampled_from(list(SIZES))), color, draw(st.sampled_from(TEXTURES)), draw(st.sampled_from(SHAPES))
        )

    spec = SceneSpec(an_object(colors[0]), draw(st.sampled_from(list(RELATIONS))), an_object(colors[1]), colors[2])
    return spec, colors[3:]


def failed(result: dict) -> set[str]:
    return {check for check in MAIN_CHECKS if result[check] is False}


def test_rendered_scenes_read_as_fully_adherent():
    rng = np.random.default_rng(11)
    specs = scenes_data.sample_specs(rng, 300, "all")
    images = scenes_data.to_uint8(scenes_data.render_batch(specs, rng))
    rows = [score_adherence(image, spec) for image, spec in zip(images, specs, strict=True)]
    assert summarize(rows) == dict.fromkeys((*MAIN_CHECKS, "all"), 1.0)
    assert textures(rows) == {"objects": 600, "texture": 1.0}
    smallest = min(min(r["found"]["first"]["pixels"], r["found"]["second"]["pixels"]) for r in rows)
    assert smallest >= 3 * MIN_OBJECT_PIXELS  # the threshold is a third of the smallest object or less


@settings(max_examples=60, deadline=None)
@given(scenes(), st.integers(0, 2**32 - 1))
def test_each_wrong_attribute_fails_its_own_check(scene, seed):
    spec, unused = scene
    image = rendered(spec, seed)
    assert score_adherence(image, spec)["score"] == 1.0

    flipped = score_adherence(image, dataclasses.replace(spec, relation=FLIPPED[spec.relation]))
    assert failed(flipped) == {"relation"}

    background = score_adherence(image, dataclasses.replace(spec, background=unused[0]))
    assert failed(background) == {"background"}

    recoloured = score_adherence(
        image, dataclasses.replace(spec, first=dataclasses.replace(spec.first, color=unused[0]))
    )
    size_checked = spec.first.size != spec.second.size
    assert failed(recoloured) == {"first_color", "relation"} | ({"size"} if size_checked else set())

    swapped = dataclasses.replace(
        spec,
        first=dataclasses.replace(spec.first, size=OTHER_SIZE[spec.first.size]),
        second=dataclasses.replace(spec.second, size=OTHER_SIZE[spec.second.size]),
    )
    assert failed(score_adherence(image, swapped)) == ({"size"} if size_checked else set())

    retextured = dataclasses.replace(spec, second=dataclasses.replace(spec.second, texture="plain"))
    result = score_adherence(image, retextured)
    assert result["score"] == 1.0  # texture is reported apart
    assert result["second_texture"] == (spec.second.texture == "plain")


def test_equal_sizes_leave_the_size_check_out_of_the_score():
    prompt = "a small red circle left of a small blue square on a white background"
    image = rendered(scenes_data.parse_prompt(prompt))
    result = score_adherence(image, prompt.replace("left of", "right of"))
    assert result["size"] is None
    assert result["score"] == pytest.approx(3 / 4)


def test_accepts_pil_float_and_uint8_images_and_prompts():
    spec = scenes_data.parse_prompt("a big yellow striped triangle above a small purple circle on a black background")
    image = scenes_data.render(spec, np.random.default_rng(4))
    for form in (image, scenes_data.to_uint8(image), PIL.Image.fromarray(scenes_data.to_uint8(image))):
        assert score_adherence(form, spec.prompt)["score"] == 1.0
    with pytest.raises(ValueError, match="H x W x 3"):
        score_adherence(image[..., 0], spec)


def test_a_colour_painted_as_the_background_is_no_object():
    image = np.full((64, 64, 3), PALETTE["red"], dtype=np.uint8)
    result = score_adherence(image, "a big red circle left of a small blue square on a white background")
    assert result["found"]["background"] == "red"
    assert result["score"] == 0.0


def test_an_object_needs_min_object_pixels():
    spec = scenes_data.parse_prompt("a big red circle left of a small blue square on a white background")
    image = np.full((64, 64, 3), PALETTE["white"], dtype=np.uint8)
    image[20:30, 5:15] = PALETTE["red"]
    blue = np.zeros((64, 64), dtype=bool)
    blue[20:23, 40:44] = True  # 12 px
    image[blue] = PALETTE["blue"]
    assert score_adherence(image, spec)["score"] == 1.0
    image[22, 43] = PALETTE["white"]  # 11 px
    assert failed(score_adherence(image, spec)) == {"second_color", "relation", "size"}


def test_relations_read_y_downwards():
    assert scene_adherence.relation_holds("above", (10.0, 5.0), (10.0, 40.0))
    assert scene_adherence.relation_holds("below", (10.0, 40.0), (10.0, 5.0))
    assert scene_adherence.relation_holds("left", (3.0, 50.0), (30.0, 5.0))
    assert not scene_adherence.relation_holds("right", (3.0, 50.0), (30.0, 5.0))


def test_summary_counts_size_only_where_the_sizes_differ():
    rows = [
        {"background": True, "first_color": True, "second_color": True, "relation": True, "size": None, "score": 1.0},
        {"background": True, "first_color": True, "second_color": False, "relation": False, "size": False,
         "score": 0.4},
        {"background": False, "first_color": True, "second_color": True, "relation": True, "size": True, "score": 0.8},
    ]  # fmt: skip
    summary = summarize(rows)
    assert summary["size"] == 0.5 and summary["all"] == pytest.approx(1 / 3)
    assert summary["background"] == pytest.approx(2 / 3) and summary["first_color"] == 1.0
    assert "size" not in summarize(rows[:1])
    with pytest.raises(ValueError, match="nothing"):
        summarize([])


# ------------------------------------------------------------------------------------------ the command


class RenderingPipeline:
    """Stands in for tiny-scenes: draws exactly what the prompt says, recording how it was called."""

    def __init__(self) -> None:
        self.calls = []

    def generate_image(self, **kwargs):
        self.calls.append(kwargs)
        spec = scenes_data.parse_prompt(kwargs["prompt"])
        image = PIL.Image.fromarray(rendered(spec, kwargs["seed"]))
        return type("Generated", (), {"image": image})()


def test_evaluate_pipeline_generates_seed_by_index_at_the_nominal_size():
    pipeline = RenderingPipeline()
    specs = scenes_data.evaluation_specs(5)
    summary, rows = scene_adherence.evaluate_pipeline(pipeline, specs, steps=4, guidance=2.0)
    assert summary["all"] == 1.0 and [r["seed"] for r in rows] == [0, 1, 2, 3, 4]
    side = scenes_data.NOMINAL_SIZE
    assert pipeline.calls[2] == {
        "seed": 2, "prompt": specs[2].prompt, "num_inference_steps": 4, "height": side, "width": side, "guidance": 2.0,
    }  # fmt: skip


@pytest.fixture
def model_dir(tmp_path):
    """A copy of the packaged manifest beside a stand-in weights file (the load is replaced)."""
    folder = tmp_path / "tiny-scenes"
    folder.mkdir()
    shutil.copy(scene_adherence.DEFAULT_MODEL_DIR / "tiny-scenes.json", folder)
    (folder / "tiny-scenes.safetensors").write_bytes(b"stand-in")
    return folder


def _replace_the_load(monkeypatch, pipeline) -> None:
    from teacache.models import scenes

    monkeypatch.setattr(scenes, "load_tiny_scenes", lambda *_args: pipeline)


def test_the_command_writes_the_evaluation_and_the_card(model_dir, monkeypatch, capsys):
    _replace_the_load(monkeypatch, RenderingPipeline())
    before = json.loads((model_dir / "tiny-scenes.json").read_text())
    assert scene_adherence.main(["--model-dir", str(model_dir), "--prompts", "3", "--steps", "2"]) == 0
    manifest = json.loads((model_dir / "tiny-scenes.json").read_text())
    evaluation = manifest.pop("evaluation")
    assert manifest == {k: v for k, v in before.items() if k != "evaluation"}
    assert evaluation["summary"]["all"] == 1.0 and evaluation["misses"] == []
    assert (evaluation["n_prompts"], evaluation["num_inference_steps"], evaluation["guidance"]) == (3, 2, 3.5)
    assert evaluation["device"]["device_name"]
    card = (model_dir / "MODEL_CARD.md").read_text()
    assert "3 held-out captions" in card and "| all | 100.0% |" in card
    assert "Not evaluated yet" not in card


def test_misses_record_what_was_read(model_dir, monkeypatch):
    class SwappingPipeline(RenderingPipeline):
        def generate_image(self, **kwargs):
            spec = scenes_data.parse_prompt(kwargs["prompt"])
            return super().generate_image(
                **{**kwargs, "prompt": dataclasses.replace(spec, relation=FLIPPED[spec.relation]).prompt}
            )

    _replace_the_load(monkeypatch, SwappingPipeline())
    assert scene_adherence.main(["--model-dir", str(model_dir), "--prompts", "2"]) == 0
    evaluation = json.loads((model_dir / "tiny-scenes.json").read_text())["evaluation"]
    assert evaluation["summary"]["relation"] == 0.0 and evaluation["n_misses"] == 2
    miss = evaluation["misses"][0]
    assert miss["failed"] == ["relation"] and miss["found"]["first"]["pixels"] > 0


def test_ctrl_c_writes_nothing(model_dir, monkeypatch, capsys):
    class Interrupted:
        def generate_image(self, **_kwargs):
            raise KeyboardInterrupt

    _replace_the_load(monkeypatch, Interrupted())
    before = tree(model_dir)
    assert scene_adherence.main(["--model-dir", str(model_dir)]) == 130
    assert "nothing written" in capsys.readouterr().err
    assert tree(model_dir) == before


def test_weights_that_do_not_match_their_manifest_are_refused_in_one_line(model_dir, capsys):
    before = tree(model_dir)
    assert scene_adherence.main(["--model-dir", str(model_dir)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "does not match its manifest" in err[0]
    assert tree(model_dir) == before


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--prompts", "0"], "--prompts: expected at least 1"),
        (["--steps", "0"], "--steps: expected at least 1"),
        (["--guidance", "nan"], "--guidance: expected a finite number"),
        (["--prompts", "many"], "--prompts"),
        (["--model-dir", "no-such-folder"], "--model-dir"),
        (["--model-dir", ""], "--model-dir"),
    ],
)
def test_bad_arguments_are_refused_before_the_model_loads(argv, says, model_dir, tmp_path, monkeypatch, capsys):
    def boom(*_args):
        raise AssertionError("the model loaded before the arguments were checked")

    from teacache.models import scenes

    monkeypatch.setattr(scenes, "load_tiny_scenes", boom)
    line = refused(
        "teacache-bench scene-adherence", ["--model-dir", str(model_dir), *argv], tmp_path, monkeypatch, capsys
    )
    assert says in line


def test_a_folder_without_a_tiny_scenes_manifest_is_refused(model_dir, tmp_path, monkeypatch, capsys):
    manifest = json.loads((model_dir / "tiny-scenes.json").read_text())
    manifest["data_recipe"]["vocab"] = manifest["data_recipe"]["vocab"][:-1]
    (model_dir / "tiny-scenes.json").write_text(json.dumps(manifest))
    line = refused("teacache-bench scene-adherence", ["--model-dir", str(model_dir)], tmp_path, monkeypatch, capsys)
    assert "not a tiny-scenes manifest" in line
    (model_dir / "tiny-scenes.json").unlink()
    line = refused("teacache-bench scene-adherence", ["--model-dir", str(model_dir)], tmp_path, monkeypatch, capsys)
    assert "tiny-scenes.json does not exist" in line


def test_the_default_folder_and_names_are_the_packaged_model():
    from teacache.models import scenes, train_scenes

    assert scene_adherence.DEFAULT_MODEL_DIR == scenes.WEIGHTS_DIR
    assert (scene_adherence.WEIGHTS_NAME, scene_adherence.MANIFEST_NAME) == (
        train_scenes.WEIGHTS_NAME,
        train_scenes.MANIFEST_NAME,
    )
