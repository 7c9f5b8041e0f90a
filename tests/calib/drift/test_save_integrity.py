"""A drift save carries an integrity record: a damaged save is refused as one, never judged as a broken release."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from calib.cli import main as calib_main
from calib.drift import integrity, plan, verdict
from teacache.io import write_json
from tests import ROOT, committed

MODEL = "tiny-shapes"


@pytest.fixture(scope="module")
def save(tmp_path_factory) -> Path:
    work = tmp_path_factory.mktemp("sealed")
    assert calib_main(["drift", "--model", MODEL, "--save", str(work / "A"), "--out", str(work / "first")]) == 0
    return work / "A"


def _copy(save: Path, tmp_path: Path) -> tuple[Path, Path]:
    copy = tmp_path / "A"
    shutil.copytree(save, copy)
    return copy, copy / "effect" / MODEL


def _refused(capsys, against: Path, out: Path, *extra: str) -> str:
    assert calib_main(["drift", "--model", MODEL, "--against", str(against), "--out", str(out), *extra]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert not out.exists()
    return err[0]


def test_a_save_is_sealed_last_with_every_file_it_wrote_and_its_machine(save):
    record = json.loads((save / "effect" / MODEL / integrity.NAME).read_text())
    assert {"fingerprint.json", "traces.parquet", "gate.json", "tolerance.json", "runs/shapes-00-s0.json"} <= set(
        record["files"]
    )
    assert record["machine"] == integrity.machine() and "settings.json" not in record["files"]
    settings = json.loads((save / "effect" / MODEL / "fingerprint.json").read_text())["settings"]
    assert settings["weights"]["embedded"] == MODEL and settings["model"] == MODEL and settings["seeds"] == [0]


def test_a_tolerance_edited_to_allow_everything_is_a_damaged_save(save, tmp_path, capsys):
    copy, folder = _copy(save, tmp_path)
    tolerance = json.loads((folder / "tolerance.json").read_text())
    for row in tolerance["thresholds"]:
        row["allowed"] = 1.0
    (folder / "tolerance.json").write_text(json.dumps(tolerance))
    line = _refused(capsys, copy, tmp_path / "o")
    assert "damaged save" in line and "tolerance.json" in line and "integration-broken" not in line


def test_a_save_missing_a_key_or_a_file_is_a_damaged_save_naming_it(save, tmp_path, capsys):
    copy, folder = _copy(save, tmp_path)
    gate = json.loads((folder / "gate.json").read_text())
    gate.pop(next(iter(gate)))
    (folder / "gate.json").write_text(json.dumps(gate))
    assert "gate.json" in _refused(capsys, copy, tmp_path / "o")
    (folder / "runs" / "shapes-01-s0.json").unlink()
    line = _refused(capsys, copy, tmp_path / "o")
    assert "shapes-01-s0.json is missing" in line or "gate.json" in line


def test_a_save_without_a_record_is_refused_as_unverifiable(save, tmp_path, capsys):
    copy, folder = _copy(save, tmp_path)
    (folder / integrity.NAME).unlink()
    line = _refused(capsys, copy, tmp_path / "o")
    assert f"has no {integrity.NAME}" in line


def test_quantizing_a_model_that_cannot_be_quantized_is_refused_before_anything_is_written(tmp_path, capsys):
    argv = ["drift", "--model", MODEL, "--save", str(tmp_path / "Q"), "--quantize", "4", "--out", str(tmp_path / "o")]
    assert calib_main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--quantize: tiny-shapes cannot be quantized to 4 bits" in err[0], err
    assert not (tmp_path / "Q").exists() and not (tmp_path / "o").exists()


def test_a_save_from_other_hardware_says_so_instead_of_holds(save, tmp_path, monkeypatch, capsys):
    here = integrity.machine()
    monkeypatch.setattr(integrity, "machine", lambda provenance=None: {**here, "hardware": "metal-apple-m9"})
    out = tmp_path / "o"
    assert calib_main(["drift", "--model", MODEL, "--against", str(save), "--out", str(out)]) == 0
    (found,) = json.loads((out / "verdict.json").read_text())["verdicts"]
    assert found["status"] == verdict.OTHER_HARDWARE, found["line"]
    assert f"save comes from other hardware ({here['hardware']}; this machine is metal-apple-m9)" in found["line"]
    assert verdict.HOLDS not in capsys.readouterr().out


def test_saved_numbers_are_verified_too(tmp_path):
    folder = tmp_path / "S"
    folder.mkdir()
    write_json(folder / "numbers.json", {"format_version": 1, "runs": {}, "settings": {}})
    write_json(folder / "noise_floor.json", {"floor": {}})
    integrity.write(folder, plan.SAVED_NUMBERS)
    (folder / "numbers.json").write_text('{"format_version": 1, "runs": {}, "settings": {"fullsize": true}}')
    with pytest.raises(integrity.DamagedSave, match=r"damaged save: .*numbers.json is not the file the save wrote"):
        plan._read_folder(folder, "--against")


@pytest.mark.parametrize(
    "folder",
    [p.parent for p in committed("calib/drift/data/save-*/effect/*/settings.json")]
    + [p.parent for p in committed("results/**/save/effect/*/settings.json")],
    ids=lambda p: p.relative_to(ROOT).as_posix(),
)
def test_every_committed_save_is_sealed_and_as_sealed(folder):
    from calib.drift import model_runs

    settings, runs = model_runs.read_runs(folder)  # saved before fingerprints: the old format's reader
    assert settings == model_runs.RUNS.adopted_from and isinstance(runs.weights, dict)  # its line names these weights
    record = integrity.verify(folder, model_runs.sealed_names(runs, settings), "committed")
    assert record["machine"]["hardware"] == integrity.machine(json.loads((folder / "tolerance.json").read_text())[
        "provenance"])["hardware"]  # fmt: skip


def test_a_save_from_before_fingerprints_whose_weights_line_names_other_weights_differs_by_them(tmp_path):
    """The old format's reader: a weights line that does not describe the weights its model names here stays a
    line, so the save is not taken for a recording of these weights."""
    from calib.drift import model_runs

    folder = tmp_path / "tiny-z-image"
    shutil.copytree(ROOT / "calib/drift/data/save-mflux-0.24.0/effect/tiny-z-image", folder)
    settings, runs = model_runs.read_runs(folder)
    assert model_runs.mismatch(runs, model_runs.plan_model("tiny-z-image")) is None
    old = json.loads((folder / settings).read_text())
    (folder / settings).write_text(json.dumps({**old, "weights": "embedded tiny-z-image (other weights)"}))
    _settings, runs = model_runs.read_runs(folder)
    assert "weights differs (saved 'embedded tiny-z-image (other weights)'" in model_runs.mismatch(
        runs, model_runs.plan_model("tiny-z-image")
    )


def test_a_save_from_before_fingerprints_of_a_local_folder_is_read_as_those_weights_wherever_they_are(tmp_path):
    """A local folder's old weights line hashed each safetensors file's name, size and both ends; the identity
    hashes them the same way and leaves the path out, so the save matches a copy of the folder elsewhere."""
    import hashlib

    from calib.drift import model_runs

    weights = tmp_path / "my-model"
    (weights / "transformer").mkdir(parents=True)
    (weights / "transformer" / "0.safetensors").write_bytes(bytes(range(256)) * 12_000)  # > 2 MiB: both ends
    digest = hashlib.sha256()  # the line a save from before fingerprints wrote
    for file in sorted(weights.rglob("*.safetensors")):
        data = file.read_bytes()
        digest.update(f"{file.relative_to(weights)}:{len(data)}:".encode())
        digest.update(hashlib.sha256(data[: 1 << 20] + data[-(1 << 20) :]).digest())
    folder = tmp_path / "save" / "my-model"
    shutil.copytree(ROOT / "calib/drift/data/save-mflux-0.24.0/effect/tiny-z-image", folder)
    old = json.loads((folder / "settings.json").read_text())
    moved = tmp_path / "elsewhere" / "my-model"
    shutil.copytree(weights, moved)
    line = f"folder sha256:{digest.hexdigest()}"
    (folder / "settings.json").write_text(
        json.dumps({**old, "model": str(moved), "base_model": "z-image", "weights": line})
    )
    _settings, runs = model_runs.read_runs(folder)
    assert runs.weights == model_runs._identity(str(weights), "z-image") == model_runs._identity(str(moved), "z-image")
    assert "folder" not in runs.weights and runs.weights["files_sha256"] == digest.hexdigest()
