"""``drift --model M --save A`` before an upgrade, ``--against A`` after it, under fake releases of mflux.

The fake releases are the installed mflux with one line of FLUX.2 edited (tests/calib/drift/fake_release.py):
one that moves the bits and no decision, one that changes what the denoiser does, one that breaks a hooked
function. Each runs in its own process, as a user's upgraded environment would.
"""

from __future__ import annotations

import json

import pytest

from calib.cli import main as calib_main
from calib.drift import verdict
from tests.calib.drift import fake_release


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    work = tmp_path_factory.mktemp("drift-model")
    result = fake_release.run_drift(["--model", "tiny-flux2", "--save", "A", "--out", "first"], None, work)
    assert result.returncode == 0, result.stderr
    assert "after the upgrade: teacache-calib drift --model tiny-flux2 --against A" in result.stdout
    return work


def _verdict(work, out) -> dict:
    (line,) = json.loads((work / out / "verdict.json").read_text())["verdicts"]
    return line


@pytest.mark.parametrize(
    ("kind", "status", "exit_status"),
    [
        ("flux2-bits", verdict.HOLDS, 0),
        ("flux2-decisions", verdict.REFIT, 1),
        ("flux2-broken", verdict.BROKEN, 1),
    ],
)
def test_a_fake_release_gets_the_verdict_its_effect_deserves(saved, kind, status, exit_status):
    site = fake_release.build(kind, saved / f"site-{kind}")
    result = fake_release.run_drift(["--model", "tiny-flux2", "--against", "A", "--out", kind], site, saved)
    found = _verdict(saved, kind)
    assert found["status"] == status, found["line"]
    assert result.returncode == exit_status, result.stderr
    if status == verdict.HOLDS:
        assert "traces moved" in found["line"] and "no refit needed" in found["line"]
        assert all(c["decisions_differ"] == 0 for c in found["effect"]["thresholds"])
    if status == verdict.REFIT:  # the gate's calls moved, not only its bits
        assert any(not c["within"] for c in found["effect"]["thresholds"]), found["line"]
        assert found["commands"][0].startswith("teacache-calib record --model tiny-flux2")
    if status != verdict.BROKEN:  # the code fingerprints read the mflux that runs, not the distribution's folder
        assert found["changed_functions"], found["line"]


def test_the_installed_release_against_its_own_save_is_unchanged(saved):
    result = fake_release.run_drift(["--model", "tiny-flux2", "--against", "A", "--out", "same"], None, saved)
    found = _verdict(saved, "same")
    assert found["status"] == verdict.UNCHANGED and result.returncode == 0, found["line"]
    assert found["effect"]["identical"] and found["effect"]["latents_identical"]


@pytest.mark.parametrize(
    ("options", "recipe", "by_step"),
    [
        (["--steps", "12"], {"steps": {"saved": 20, "now": 12}}, False),
        (["--quantize", "8"], {"quantize": {"saved": None, "now": 8}}, True),
    ],
)
def test_another_recipe_asks_whether_the_saved_calibration_serves_it(saved, options, recipe, by_step, monkeypatch):
    """The same pair of commands answers a recipe question: the saved prompts and seeds at the recipe asked.
    The installed release, so in this process (the fake releases above run the command in their own)."""
    out = f"recipe-{options[0][2:]}"
    monkeypatch.chdir(saved)
    returncode = calib_main(["drift", "--model", "tiny-flux2", "--against", "A", *options, "--out", out])
    found = _verdict(saved, out)
    effect = found["effect"]
    assert effect["recipe"] == recipe and effect["aligned"] is by_step, found["line"]
    assert not effect["identical"] and f"at {next(iter(recipe))} " in found["line"]
    assert found["status"] in (verdict.HOLDS, verdict.REFIT) and returncode == (found["status"] == verdict.REFIT)
    if by_step:
        assert all(c["decisions_differ"] is not None for c in effect["thresholds"])
    else:  # no decision has a counterpart: the share of gated steps skipped is compared instead
        assert all(c["decisions_differ"] is None and "skipped_fraction_after" in c for c in effect["thresholds"])
    if found["status"] == verdict.REFIT:
        assert " ".join(options) in found["commands"][0]
    settings = json.loads((saved / out / "effect" / "tiny-flux2" / "fingerprint.json").read_text())["settings"]
    assert {k: settings[k] for k in recipe} == {k: v["now"] for k, v in recipe.items()}


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--model", "tiny-flux2", "--against", "A", "--seeds", "1"], "seeds differs"),
        (["--model", "tiny-flux2", "--against", "A", "--prompts", "default"], "prompts differ"),
        (["--model", "tiny-flux1", "--against", "A"], "holds no save of tiny-flux1"),
        (["--model", "tiny-flux2", "--against", "nowhere"], "--against"),
        (["--model", "tiny-flux2"], "--save DIR"),
        (["--model", "tiny-flux2", "--save", "A", "--seeds", "3"], "--save"),
        (["--steps", "12"], "--steps: only with --model"),
        (["--model", "nope", "--save", "B"], "nope"),
    ],
)
def test_a_save_that_does_not_match_is_refused_in_one_line_before_any_model_loads(saved, capsys, argv, says):
    before = sorted(p.relative_to(saved) for p in (saved / "A").rglob("*"))
    out = saved / "refused"
    folders = [str(saved / a) if a in ("A", "B") else a for a in argv]
    assert calib_main(["drift", *folders, "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and says in err[0], err
    assert not out.exists() and not (saved / "B").exists()
    assert sorted(p.relative_to(saved) for p in (saved / "A").rglob("*")) == before


@pytest.mark.slow
def test_a_trained_model_saved_and_judged_again_is_unchanged(tmp_path):
    """The done-when of the per-model flow on a trained model with its packaged gate."""
    assert (
        calib_main(["drift", "--model", "tiny-open-flux1", "--save", str(tmp_path / "A"), "--out", str(tmp_path / "o")])
        == 0
    )
    folder = tmp_path / "A" / "effect" / "tiny-open-flux1"
    gate = json.loads((folder / "gate.json").read_text())
    assert gate["source"].startswith("packaged tiny-open-flux1") and gate["skip_first_n_steps"] == 2
    tolerance = json.loads((folder / "tolerance.json").read_text())
    assert tolerance["provenance"]["variant"] == "tiny-open-flux1" and len(tolerance["thresholds"]) >= 2
    assert "tiny-open-flux1: gate packaged" in (tmp_path / "A" / "progress.log").read_text()
    out = tmp_path / "after"
    assert calib_main(["drift", "--model", "tiny-open-flux1", "--against", str(tmp_path / "A"), "--out", str(out)]) == 0
    (line,) = json.loads((out / "verdict.json").read_text())["verdicts"]
    assert line["status"] == verdict.UNCHANGED, line["line"]


@pytest.mark.slow
def test_a_release_that_changes_one_family_asks_a_refit_for_that_family_only(tmp_path):
    """Every family's effect model against the committed save, under a fake release that changes FLUX.2 only."""
    site = fake_release.build("flux2-decisions", tmp_path / "site")
    result = fake_release.run_drift(["--out", "o", "--dtypes", "float32"], site, tmp_path)
    report = json.loads((tmp_path / "o" / "verdict.json").read_text())
    by_family = {}
    for line in report["verdicts"]:
        by_family.setdefault(line["family"], set()).add(line["status"])
    assert by_family.pop("flux2") == {verdict.REFIT}, [v["line"] for v in report["verdicts"]]
    assert all(s <= {verdict.UNCHANGED, verdict.HOLDS} for s in by_family.values()), by_family
    assert result.returncode == 1


def test_a_save_that_did_not_finish_is_named_so_and_never_judged_by(tmp_path, capsys):
    folder = tmp_path / "A" / "effect" / "tiny-flux2"
    folder.mkdir(parents=True)
    from calib.drift import model_runs

    model_runs.RUNS.save(folder, model_runs.plan_model("tiny-flux2").to_dict())
    argv = ["drift", "--model", "tiny-flux2", "--against", str(tmp_path / "A"), "--out", str(tmp_path / "o")]
    assert calib_main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "did not finish" in err[0] and "--save again" in err[0]
    assert not (tmp_path / "o").exists() and [p.name for p in folder.iterdir()] == ["fingerprint.json"]


def test_a_save_whose_model_does_not_load_says_so_and_exits_1(tmp_path, capsys, monkeypatch):
    from calib.run import arguments

    def refuse(*_args):
        raise RuntimeError("the weights do not fit this release")

    monkeypatch.setattr(arguments, "load_model", refuse)
    argv = ["drift", "--model", "tiny-flux2", "--save", str(tmp_path / "A"), "--out", str(tmp_path / "o")]
    assert calib_main(argv) == 1
    out = capsys.readouterr()
    assert "tiny-flux2: integration-broken" in out.out and "the weights do not fit this release" in out.out
    assert "saved; after the upgrade" not in out.out
    assert "the runs, gate and tolerance" not in out.out and "not saved: tiny-flux2" in out.out
    assert "failed" in (tmp_path / "A" / "progress.log").read_text()
