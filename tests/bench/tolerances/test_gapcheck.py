"""Slow lane (``make test-slow``): the gap check end to end against this hardware's tolerances."""

from __future__ import annotations

import json

import pytest

from bench.tolerances import gapcheck

pytestmark = pytest.mark.slow


def test_gapcheck_on_tiny_flux1_catches_the_mutants_its_tolerances_exist_for(tmp_path):
    assert gapcheck.main(["--model", "tiny-flux1", "--max-prompts", "1", "--out", str(tmp_path)]) == 0
    summary = json.loads((tmp_path / "gapcheck.json").read_text())["summary"]
    table = summary["table"]
    assert all(entry["noise_passes"] for entry in table.values())
    assert table["proxy_noop"]["mutants"]["tail-twice"]["caught"]
    assert table["skip_band"]["mutants"]["never-engages"]["caught"]
    assert table["restore"]["mutants"]["leaky-restore"]["caught"]
    assert table["ssim_floor"]["mutants"]["stale-residual"]["caught"]
    assert (tmp_path / "gapcheck.md").read_text().startswith("# Gap check: tiny-flux1")
