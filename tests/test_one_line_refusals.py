"""Bad values that used to end in a traceback (after the model loaded, or after the work ran): each command
refuses them in one line naming the argument, exit 2, before any model loads, nothing written."""

from __future__ import annotations

import json

import pytest

from calib.generate import arguments as generate_args
from calib.generate import command as generate_cmd
from calib.generate import families
from tests import ROOT
from tests.conftest import refused, tree

SHAPES = "a red circle on a blue background at the left"
SHAPES_LONG = SHAPES + " a a a a"  # 14 words: tiny-shapes' text encoder takes 12
OPEN_LONG = "a a a a a red circle at the left"  # 10 words: tiny-open-flux2's takes 8
TOLERANCES = ROOT / "tests/tolerances/cpu_amd_epyc_2c.py"
SWEEP = ROOT / "results/cpu-amd-epyc-2c/tiny-shapes/0.24.0/sweep"
TRACES = ROOT / "results/cpu-amd-epyc-2c/tiny-shapes/0.24.0/traces/traces.parquet"


@pytest.fixture
def no_load(monkeypatch):
    """teacache-generate: any model load fails the test."""

    def boom(*_, **__):
        raise AssertionError("a model was loaded before the bad input was refused")

    monkeypatch.setattr("teacache.loading.load_model", boom)
    monkeypatch.setattr(families, "load_released", boom)


def generate_refused(argv: list[str], tmp_path, monkeypatch, capsys) -> str:
    monkeypatch.chdir(tmp_path)
    before = tree(tmp_path)
    rc = generate_cmd.main(argv)
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert rc == 2 and len(lines) == 1 and "Traceback" not in err, err
    assert tree(tmp_path) == before, "a refused command changed the folder"
    return lines[0]


def _folders(tmp_path):
    (tmp_path / "adir").mkdir()
    (tmp_path / "empty").mkdir()
    corrupt = tmp_path / "corrupt"
    corrupt.mkdir()
    (corrupt / "model.safetensors").write_bytes(b"junk")
    partial = tmp_path / "partial"  # a readable transformer, no VAE or text encoders
    (partial / "transformer").mkdir(parents=True)
    import numpy as np
    from safetensors.numpy import save_file

    save_file({"w": np.zeros(2, dtype=np.float32)}, str(partial / "transformer" / "0.safetensors"))


GENERATE = {
    "prompt too long, tiny-shapes": (["--model", "tiny-shapes", "--prompt", SHAPES_LONG],
                                     "--prompt: 14 words, at most 12 fit"),
    "prompt too long, tiny-open-flux2": (["--model", "tiny-open-flux2", "--prompt", OPEN_LONG],
                                         "--prompt: 10 words, at most 8 fit"),
    "a 300-character name": (["--output", "a" * 300 + ".png"], "--output: "),
    "a folder": (["--output", "adir"], "--output: 'adir' is a folder"),
    "no extension": (["--output", "noext"], "--output: 'noext' does not end in an image format's extension"),
    "braces other than {seed}": (["--output", "x_{foo}.png"], "--output: 'x_{foo}.png': only {seed}"),
    "a tracked file": (["--output", "README.png"], "--output: README.png is in the root"),
    "an empty folder": (["--model", "empty", "--base-model", "dev", "--prompt", "x"],
                        "--model: empty holds no .safetensors files"),
    "a corrupt folder": (["--model", "corrupt", "--base-model", "dev", "--prompt", "x"],
                         "is not a readable safetensors file"),
    "a folder without a VAE": (["--model", "partial", "--base-model", "dev", "--prompt", "x"],
                               "--model: partial has no vae/*.safetensors"),
    "random weights": (["--model", "random-flux1-dev", "--prompt", "x"], "--model random-flux1-dev: random weights"),
    "an embedded name as a folder": (["--model", "tiny-shapes", "--base-model", "dev", "--prompt", "x"],
                                     "--model: no folder at tiny-shapes"),
    "a negative seed": (["--seed=-1"], "--seed: expected integers from 0 to 2^32-1"),
    "empty coefficients": (["--teacache-coefficients", ""], "--teacache-coefficients: expected packaged, "),
}  # fmt: skip


@pytest.mark.parametrize("case", GENERATE, ids=list(GENERATE))
def test_generate_refuses_in_one_line_before_loading(case, no_load, tmp_path, monkeypatch, capsys):
    _folders(tmp_path)
    flags, expected = GENERATE[case]
    argv = list(flags)
    if "--model" not in argv:
        argv = ["--model", "tiny-shapes", *argv]
    if "--prompt" not in argv:
        argv += ["--prompt", SHAPES]
    if "--output" not in argv:
        argv += ["--output", str(tmp_path / "out.png")]
    if case == "a tracked file":
        monkeypatch.chdir(ROOT)
        rc = generate_cmd.main(argv)
        line = capsys.readouterr().err.strip()
        assert rc == 2 and "\n" not in line and expected in line, line
        assert not (ROOT / "README.png").exists()
        return
    line = generate_refused(argv, tmp_path, monkeypatch, capsys)
    assert expected in line, line


def test_generate_offline_without_cached_weights_says_where_it_looked(no_load, tmp_path, monkeypatch, capsys):
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    line = generate_refused(["--model", "dev", "--prompt", "x", "--output", str(tmp_path / "o.png")], tmp_path,
                            monkeypatch, capsys)  # fmt: skip
    assert "black-forest-labs/FLUX.1-dev are not in the Hugging Face cache" in line
    assert str(tmp_path / "hub") in line


def test_a_name_with_seed_keeps_it_where_the_user_put_it():
    assert generate_args._seed_once("multi_{seed}_seed_{seed}.png") == "multi_{seed}.png"
    assert generate_args._seed_once("out/multi_seed_{seed}.png") == "out/multi_seed_{seed}.png"  # mflux's own


def test_embedded_flags_read_as_english():
    assert "no an " not in " ".join(f"an embedded model has no {v}" for v in generate_args._NO_EMBEDDED.values())


def _long_prompts(tmp_path, text):
    path = tmp_path / "long.json"
    path.write_text(json.dumps({"p": text}))
    return str(path)


@pytest.mark.parametrize(
    ("model", "text", "expected"),
    [("tiny-shapes", SHAPES_LONG, "14 words, at most 12"), ("tiny-open-flux2", OPEN_LONG, "10 words, at most 8")],
)
@pytest.mark.parametrize("dry", [True, False])
def test_record_refuses_a_prompt_too_long_for_the_text_encoder(model, text, expected, dry, tmp_path, monkeypatch,
                                                                capsys):  # fmt: skip
    argv = ["--model", model, "--prompts", _long_prompts(tmp_path, text), "--out", str(tmp_path / "o")]
    line = refused("teacache-calib record", argv + (["--dry-run"] if dry else []), tmp_path, monkeypatch, capsys)
    assert f"--prompts: p: {expected}" in line, line


def test_fit_bounds_num_steps(tmp_path, monkeypatch, capsys):
    import pandas as pd

    table = tmp_path / "t.csv"
    pd.read_parquet(TRACES).drop(columns=["num_steps"]).to_csv(table, index=False)
    line = refused("teacache-calib fit", [str(table), "--num-steps", "100000", "--out", str(tmp_path / "o")],
                   tmp_path, monkeypatch, capsys)  # fmt: skip
    assert "--num-steps: expected an integer from 2 to 1000" in line, line


@pytest.mark.parametrize(("text", "expected"), [
    ("FLOORS = {\n", "is not a Python module (line 1"),
    ("raise RuntimeError('no')\n", "fails on import (RuntimeError: no)"),
    (None, "TINY_SHAPES_SSIM_FLOOR in bad.py is '0.9'; expected a finite number"),
])  # fmt: skip
def test_gapcheck_refuses_a_broken_tolerance_module(text, expected, tmp_path, monkeypatch, capsys):
    bad = tmp_path / "bad.py"
    if text is None:
        source = TOLERANCES.read_text()
        start = source.index("TINY_SHAPES_SSIM_FLOOR = ")
        end = source.index("\n", start)
        text = source[:start] + 'TINY_SHAPES_SSIM_FLOOR = "0.9"' + source[end:]
    bad.write_text(text)
    argv = ["--model", "tiny-shapes", "--tolerances", "bad.py", "--out", str(tmp_path / "o")]
    line = refused("teacache-bench gapcheck", argv, tmp_path, monkeypatch, capsys)
    assert expected in line, line


def test_report_refuses_a_float_wall_time(tmp_path, monkeypatch, capsys):
    import shutil

    import pandas as pd

    sweep = tmp_path / "sweep"
    shutil.copytree(SWEEP, sweep, ignore=shutil.ignore_patterns("images"))
    runs = pd.read_parquet(sweep / "runs.parquet")
    runs["wall_s"] = runs["wall_s"].map(lambda w: float(w[0]))
    runs.to_parquet(sweep / "runs.parquet")
    line = refused("teacache-bench report", [str(sweep), "--out", str(tmp_path / "o")], tmp_path, monkeypatch, capsys)
    assert "column 'wall_s' holds float64 values; expected lists of numbers" in line, line


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["--steps", "0"], "--steps: expected at least 2"),
        (["--steps", "1"], "--steps: expected at least 2"),
        (["--size", "100"], "--size: expected a multiple of 16"),
    ],
)
def test_blas_checks_its_arguments_before_the_probes(argv, expected, tmp_path, monkeypatch, capsys):
    from bench.timing import blas

    def boom(*_, **__):
        raise AssertionError("a probe ran before the arguments were checked")

    monkeypatch.setattr(blas, "measure", boom)
    line = refused("teacache-bench blas", argv, tmp_path, monkeypatch, capsys)
    assert expected in line, line
