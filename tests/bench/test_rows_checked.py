"""Tables going into a report or a tolerance are checked like traces; bad values are one line, not a figure.

A duplicated row counts its pair twice in every percentile; a NaN SSIM or an infinite speedup is no
measurement. ``teacache-bench report`` and ``teacache-bench tolerances`` refuse both, as the trace reader
refuses duplicated steps and non-finite signals. A tolerance from fewer pairs than its rule is provisional.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from bench.report import command as report
from bench.tolerances import derive
from tests import ROOT

SWEEP = ROOT / "results/cpu-amd-epyc-2c/tiny-shapes/0.24.0/sweep"


@pytest.fixture
def sweep_copy(tmp_path) -> Path:
    folder = tmp_path / "sweep"
    folder.mkdir()
    for name in ("runs.parquet", "decisions.parquet", "noop.parquet", "provenance.json"):
        shutil.copy(SWEEP / name, folder / name)
    return folder


def _spoil(folder: Path, how: str) -> None:
    runs = pd.read_parquet(folder / "runs.parquet")
    at = runs.index[(runs["kind"] == "teacache") & np.isclose(runs["threshold"].fillna(-1), 0.03)]
    if how == "duplicate":
        runs = pd.concat([runs, runs.loc[[at[0]]]], ignore_index=True)
    elif how == "nan-ssim":
        runs.loc[at[0], ["ssim", "psnr"]] = np.nan
    elif how == "inf-speedup":  # speedup is derived on reading: a loop that took no time makes it infinite
        runs.at[at[0], "wall_s"] = np.zeros(len(runs.at[at[0], "wall_s"]))
    runs.to_parquet(folder / "runs.parquet", index=False)


SPOILS = {"duplicate": "rows repeat a run", "nan-ssim": "'ssim'", "inf-speedup": "'speedup'"}


@pytest.mark.parametrize("how", sorted(SPOILS))
def test_report_refuses_a_table_with_duplicated_or_non_finite_rows(how, sweep_copy, tmp_path, capsys):
    _spoil(sweep_copy, how)
    assert report.main([str(sweep_copy), "--out", str(tmp_path / "report")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and SPOILS[how] in err
    assert not (tmp_path / "report").exists()


@pytest.mark.parametrize("how", sorted(SPOILS))
def test_tolerances_refuse_a_table_with_duplicated_or_non_finite_rows(how, sweep_copy, tmp_path, capsys):
    _spoil(sweep_copy, how)
    out = tmp_path / "tolerances.py"
    assert derive.main([str(sweep_copy), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and SPOILS[how] in err
    assert not out.exists()


def test_a_floor_from_fewer_pairs_than_the_rule_is_provisional(sweep_copy, monkeypatch):
    """PSNR leaves out identical images (+inf): a floor from the few pairs left is provisional, even when the
    sweep as a whole has enough pairs to be calibrated."""
    runs = pd.read_parquet(sweep_copy / "runs.parquet")
    at = (runs["kind"] == "teacache") & np.isclose(runs["threshold"].fillna(-1), 0.03)
    pairs = sorted(runs.loc[at, "pair_id"].unique())
    monkeypatch.setattr(derive, "CALIBRATED_MIN_PAIRS", len(pairs))
    identical = at & runs["pair_id"].isin(pairs[:2])
    runs.loc[identical, "psnr"] = np.inf
    runs.to_parquet(sweep_copy / "runs.parquet", index=False)
    derived = derive.derive(sweep_copy)
    assert derived["status"] == "calibrated"
    psnr_note = derived["constants"]["TINY_SHAPES_PSNR_FLOOR"][1]
    assert psnr_note[-1].startswith(f"provisional: from {len(pairs) - 2} pairs")
    assert derived["constants"]["TINY_SHAPES_SSIM_FLOOR"][1][-1] == "calibrated"
