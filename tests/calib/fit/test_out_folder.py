"""fit --out on a folder holding another fit: refused without --force; a fit replaced takes its old plots with it."""

from __future__ import annotations

import json

from calib.fit import command as fitmod
from calib.fit.files import PLOT_FILES
from tests.calib.conftest import TRACE_PROVENANCE, traces


def _traces(root, shift: float):
    rec = root / f"rec-{shift}"
    rec.mkdir()
    traces(shift_per_step=shift).to_parquet(rec / "traces.parquet", index=False)
    (rec / "provenance.json").write_text(json.dumps(TRACE_PROVENANCE))
    return str(rec / "traces.parquet")


def _plots(out) -> set[str]:
    return {name for name in PLOT_FILES.values() if (out / name).exists()}


def test_a_fit_of_other_traces_is_refused_without_force_and_replaced_with_its_plots_with_it(tmp_path, capsys):
    first, second, out = _traces(tmp_path, 0.0), _traces(tmp_path, 0.2), tmp_path / "fit"
    assert fitmod.main([first, "--out", str(out)]) == 0
    plots, before = _plots(out), (out / "fit.json").read_bytes()
    assert plots
    capsys.readouterr()
    assert fitmod.main([second, "--out", str(out), "--no-plots"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "fit of other traces" in err[0] and "--force" in err[0], err
    assert (out / "fit.json").read_bytes() == before and _plots(out) == plots
    assert fitmod.main([second, "--out", str(out), "--no-plots", "--force"]) == 0
    assert json.loads((out / "fit.json").read_text())["input"]["files"][0]["path"].endswith("rec-0.2/traces.parquet")
    assert not _plots(out)  # drawn from the fit replaced: gone with it


def test_the_same_traces_refit_without_plots_leave_no_stale_plot(tmp_path):
    first, out = _traces(tmp_path, 0.0), tmp_path / "fit"
    assert fitmod.main([first, "--out", str(out)]) == 0 and _plots(out)
    assert fitmod.main([first, "--out", str(out), "--no-plots", "--form", "poly"]) == 0
    assert not _plots(out)
