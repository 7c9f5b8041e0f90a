"""The git state a provenance block records: the commit, and what was uncommitted only when something was."""

from __future__ import annotations

import json
import subprocess

import pytest

from teacache import provenance


def _git(root, *args: str) -> None:
    subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True)


@pytest.fixture
def checkout(tmp_path, monkeypatch):
    root = tmp_path / "checkout"
    root.mkdir()
    _git(root, "init", "-q")
    (root / "a.py").write_text("x = 1\n")
    _git(root, "add", "a.py")
    _git(root, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "one")
    monkeypatch.setattr(provenance, "_PROJECT_ROOT", root)
    return root


def test_a_clean_checkout_records_its_commit_and_no_dirty_word(checkout):
    git = provenance.git_commit()
    assert git["dirty"] is False and git["changed"] == [] and len(git["commit"]) == 40
    assert provenance.describe_git(git) == git["commit"]
    (checkout / "notes.txt").write_text("untracked: not a change to the code")
    assert provenance.git_commit()["dirty"] is False


def test_a_dirty_checkout_says_what_is_uncommitted(checkout):
    (checkout / "a.py").write_text("x = 2\n")
    git = provenance.git_commit()
    assert git["dirty"] is True and git["changed"] == ["a.py"] and git["n_changed"] == 1
    assert provenance.describe_git(git) == f"{git['commit']} (uncommitted changes to 1 tracked file: a.py)"


def test_measured_data_a_run_writes_leaves_the_code_clean(checkout):
    """A campaign's sweep finds its own record and fit uncommitted: data, not a change to the code."""
    (checkout / "results" / "cpu").mkdir(parents=True)
    (checkout / "results" / "cpu" / "fit.json").write_text("{}")
    _git(checkout, "add", "results")
    _git(checkout, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "data")
    (checkout / "results" / "cpu" / "fit.json").write_text('{"refit": 1}')
    assert provenance.git_commit()["dirty"] is False
    (checkout / "a.py").write_text("x = 2\n")
    assert provenance.git_commit()["changed"] == ["a.py"]


def test_sources_inside_another_checkout_record_no_commit(checkout, monkeypatch):
    (checkout / "sub").mkdir()
    monkeypatch.setattr(provenance, "_PROJECT_ROOT", checkout / "sub")
    git = provenance.git_commit()
    assert git["commit"] is None and provenance.describe_git(git).startswith("unknown")


def test_old_records_read_as_they_always_did():
    assert provenance.describe_git({"commit": "c" * 40, "dirty": True}) == "c" * 40 + " (dirty work tree)"
    assert provenance.describe_git({"commit": None, "dirty": None}) == "None"


def test_a_report_made_from_a_clean_sweep_does_not_call_it_dirty(tmp_path):
    from bench.report import command as report
    from tests.bench.report.conftest import make_sweep

    sweep = make_sweep(tmp_path / "sweep")
    prov = json.loads((sweep / "provenance.json").read_text())
    prov["git"] = {"commit": "0" * 40, "dirty": False, "changed": [], "n_changed": 0}
    (sweep / "provenance.json").write_text(json.dumps(prov))
    report.build_report(sweep, tmp_path / "report")
    assert f"- Git: {'0' * 40}\n" in (tmp_path / "report" / "report.md").read_text()
    prov["git"] = {"commit": "0" * 40, "dirty": True, "changed": ["calib/fit/command.py"], "n_changed": 1}
    (sweep / "provenance.json").write_text(json.dumps(prov))
    report.build_report(sweep, tmp_path / "again")
    text = (tmp_path / "again" / "report.md").read_text()
    assert "(uncommitted changes to 1 tracked file: calib/fit/command.py)" in text
