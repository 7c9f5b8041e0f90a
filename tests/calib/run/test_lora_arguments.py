"""--lora-paths / --lora-scales on every command that names a model: a LoRA that does not fit is refused in one line,
exit 2, before any generation and with nothing written; a folder recorded with a LoRA resumes with no other."""

from __future__ import annotations

import json
import re
from pathlib import Path

import piexif
import PIL.Image
import pytest

from calib import record as record_cmd
from calib.drift import integrity, model_runs
from calib.generate import command as generate_cmd
from teacache import load_model
from teacache.io import file_sha256
from tests.conftest import refused, tree
from tests.lora_files import FLUX1_LAYERS, FLUX2_LAYERS, fitting_lora, write_lora

MODEL = "tiny-open-flux2"
PROMPT = "a yellow triangle at the left"  # in tiny-open-flux2's vocabulary


@pytest.fixture(scope="module")
def models():
    return {name: load_model(name) for name in (MODEL, "tiny-flux1")}


@pytest.fixture
def files(tmp_path, models):
    """LoRAs in tmp_path: two that fit tiny-open-flux2, another family's, one of other shapes, a corrupt one."""
    fitting_lora(tmp_path / "style.safetensors", models[MODEL], FLUX2_LAYERS, seed=0)
    fitting_lora(tmp_path / "other.safetensors", models[MODEL], FLUX2_LAYERS, seed=1)
    fitting_lora(tmp_path / "flux1.safetensors", models["tiny-flux1"], FLUX1_LAYERS)
    write_lora(tmp_path / "narrow.safetensors", {"transformer_blocks.0.attn.to_q": (96, 128)})
    (tmp_path / "junk.safetensors").write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00{not json")
    (tmp_path / "prompts.json").write_text(json.dumps({"tri": PROMPT}))
    return tmp_path


BAD = {  # the LoRA options, what the one line says
    "another family's": (["--lora-paths", "flux1.safetensors"], r"^--lora-paths: .*expected a LoRA for FLUX\.2$"),
    "other shapes": (["--lora-paths", "narrow.safetensors"], r"^--lora-paths: .*maps 128 -> 128 features"),
    "not safetensors": (["--lora-paths", "junk.safetensors"], r"^--lora-paths: .*not a readable safetensors file"),
    "missing": (["--lora-paths", "gone.safetensors"], r"^--lora-paths: gone\.safetensors does not exist"),
    "a nan scale": (["--lora-paths", "style.safetensors", "--lora-scales", "nan"], r"^--lora-scales: expected finite"),
    "a word for a scale": (["--lora-paths", "style.safetensors", "--lora-scales", "x"], r"^--lora-scales: .*'x'"),
    "more scales than files": (["--lora-paths", "style.safetensors", "--lora-scales", "1,0.5"],
                               r"^--lora-scales: 2 scale\(s\) for 1 LoRA file\(s\)"),
    "scales alone": (["--lora-scales", "0.5"], r"^--lora-scales: given without LoRA files"),
}  # fmt: skip
# teacache-generate parses the scales with mflux's own parser (numbers, space-separated), which refuses a word its way
GENERATE_BAD = {**{k: v for k, v in BAD.items() if k != "a word for a scale"},
                "more scales than files": (["--lora-paths", "style.safetensors", "--lora-scales", "1", "0.5"],
                                           BAD["more scales than files"][1])}  # fmt: skip
COMMANDS = {
    "teacache-calib record": ["--model", MODEL, "--steps", "4", "--prompts", "prompts.json", "--out", "o"],
    "teacache-calib drift": ["--model", MODEL, "--steps", "4", "--prompts", "prompts.json", "--save", "s",
                             "--out", "o"],
    "teacache-bench sweep": ["--model", MODEL, "--steps", "4", "--prompts", "prompts.json", "--thresholds", "0.1",
                             "--out", "o"],
    "teacache-bench campaign": ["--model", MODEL, "--out", "o"],
}  # fmt: skip


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("case", BAD, ids=list(BAD))
def test_a_lora_that_does_not_fit_is_refused_in_one_line_with_nothing_written(
    command, case, files, monkeypatch, capsys
):
    flags, says = BAD[case]
    line = refused(command, [*COMMANDS[command], *flags], files, monkeypatch, capsys)
    assert re.search(says, line.removeprefix(f"{command}: ")), line
    assert not (files / "o").exists() and not (files / "s").exists()


@pytest.mark.parametrize("case", GENERATE_BAD, ids=list(GENERATE_BAD))
def test_teacache_generate_refuses_them_alike(case, files, monkeypatch, capsys):
    flags, says = GENERATE_BAD[case]
    monkeypatch.chdir(files)
    argv = ["--model", MODEL, "--prompt", PROMPT, "--steps", "4", "--output", "out/x.png", *flags]
    line = refused_generate(files, argv, capsys)
    assert re.search(says, line.removeprefix("teacache-generate: ")), line


def test_teacache_generate_applies_a_lora_that_fits_and_the_image_names_it(files, monkeypatch, capsys):
    monkeypatch.chdir(files)
    argv = ["--model", MODEL, "--prompt", PROMPT, "--steps", "4", "--seed", "0", "--output", "x.png",
            "--lora", "style.safetensors", "0.5"]  # fmt: skip
    assert generate_cmd.main(argv) == 0
    assert "RecipeMismatchWarning: the packaged tiny-open-flux2 coefficients were fitted without LoRA" in (
        capsys.readouterr().err
    )
    raw = piexif.load(PIL.Image.open(files / "x.png").info["exif"])["Exif"][piexif.ExifIFD.UserComment]
    meta = json.loads(raw[8:].decode("utf-8"))
    assert [Path(p).name for p in meta["lora_paths"]] == ["style.safetensors"] and meta["lora_scales"] == [0.5]
    line = refused_generate(files, [*argv[:-3], "--lora", "style.safetensors", "--no-bake-lora"], capsys)
    assert line.endswith(f"--no-bake-lora: {MODEL} takes its LoRAs baked into its weights (mflux's default)")


def refused_generate(folder, argv: list[str], capsys) -> str:
    before = tree(folder)
    code = generate_cmd.main(argv)
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1, lines
    assert tree(folder) == before
    return lines[0]


def test_a_campaign_with_a_lora_needs_its_own_folder(files, monkeypatch, capsys):
    line = refused("teacache-bench campaign", ["--model", MODEL, "--lora-paths", "style.safetensors"], files,
                   monkeypatch, capsys)  # fmt: skip
    assert "--out: a campaign with --lora-paths needs a folder of its own" in line


def test_drift_takes_loras_only_with_model(files, monkeypatch, capsys):
    line = refused("teacache-calib drift", ["--lora-paths", "style.safetensors"], files, monkeypatch, capsys)
    assert line.endswith("--lora-paths: only with --model (your own model's runs)")


def _record(files, *flags: str) -> int:
    argv = ["--model", MODEL, "--steps", "4", "--prompts", str(files / "prompts.json"), "--seeds", "0",
            "--overhead-pairs", "0", "--out", str(files / "rec"), *flags]  # fmt: skip
    return record_cmd.main(argv)


def test_a_recording_with_a_lora_names_it_and_resumes_with_no_other(files, capsys):
    style = files / "style.safetensors"
    assert _record(files, "--lora-paths", str(style), "--lora-scales", "0.5") == 0
    out = capsys.readouterr().out
    assert f"record {MODEL} with LoRA style.safetensors (sha256 {file_sha256(style)[:12]}, scale 0.5)" in out
    fp = json.loads((files / "rec" / "fingerprint.json").read_text())
    assert fp["settings"]["weights"]["loras"] == [{"sha256": file_sha256(style), "scale": 0.5}]
    prov = json.loads((files / "rec" / "provenance.json").read_text())
    assert [(Path(p["path"]).name, p["sha256"], p["scale"]) for p in prov["loras"]] == [
        ("style.safetensors", file_sha256(style), 0.5)
    ]

    assert _record(files, "--lora-paths", str(style), "--lora-scales", "0.5") == 0  # the same LoRA: resumed
    capsys.readouterr()
    kept = (files / "rec" / "fingerprint.json").read_bytes()
    for flags in (["--lora-paths", str(files / "other.safetensors"), "--lora-scales", "0.5"],
                  ["--lora-paths", str(style)], []):  # fmt: skip
        assert _record(files, *flags) == 2
        lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
        assert len(lines) == 1 and "weights.loras" in lines[0], lines
    assert (files / "rec" / "fingerprint.json").read_bytes() == kept


def _fake_save(root, runs: model_runs.ModelRuns) -> None:
    """A finished, sealed save of ``runs`` (placeholder files: only its settings are read before a refusal)."""
    folder = model_runs.folder_of(root, runs)
    model_runs.RUNS.save(folder, runs.to_dict())
    for name in model_runs.sealed_names(runs)[1:]:
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text("{}")
    integrity.write(folder)


def test_a_drift_save_with_a_lora_resumes_with_that_lora_only_and_is_repeated_with_its_file(files, monkeypatch, capsys):
    """A LoRA is a recipe setting of a drift save (its SHA-256 and scale): --save resumes with no other, and
    --against without --lora-paths repeats the saved LoRA, whose file must still be where the save found it
    (another LoRA asks the recipe question: tests/calib/drift/test_lora_drift.py)."""
    monkeypatch.chdir(files)
    style = "style.safetensors"
    saved = model_runs.plan_model(MODEL, prompts="prompts.json", steps=4, lora_paths=[style])
    assert saved.lora_paths == (style,) and saved.lora == [{"sha256": file_sha256(style), "scale": 1.0}]
    assert "loras" not in saved.weights  # the weights are the model's; the LoRA is the recipe's
    _fake_save(files / "A", saved)
    save = ["--model", MODEL, "--prompts", "prompts.json", "--steps", "4", "--save", "A", "--out", "o"]
    for flags in ([], ["--lora-paths", "other.safetensors"], ["--lora-paths", style, "--lora-scales", "0.5"]):
        line = refused("teacache-calib drift", [*save, *flags], files, monkeypatch, capsys)
        assert "--save: " in line and "holds another recording of tiny-open-flux2 (lora differs (saved style" in line
    (files / style).rename(files / "moved.safetensors")
    against = ["--model", MODEL, "--prompts", "prompts.json", "--steps", "4", "--against", "A", "--out", "o"]
    line = refused("teacache-calib drift", against, files, monkeypatch, capsys)
    assert line.endswith(
        f"--lora-paths: A/effect/{MODEL} was saved with LoRA style.safetensors (sha256 {saved.lora_sha256[0][:12]}, "
        "scale 1), whose file style.safetensors is gone or changed; name it (or another LoRA: the recipe question) "
        "with --lora-paths"
    ), line
