"""teacache-calib drift: the verdict logic, bad input, and one small run on the installed release."""

from __future__ import annotations

import json
from importlib import metadata

import pytest

from calib.cli import main as calib_main
from calib.drift import code, verdict
from calib.drift.verdict import FamilyEvidence
from teacache import variants


def _status(**kwargs) -> str:
    return verdict.status_of(FamilyEvidence("flux1", **kwargs))


def test_status_worst_first():
    holds = {"holds": True, "checks": []}
    fails = {"holds": False, "checks": [{"name": "threshold-0", "holds": False, "detail": "differs"}]}
    unchanged = {"float32": False, "bfloat16": False}
    assert _status(moved=unchanged) == verdict.UNCHANGED
    assert _status(moved=None) == verdict.UNCHECKED
    assert _status(changed_functions=["m:A.f"], moved=unchanged, oracles=holds) == verdict.CODE_HOLDS
    # the bits moving is detection, not a verdict on the calibration: without an effect it stays unjudged
    assert _status(moved={"float32": False, "bfloat16": True}) == verdict.MOVED_UNCHECKED
    assert _status(changed_functions=["m:A.f"], moved={"float32": True}, oracles=fails) == verdict.BROKEN
    assert _status(moved=unchanged, error="ImportError: x") == verdict.BROKEN


def _effect(verdict_: str = "holds", identical: bool = False) -> dict:
    change = {"label": "default", "threshold": 0.03, "decisions": 100, "decisions_differ": 0, "schedules": 4,
              "schedules_differ": 0, "allowed_fraction": 0.1, "nearest_margin": 0.02}  # fmt: skip
    fit = {"before": {"rmse": 0.01, "r2": 0.9}, "after": {"rmse": 0.01, "r2": 0.9}, "allowed_rmse_rise": 0.001}
    return {"verdict": verdict_, "identical": identical, "latents_identical": identical, "thresholds": [change],
            "fit": fit, "model": "tiny-scenes", "gate": "packaged", "source_model": "tiny-scenes"}  # fmt: skip


def test_the_effect_decides_between_holds_and_refit_whatever_the_bits_did():
    moved = {"float32": True, "bfloat16": True}
    assert _status(moved=moved, effect=_effect("holds")) == verdict.HOLDS
    assert _status(moved={"float32": False}, effect=_effect("holds")) == verdict.HOLDS  # the traces moved
    assert _status(moved={"float32": False}, effect=_effect("holds", identical=True)) == verdict.UNCHANGED
    assert _status(moved=None, effect=_effect("holds", identical=True)) == verdict.UNCHANGED
    assert _status(changed_functions=["m:A.f"], effect=_effect("holds", identical=True)) == verdict.CODE_HOLDS
    assert _status(moved={"float32": False}, effect=_effect("moved", identical=False)) == verdict.REFIT
    assert _status(moved=moved, effect=_effect("moved"), error="TypeError: x") == verdict.BROKEN
    assert verdict.exit_status([{"status": verdict.HOLDS}, {"status": verdict.MOVED_UNCHECKED}]) == 0


def test_a_refit_of_the_users_own_model_names_it_in_the_record_command():
    spec = variants.get("flux1-dev")
    effect = _effect("moved") | {"source_model": "~/models/my-dev", "model": "my-dev", "own_model": True}
    result = verdict.variant_verdict(spec, FamilyEvidence("flux1", effect=effect), "0.25.0")
    assert result["status"] == verdict.REFIT
    assert result["commands"][0].startswith("teacache-calib record --model ~/models/my-dev --base-model flux1-dev")
    assert "on my-dev with its gate" in result["line"] and "traces moved" in result["line"]


def test_exit_status_is_one_for_a_refit_or_a_broken_integration_only():
    assert verdict.exit_status([{"status": verdict.UNCHANGED}, {"status": verdict.CODE_HOLDS}]) == 0
    assert verdict.exit_status([{"status": verdict.UNCHECKED}]) == 0
    assert verdict.exit_status([{"status": verdict.UNCHANGED}, {"status": verdict.REFIT}]) == 1
    assert verdict.exit_status([{"status": verdict.BROKEN}]) == 1


def test_a_refit_names_the_record_fit_and_emit_commands_of_the_variant():
    spec = variants.get("flux1-dev")
    evidence = FamilyEvidence("flux1", moved={"bfloat16": True}, ratios={"bfloat16": 6.3}, effect=_effect("moved"))
    result = verdict.variant_verdict(spec, evidence, "0.25.0")
    assert result["status"] == verdict.REFIT and "bfloat16 moved (6.3x the threshold)" in result["line"]
    record, fit, emit = result["commands"]
    assert record.startswith("teacache-calib record --model flux1-dev --prompts default")
    assert "--compare packaged" in fit and emit.endswith("--variant flux1-dev")
    unchanged = verdict.variant_verdict(spec, FamilyEvidence("flux1", moved={"bfloat16": False}), "0.25.0")
    assert unchanged["commands"] == [] and "packaged coefficients still apply" in unchanged["line"]


def test_a_broken_integration_says_which_oracle_failed():
    failed = {"holds": False, "checks": [{"name": "restore", "holds": False, "detail": "differs"}]}
    evidence = FamilyEvidence("zimage", changed_functions=["m:ZImageTransformer.__call__"], oracles=failed)
    result = verdict.variant_verdict(variants.get("z-image"), evidence, "0.25.0")
    assert result["status"] == verdict.BROKEN and "restore" in result["line"] and "ZImageTransformer" in result["line"]


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--baseline", "0.99.0"], "--baseline"),
        (["--dtypes", "float16"], "--dtypes"),
        (["--against", "missing-folder"], "--against"),
        (["--floor-processes", "1"], "--floor-processes"),
        (["--code-only", "--fullsize"], "--code-only"),
    ],
)
def test_bad_input_is_one_line_and_exit_2_before_anything_runs(tmp_path, capsys, argv, says):
    out = tmp_path / "out"
    assert calib_main(["drift", "--out", str(out), *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and says in err[0]
    assert not out.exists()


def test_save_refuses_a_folder_that_holds_numbers_and_leaves_it_as_it_was(tmp_path, capsys):
    saved = tmp_path / "saved"
    saved.mkdir()
    (saved / "numbers.json").write_text("{}")
    assert calib_main(["drift", "--out", str(tmp_path / "out"), "--save", str(saved)]) == 2
    assert "--save" in capsys.readouterr().err
    assert [p.name for p in saved.iterdir()] == ["numbers.json"] and (saved / "numbers.json").read_text() == "{}"


def test_code_only_on_the_installed_release(tmp_path, capsys):
    status = calib_main(["drift", "--code-only", "--out", str(tmp_path)])
    report = json.loads((tmp_path / "verdict.json").read_text())
    assert report["code"]["version"] == metadata.version("mflux")
    assert {r["status"] for r in report["verdicts"]} <= {verdict.UNCHECKED, verdict.CODE_HOLDS, verdict.UNCHANGED}
    assert status == 0 and not (tmp_path / "numbers.json").exists()
    assert len(capsys.readouterr().out.splitlines()) >= len(variants.names())


def test_one_small_run_on_the_installed_release_against_its_own_reference(tmp_path):
    """The installed (verified) release against its committed numbers: nothing moved, exit 0."""
    version = metadata.version("mflux")
    if version not in code.load_table()["releases"]:
        pytest.skip(f"mflux {version} is not a verified release")
    status = calib_main(["drift", "--out", str(tmp_path), "--baseline", version])
    report = json.loads((tmp_path / "verdict.json").read_text())
    statuses = {r["status"] for r in report["verdicts"]}
    if report["numbers"] is not None:
        assert all(run["moved"] is False for run in report["numbers"].values())
    # the effect models against the committed save: bit for bit where it was made, within tolerance elsewhere
    assert set(report["effect"]) == {f.name for f in variants.families()}
    assert all(e["verdict"] == "holds" for e in report["effect"].values()), [r["line"] for r in report["verdicts"]]
    assert statuses <= {verdict.UNCHANGED, verdict.HOLDS}, [r["line"] for r in report["verdicts"]]
    assert status == 0


def test_the_verdict_says_when_the_packaged_fit_predates_a_numeric_change():
    """Qwen-Image's and Z-Image's packaged coefficients were fitted before mflux 0.22.0 changed their numbers
    (Z-Image in bfloat16 only); on 0.21.0 nothing lies between fit and release; FLUX.2 has no change."""
    from types import SimpleNamespace

    from calib.drift.command import packaged_notes

    on_024 = packaged_notes(SimpleNamespace(version="0.24.0", dtypes=("float32", "bfloat16")))
    assert "0.22.0" in on_024["qwen-image"] and " in bfloat16" not in on_024["qwen-image"]
    assert " in bfloat16" in on_024["z-image"]
    assert not any(name.startswith("flux2") for name in on_024)
    assert packaged_notes(SimpleNamespace(version="0.24.0", dtypes=("float32",))).get("z-image") is None
    assert "qwen-image" not in packaged_notes(SimpleNamespace(version="0.21.0", dtypes=("bfloat16",)))
    spec = variants.get("qwen-image")
    result = verdict.variant_verdict(
        spec, verdict.FamilyEvidence(spec.family, moved={}), "0.24.0", on_024["qwen-image"]
    )
    assert result["status"] == verdict.UNCHANGED and result["line"].endswith(on_024["qwen-image"])
    assert result["packaged_fit_note"] == on_024["qwen-image"]
