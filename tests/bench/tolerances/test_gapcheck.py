"""Slow lane (``make test-slow``): the gap check end to end against this hardware's tolerances."""

from __future__ import annotations

import json
import re

import pytest

import teacache
from bench.tolerances import gapcheck
from tests import ROOT
from tests.conftest import patch_everywhere

pytestmark = pytest.mark.slow


def test_gapcheck_on_tiny_flux1_catches_the_mutants_its_tolerances_exist_for(tmp_path, capsys):
    """Every tolerance catches a mutant it exists for; the one-step-late decision escapes them all on this random-
    weight model, which is a finding: exit 1, named."""
    assert gapcheck.main(["--model", "tiny-flux1", "--max-prompts", "1", "--out", str(tmp_path)]) == 1
    assert "finding: no tolerance catches late-decision (exit 1)" in capsys.readouterr().out
    summary = json.loads((tmp_path / "gapcheck.json").read_text())["summary"]
    assert gapcheck.findings(summary) == ["no tolerance catches late-decision"]
    table = summary["table"]
    assert all(entry["noise_passes"] for entry in table.values())
    assert table["proxy_noop"]["mutants"]["tail-twice"]["caught"]
    assert table["skip_band"]["mutants"]["never-engages"]["caught"]
    assert table["restore"]["mutants"]["leaky-restore"]["caught"]
    assert table["ssim_floor"]["mutants"]["stale-residual"]["caught"]
    assert (tmp_path / "gapcheck.md").read_text().startswith("# Gap check: tiny-flux1")


def test_gapcheck_without_weights_is_one_line(tmp_path, monkeypatch, capsys):
    """A model whose weights cannot be had (no network here) is one line about --model, as record and sweep say."""
    import calib.run.arguments

    def no_network(*_args, **_kwargs):
        raise ConnectionError("[Errno -3] Temporary failure in name resolution")

    patch_everywhere(monkeypatch, teacache, "load_model", no_network)
    # the tolerances are checked before any model loads: give flux1-dev tiny-flux1's, so the loader is reached
    source = (ROOT / "tests/tolerances/cpu_amd_epyc_2c.py").read_text()
    names = re.findall(r"^TINY_FLUX1_(\w+) = ", source, flags=re.M)
    tolerances = tmp_path / "tolerances_with_dev.py"
    tolerances.write_text(source + "".join(f"\nFLUX1_DEV_{n} = TINY_FLUX1_{n}" for n in names) + "\n")
    tolerances = str(tolerances)
    argv = ["--model", "dev", "--max-prompts", "1", "--tolerances", tolerances, "--out", str(tmp_path / "out")]
    assert gapcheck.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--model: cannot load dev (ConnectionError" in err
    assert calib.run.arguments.load_model  # the one loader every command shares
    assert not (tmp_path / "out").exists()


def test_gapcheck_render_only_names_a_missing_field(tmp_path, capsys):
    (tmp_path / "gapcheck.json").write_text("{}")
    assert gapcheck.main(["--render-only", "--out", str(tmp_path)]) == 2
    assert "lacks the field 'summary'" in capsys.readouterr().err


def test_gapcheck_run_again_keeps_its_files_and_says_so(tmp_path, capsys):
    """The report and its data stay byte for byte; the progress log, a log, gains the second run's lines."""
    argv = ["--model", "tiny-flux1", "--max-prompts", "1", "--out", str(tmp_path)]

    def artifacts() -> dict[str, bytes]:
        return {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file() and p.name != "progress.log"}

    assert gapcheck.main(argv) == gapcheck.EXIT_FINDING  # late-decision: see the test above
    files = artifacts()
    log = (tmp_path / "progress.log").read_text()
    capsys.readouterr()
    assert gapcheck.main(argv) == gapcheck.EXIT_FINDING
    assert "kept" in capsys.readouterr().out
    assert artifacts() == files and set(files) == {"gapcheck.json", "gapcheck.md"}
    assert (tmp_path / "progress.log").read_text().startswith(log)
