"""The recipe question for a LoRA: ``drift --model M --against A --lora-paths F --lora-scales ...`` repeats a save made
without the LoRA with it, one question per scale, and judges the saved calibration by its effect.

The LoRAs are written here for tiny-flux2 (the smallest runs the drift tests use); the strong one reaches block 0's
image modulation, whose output is the signal the gate reads, so it changes what the gate decides.
"""

from __future__ import annotations

import json

import pytest

from calib.cli import main as calib_main
from calib.drift import verdict
from teacache import load_model
from teacache.io import file_sha256
from tests.conftest import refused
from tests.lora_files import FLUX1_LAYERS, FLUX2_LAYERS, fitting_lora, layer_sizes, write_lora

MODEL = "tiny-flux2"
SCALES = (0.0, 1.0, 2.0)
STRONG = ("double_stream_modulation_img.linear", *FLUX2_LAYERS)


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    """A save of tiny-flux2 without a LoRA (A), and LoRA files beside it."""
    work = tmp_path_factory.mktemp("drift-lora")
    model = load_model(MODEL)
    write_lora(work / "strong.safetensors", layer_sizes(model, STRONG), seed=0, size=0.3)
    fitting_lora(work / "mild.safetensors", model, FLUX2_LAYERS, seed=1)
    fitting_lora(work / "flux1.safetensors", load_model("tiny-flux1"), FLUX1_LAYERS)
    assert calib_main(["drift", "--model", MODEL, "--save", str(work / "A"), "--out", str(work / "first")]) == 0
    return work


@pytest.fixture(scope="module")
def scales(work):
    """One call for every scale of the strong LoRA, its exit status and its output."""
    out = work / "scales"
    argv = ["drift", "--model", MODEL, "--against", str(work / "A"), "--lora-paths", str(work / "strong.safetensors"),
            "--lora-scales", ",".join(f"{s:g}" for s in SCALES), "--out", str(out)]  # fmt: skip
    return argv, calib_main(argv), json.loads((out / "verdict.json").read_text())


def _answer(work, scale: float) -> dict:
    (found,) = json.loads((work / "scales" / f"lora-scale-{scale:g}" / "verdict.json").read_text())["verdicts"]
    return found


def test_a_list_of_scales_answers_for_each_scale_in_a_folder_of_its_own(work, scales):
    _argv, returncode, report = scales
    assert [q["folder"] for q in report["questions"]] == [f"lora-scale-{s:g}" for s in SCALES]
    assert len(report["verdicts"]) == len(SCALES)
    assert returncode == report["exit_status"] == max(q["exit_status"] for q in report["questions"])
    sha = file_sha256(work / "strong.safetensors")
    for scale, found in zip(SCALES, report["verdicts"], strict=True):
        assert found == _answer(work, scale)
        named = f"strong.safetensors (sha256 {sha[:12]}, scale {scale:g})"
        assert f"at lora none -> {named}" in found["line"], found["line"]
        assert found["effect"]["recipe"]["lora"]["now"][0]["sha256"] == sha
        assert found["effect"]["recipe"]["lora"]["now"][0]["scale"] == scale


def test_scale_zero_holds_with_every_decision_as_saved(work, scales):
    found = _answer(work, 0.0)
    assert found["effect"]["verdict"] == "holds" and found["status"] in (verdict.UNCHANGED, verdict.HOLDS)
    assert all(c["decisions_differ"] == 0 for c in found["effect"]["thresholds"]), found["line"]
    assert "the saved calibration serves this recipe" in found["line"] and found["commands"] == []
    quality = found["effect"]["quality"]  # the same model: the same images with and without the LoRA at scale 0
    assert quality["asked"]["runs"] == quality["as_saved"]["runs"]


def test_a_strong_lora_changes_decisions_and_gets_the_verdict_its_effect_deserves(work, scales):
    found = _answer(work, 2.0)
    changes = found["effect"]["thresholds"]
    assert any(c["decisions_differ"] > 0 for c in changes), found["line"]  # the LoRA is strong enough to matter
    beyond = any(not c["within"] for c in changes) or not found["effect"]["fit"]["within"]
    assert (found["status"] == verdict.REFIT) == beyond, found["line"]
    if found["status"] == verdict.REFIT:  # record with the LoRA, fit, emit beside the fit (the packaged one stays)
        record, _fit, emit = found["commands"]
        assert "--lora-paths " in record and "strong.safetensors --lora-scales 2 --out" in record, record
        assert "--out runs/tiny-flux2-lora-strong-2-mflux-" in emit and emit.endswith(".py"), emit


def test_the_quality_at_the_default_threshold_is_measured_with_and_without_the_lora(work, scales):
    for scale in SCALES:
        quality = _answer(work, scale)["effect"]["quality"]
        assert quality["threshold"] == 0.3  # tiny-flux2's default
        for arm in ("as_saved", "asked"):
            assert quality[arm]["n"] == len(quality[arm]["runs"]) > 0
            assert all(0 < r["ssim"] <= 1 and 0 <= r["skipped"] < quality[arm]["steps"] for r in quality[arm]["runs"])
        assert "at the default threshold 0.3, against vanilla of the same recipe" in _answer(work, scale)["line"]
    # the saved recipe's arm is measured once for all the scales
    assert len(list((work / "scales" / "quality-as-saved" / MODEL).glob("*-s0.json"))) == quality["as_saved"]["n"]


def test_a_stopped_call_resumes_scale_by_scale(work, scales):
    argv, returncode, report = scales
    done = work / "scales" / "lora-scale-0" / "effect" / MODEL
    shared = work / "scales" / "quality-as-saved" / MODEL
    kept = {
        p: p.stat().st_mtime_ns for p in [*done.glob("runs/*.json"), *done.glob("quality/*.json"), *shared.iterdir()]
    }
    lost = next((work / "scales" / "lora-scale-2" / "effect" / MODEL / "quality").glob("*-s0.json"))
    lost.unlink()
    (work / "scales" / "lora-scale-2" / "verdict.json").unlink()
    assert calib_main(argv) == returncode
    assert {p: p.stat().st_mtime_ns for p in kept} == kept  # a finished scale is not run again
    assert lost.is_file()
    again = json.loads((work / "scales" / "verdict.json").read_text())
    assert [v["status"] for v in again["verdicts"]] == [v["status"] for v in report["verdicts"]]


def test_one_scale_is_one_question_in_out_itself(work):
    out = work / "one"
    argv = ["drift", "--model", MODEL, "--against", str(work / "A"), "--lora-paths", str(work / "mild.safetensors"),
            "--out", str(out)]  # fmt: skip
    returncode = calib_main(argv)
    (found,) = json.loads((out / "verdict.json").read_text())["verdicts"]
    assert "lora none -> mild.safetensors" in found["line"] and returncode == (found["status"] == verdict.REFIT)
    assert not list(out.glob("lora-scale-*")) and (out / "effect" / MODEL / "quality").is_dir()


@pytest.mark.parametrize(
    ("flags", "says"),
    [
        (["--lora-paths", "strong.safetensors", "mild.safetensors", "--lora-scales", "0.5,1,1.5"],
         "--lora-scales: 3 scales for 2 LoRA files"),
        (["--lora-paths", "strong.safetensors", "--lora-scales", "1,0.5,1"], "--lora-scales: 1 is given twice"),
        (["--lora-paths", "strong.safetensors", "--lora-scales", "0.5,inf"], "--lora-scales: expected finite"),
        (["--lora-paths", "flux1.safetensors", "--lora-scales", "0.5,1"], "expected a LoRA for FLUX.2"),
        (["--lora-scales", "0.5,1"], "--lora-scales: given without LoRA files"),
    ],
)  # fmt: skip
def test_a_list_of_scales_that_asks_nothing_clear_is_refused(work, monkeypatch, capsys, flags, says):
    argv = ["--model", MODEL, "--against", "A", *flags, "--out", "refused"]
    line = refused("teacache-calib drift", argv, work, monkeypatch, capsys)
    assert says in line, line


def test_a_save_resumes_with_its_own_lora_only(work, monkeypatch, capsys):
    """--against asks the recipe question; --save still records one recording, and resumes no other."""
    lists = ["--model", MODEL, "--save", "B", "--lora-paths", "strong.safetensors", "--lora-scales", "0.5,1"]
    line = refused("teacache-calib drift", [*lists, "--out", "o"], work, monkeypatch, capsys)
    assert "--lora-scales: 2 scale(s) for 1 LoRA file(s); --save records one recording" in line
    other = ["--model", MODEL, "--save", "A", "--lora-paths", "mild.safetensors", "--out", "o"]
    line = refused("teacache-calib drift", other, work, monkeypatch, capsys)
    assert "--save: " in line and "holds another recording of tiny-flux2 (lora differs (saved none, now mild" in line
