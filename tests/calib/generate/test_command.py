"""``teacache-generate`` on the embedded models: a target becomes a threshold, the image says what was skipped,
mflux's own flags pass through, and bad input is refused before any model loads."""

from __future__ import annotations

import json
import logging
import re

import piexif
import PIL.Image
import pytest

from calib.generate import arguments, command, families

PROMPT = "a red circle on a blue background at the left"


def metadata(path) -> dict:
    raw = piexif.load(PIL.Image.open(path).info["exif"])["Exif"][piexif.ExifIFD.UserComment]
    return json.loads(raw[8:].decode("utf-8"))


def test_a_speedup_target_gives_the_skips_it_asks_for_and_the_image_says_so(tmp_path, capsys):
    out = tmp_path / "x.png"
    rc = command.main(["--model", "tiny-shapes", "--prompt", PROMPT, "--teacache-speedup", "2", "--seed", "0",
                       "--output", str(out)])  # fmt: skip
    assert rc == 0
    meta = metadata(out)
    assert meta["prompt"] == PROMPT and meta["steps"] == 28  # mflux's own keys
    assert abs(meta["teacache_skipped"] - 28 / 2) <= 1
    assert len(meta["teacache_skipped_steps"]) == meta["teacache_skipped"]
    assert meta["teacache_threshold"] > 0 and meta["teacache_target"] == "speedup 2x at 28 steps"
    assert "traces.parquet" in meta["teacache_threshold_source"]
    assert meta["teacache_rescale"].startswith("packaged")
    steps = ", ".join(map(str, meta["teacache_skipped_steps"]))
    assert f"skipped {meta['teacache_skipped']} of 28 (steps {steps})" in capsys.readouterr().out


def test_mflux_flags_pass_through_seeds_sidecar_and_existing_files_are_never_replaced(tmp_path):
    out = tmp_path / "img.png"
    out.write_bytes(b"keep")
    prompt = "a red shape at the left"
    rc = command.main(["--model", "tiny-open-flux1", "--prompt", prompt, "--teacache-threshold", "0.5", "--seed", "1",
                       "--steps", "20", "--metadata", "--output", str(out)])  # fmt: skip
    assert rc == 0
    assert out.read_bytes() == b"keep"  # mflux's rule: a new name instead
    written = tmp_path / "img_1.png"
    sidecar = json.loads(written.with_suffix(".metadata.json").read_text())
    assert sidecar["seed"] == 1 and sidecar["steps"] == 20 and sidecar["teacache_steps"] == 20
    assert sidecar["teacache_threshold"] == 0.5 and sidecar["teacache_threshold_source"] == "--teacache-threshold"
    assert sidecar["teacache_skipped"] > 0


def test_the_messages_name_the_files_written_not_the_staging_folder(tmp_path, caplog, capsys):
    caplog.set_level(logging.INFO)
    out = tmp_path / "img.png"
    rc = command.main(["--model", "tiny-shapes", "--prompt", PROMPT, "--seed", "1", "--steps", "4", "--metadata",
                       "--output", str(out)])  # fmt: skip
    assert rc == 0 and out.is_file() and out.with_suffix(".metadata.json").is_file()
    said = caplog.text + "".join(capsys.readouterr())
    assert ".teacache-generate-" not in said and f"saved {out}" in said, said


def _shape(action) -> tuple:
    """What an option does, comparable across two builds of a parser (types by name: some are lambdas)."""
    kind = getattr(action.type, "__qualname__", action.type)
    return type(action).__name__, action.dest, action.default, action.nargs, kind, action.choices, action.required


@pytest.mark.parametrize("family", sorted(families.COMMANDS))
def test_every_option_of_mflux_s_own_parser_is_kept_as_mflux_defines_it(family):
    from teacache import variants

    spec = next(s for s in variants.all_specs() if s.family == family and not s.embedded)
    ours = arguments.build_parser(spec)
    theirs = families.COMMANDS[family].build_parser()
    assert theirs._option_string_actions, "mflux's parser has no options"
    for option, action in theirs._option_string_actions.items():
        assert _shape(ours._option_string_actions[option]) == _shape(action), option
    extra = set(ours._option_string_actions) - set(theirs._option_string_actions)
    assert extra and all(o.startswith("--teacache-") for o in extra)


@pytest.fixture
def no_model(monkeypatch):
    """Any load fails the test: refusals must come first."""

    def boom(*_, **__):
        raise AssertionError("a model was loaded")

    monkeypatch.setattr("teacache.loading.load_model", boom)
    monkeypatch.setattr(families, "load_released", boom)


FBCACHE_SPEEDUP = [  # --teacache-rule fbcache with: (case, flags, what the line says)
    ("beside traces", ["--teacache-speedup", "2", "--teacache-traces", "t.parquet"],
     r"--teacache-traces: not used with --teacache-rule fbcache"),
    ("speedup above its maximum", ["--teacache-speedup", "9"],
     r"--teacache-speedup 9: First-Block Cache .* at 28 steps it gives 7\.00x at most"),
    ("speedup below 1", ["--teacache-speedup", "0.5"], r"--teacache-speedup 0\.5: expected a number > 1"),
    ("threshold beside a speedup", ["--teacache-speedup", "2", "--teacache-threshold=0.1"],
     r"--teacache-speedup: not with --teacache-threshold; give one of"),
]  # fmt: skip
REFUSED = {
    "magcache beside a rescale function": (
        ["--teacache-rule", "magcache", "--teacache-coefficients", "1,0"],
        r"--teacache-coefficients: not used with --teacache-rule magcache",
    ),
    "magcache beside a quality target": (
        ["--teacache-rule", "magcache", "--teacache-ssim", "0.9"],
        r"--teacache-ssim: not used with --teacache-rule magcache",
    ),
    "magcache negative threshold": (
        ["--teacache-rule", "magcache", "--teacache-threshold", "-1"],
        r"--teacache-threshold: threshold: expected a finite number >= 0",
    ),
    "magcache traces not there": (
        ["--teacache-rule", "magcache", "--teacache-traces", "nope.parquet"],
        r"--teacache-traces: cannot read nope\.parquet",
    ),
    "magcache unreachable speedup": (
        ["--teacache-rule", "magcache", "--teacache-speedup", "20"],
        r"--teacache-speedup 20: .*nearest: --teacache-speedup",
    ),
    "fbcache negative threshold": (
        ["--teacache-rule", "fbcache", "--teacache-threshold", "-1"],
        r"--teacache-threshold: threshold: expected a finite number >= 0",
    ),
    "fbcache nan threshold": (
        ["--teacache-rule", "fbcache", "--teacache-threshold", "nan"],
        r"--teacache-threshold: threshold: expected a finite number >= 0",
    ),
    **{f"fbcache {case}": (["--teacache-rule", "fbcache", *flags], why) for case, flags, why in FBCACHE_SPEEDUP},
    "unreachable speedup": (["--teacache-speedup", "10"], r"--teacache-speedup 10: .*nearest: --teacache-speedup 5\.6"),
    "unreachable floor": (["--teacache-ssim", "0.9999"], r"--teacache-ssim 0\.9999: .*nearest: --teacache-ssim"),
    "too short a schedule": (["--steps", "3"], r"--steps 3: .*nothing to skip"),
    "mflux's step cache": (["--step-cache-ratio", "0.5"], r"--step-cache-ratio: mflux's own step cache"),
    "negative threshold": (["--teacache-threshold", "-1"], r"--teacache-threshold: "),
    "traces of another length": (["--teacache-speedup", "2", "--steps", "20"], r"--steps 20: .*28 steps"),
    "bad coefficients": (["--teacache-coefficients", "nope.py"], r"--teacache-coefficients: .*does not exist"),
    "negative coefficients": (["--teacache-coefficients=-1,-2,-3"], r"--teacache-coefficients: .*<= 0 everywhere"),
    "a zero coefficient": (["--teacache-coefficients", "0"], r"--teacache-coefficients: .*--teacache-allow-unsafe"),
    "zero coefficients": (["--teacache-coefficients", "0,0,0"], r"--teacache-coefficients: .*<= 0 everywhere"),
    "an empty coefficient": (["--teacache-coefficients", "1,,2"], r"--teacache-coefficients: an empty field"),
    "nan guidance": (["--guidance", "nan"], r"--guidance: expected a finite number"),
    "traces without a speedup": (
        ["--teacache-traces", "t.parquet", "--teacache-threshold", "0.1"],
        r"--teacache-traces: only --teacache-speedup reads it",
    ),
    "a report without an ssim": (["--teacache-report", "r"], r"--teacache-report: only --teacache-ssim reads it"),
    "another size": (["--width", "64"], r"--width/--height: tiny-shapes makes 32x32"),
    "a prompt it cannot draw": (["--prompt", "a cat"], r"--prompt: "),
    "an empty LoRA file": (["--lora", "x.safetensors"], r"--lora: x\.safetensors is not a readable safetensors file"),
}


@pytest.mark.parametrize("case", REFUSED, ids=list(REFUSED))
def test_bad_input_is_one_line_exit_2_before_a_model_loads_and_writes_nothing(
    case, no_model, tmp_path, monkeypatch, capsys
):
    flags, pattern = REFUSED[case]
    monkeypatch.chdir(tmp_path)
    (tmp_path / "x.safetensors").write_bytes(b"")  # there, but no safetensors file
    argv = ["--model", "tiny-shapes", "--output", str(tmp_path / "out" / "x.png")]
    if "--prompt" not in flags:
        argv += ["--prompt", PROMPT]
    rc = command.main(argv + flags)
    err = capsys.readouterr().err
    assert rc == 2, err
    assert len(err.strip().splitlines()) == 1
    assert re.search(pattern, err), err
    assert not (tmp_path / "out").exists()


def test_a_fit_file_positive_nowhere_is_refused_like_numbers(no_model, tmp_path, capsys):
    from teacache.variants import get

    fit = {"format_version": 1, "selected": {"label": "negated", "form": "poly", "coefficients": [-4.6, 2.2, -0.4, 0.0],
           "x_range": [0.01, 0.35], "r2": 0.9, "cv_r2": 0.9, "rmse": 0.01, "n_prompts": 4, "n_pairs": 40}}  # fmt: skip
    path = tmp_path / "fit.json"
    path.write_text(json.dumps(fit))
    argv = ["--model", "tiny-shapes", "--prompt", PROMPT, "--teacache-coefficients", str(path), "--output",
            str(tmp_path / "out" / "x.png")]  # fmt: skip
    assert command.main(argv) == 2
    err = capsys.readouterr().err
    assert (
        "--teacache-coefficients: the rescale function is <= 0 everywhere" in err and "--teacache-allow-unsafe" in err
    )
    assert not (tmp_path / "out").exists()
    assert get("tiny-shapes").coefficients is not None  # a packaged one exists: only the given one is refused


def test_coefficients_unsafe_somewhere_warn_in_one_line_and_run(tmp_path, capsys):
    out = tmp_path / "x.png"
    argv = ["--model", "tiny-shapes", "--prompt", PROMPT, "--teacache-coefficients=-1,1,0.1",
            "--teacache-threshold", "0.5", "--steps", "8", "--output", str(out)]  # fmt: skip
    assert command.main(argv) == 0 and out.exists()
    warned = [line for line in capsys.readouterr().err.splitlines() if "warning" in line]
    assert len(warned) == 1 and warned[0].startswith("teacache-generate: warning: --teacache-coefficients:")


def test_a_distilled_schedule_of_a_released_model_is_refused_before_its_weights_load(no_model, tmp_path, capsys):
    rc = command.main(["--model", "schnell", "--prompt", "x", "--steps", "2", "--output", str(tmp_path / "x.png")])
    assert rc == 2 and "--steps 2: flux1-schnell always computes" in capsys.readouterr().err


def test_ctrl_c_exits_130_saying_what_was_saved(monkeypatch, tmp_path, capsys):
    def interrupted(*_, **__):
        raise KeyboardInterrupt

    monkeypatch.setattr(command, "generate_all", interrupted)
    rc = command.main(["--model", "tiny-shapes", "--prompt", PROMPT, "--output", str(tmp_path / "x.png")])
    assert rc == 130 and "interrupted; saved nothing" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_a_sidecar_that_exists_is_never_replaced_the_next_free_name_is_taken(tmp_path):
    out = tmp_path / "img.png"
    (tmp_path / "img.metadata.json").write_text("mine")  # the image's name is free, its sidecar's is not
    prompt = "a red shape at the left"
    rc = command.main(["--model", "tiny-open-flux1", "--prompt", prompt, "--seed", "1", "--steps", "6", "--metadata",
                       "--output", str(out)])  # fmt: skip
    assert rc == 0
    assert (tmp_path / "img.metadata.json").read_text() == "mine" and not out.exists()
    assert json.loads((tmp_path / "img_1.metadata.json").read_text())["seed"] == 1
    assert (tmp_path / "img_1.png").is_file()


def test_a_sidecar_replays_its_image_at_its_steps_on_a_model_that_writes_another_size(tmp_path, capsys):
    """tiny-open-flux1 samples at 256x256 and writes 64x64, and the sidecar says 64x64: --config-from-metadata
    takes that as its own size, and the sidecar's steps over the model's default, so the image comes back."""
    prompt = "a red shape at the left"
    first, again = tmp_path / "a.png", tmp_path / "b.png"
    rc = command.main(["--model", "tiny-open-flux1", "--prompt", prompt, "--seed", "3", "--steps", "5", "--metadata",
                       "--output", str(first)])  # fmt: skip
    assert rc == 0
    sidecar = tmp_path / "a.metadata.json"
    assert (json.loads(sidecar.read_text())["width"], json.loads(sidecar.read_text())["steps"]) == (64, 5)
    capsys.readouterr()
    argv = ["--model", "tiny-open-flux1", "--config-from-metadata", str(sidecar), "--output", str(again)]
    assert command.main(argv) == 0
    assert "of 5 (" in capsys.readouterr().out
    assert PIL.Image.open(first).tobytes() == PIL.Image.open(again).tobytes()
    rc = command.main(["--model", "tiny-open-flux1", "--prompt", prompt, "--width", "128", "--height", "128",
                       "--output", str(tmp_path / "c.png")])  # fmt: skip
    assert rc == 2 and "256x256 images only, written as 64x64" in capsys.readouterr().err


def test_forecast_extrapolates_the_skipped_steps_and_the_image_says_so(tmp_path):
    images = {}
    for flag in ([], ["--teacache-forecast"]):
        out = tmp_path / f"x{len(flag)}.png"
        argv = ["--model", "tiny-shapes", "--prompt", PROMPT, "--teacache-threshold", "0.05", "--seed", "0"]
        assert command.main([*argv, *flag, "--output", str(out)]) == 0
        images[bool(flag)] = (metadata(out), PIL.Image.open(out).tobytes())
    (reuse, reused), (forecast, forecast_pixels) = images[False], images[True]
    assert reuse["teacache_forecast"] is False and forecast["teacache_forecast"] is True
    assert reuse["teacache_skipped"] > 0 and reused != forecast_pixels


def test_magcache_takes_its_schedule_from_the_committed_curve_and_the_image_says_so(tmp_path, capsys):
    import pandas as pd

    from calib.targets import committed
    from teacache.magcache import MagCacheConfig, ratio_curve, schedule

    out = tmp_path / "m.png"
    argv = ["--model", "tiny-open-flux2", "--prompt", "a red circle at the left", "--teacache-rule", "magcache",
            "--teacache-speedup", "2", "--seed", "0", "--output", str(out)]  # fmt: skip
    assert command.main(argv) == 0
    meta = metadata(out)
    curve = ratio_curve(pd.read_parquet(committed("tiny-open-flux2", "traces")))
    expected = schedule(MagCacheConfig(meta["teacache_threshold"], curve), 28)
    assert meta["teacache_rule"] == "magcache" and meta["teacache_skipped_steps"] == expected.skipped_steps
    assert abs(meta["teacache_skipped"] - 14) <= 1 and meta["teacache_target"] == "speedup 2x at 28 steps"
    assert "MagCache" in capsys.readouterr().out


def test_fbcache_runs_first_block_cache_at_its_threshold_and_the_image_says_so(tmp_path, capsys):
    out = tmp_path / "f.png"
    argv = ["--model", "tiny-shapes", "--prompt", PROMPT, "--teacache-rule", "fbcache", "--teacache-threshold", "0.2",
            "--seed", "0", "--output", str(out)]  # fmt: skip
    assert command.main(argv) == 0
    meta = metadata(out)
    assert meta["teacache_rule"] == "fbcache" and meta["teacache_threshold"] == 0.2
    assert meta["teacache_threshold_source"] == "--teacache-threshold" and meta["teacache_rescale"].startswith("none")
    assert 0 < meta["teacache_skipped"] < 28 and meta["teacache_max_consecutive_skips"] == 8
    said = capsys.readouterr().out
    assert "First-Block Cache threshold 0.2" in said and f"skipped {meta['teacache_skipped']} of 28" in said


def test_fbcache_by_speedup_takes_the_decisions_its_calibration_replay_predicts(tmp_path, capsys, monkeypatch):
    from calib import targets

    chosen = []
    choose = targets.fbcache_by_speedup
    monkeypatch.setattr(targets, "fbcache_by_speedup", lambda *a, **k: chosen.append(choose(*a, **k)) or chosen[-1])
    out = tmp_path / "f_{seed}.png"
    argv = ["--model", "tiny-shapes", "--prompt", PROMPT, "--teacache-rule", "fbcache", "--teacache-speedup", "2",
            "--seed", "3", "4", "--output", str(out)]  # fmt: skip
    assert command.main(argv) == 0
    (choice,) = chosen
    meta = metadata(tmp_path / "f_3.png")
    assert (
        meta["teacache_skipped_steps"] == choice.source["skipped_steps"]
    )  # the calibrated seed: decision for decision
    assert meta["teacache_threshold"] == choice.threshold and meta["teacache_target"] == "speedup 2x at 28 steps"
    assert abs(choice.expected["ideal_speedup"] - 2) < 0.2
    assert "calibration generation of seed 3" in meta["teacache_threshold_source"]
    assert metadata(tmp_path / "f_4.png")["teacache_threshold"] == choice.threshold
    said = capsys.readouterr()
    assert "First-Block Cache threshold" in said.out and "for speedup 2x at 28 steps" in said.out
    assert "warning" not in said.err
