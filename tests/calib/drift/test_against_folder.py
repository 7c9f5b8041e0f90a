"""drift --against DIR --out DIR: refused before any model loads, the save left as it was."""

from __future__ import annotations

import pytest

from calib.cli import main as calib_main


@pytest.mark.parametrize("spelling", ["{save}", "{save}/", "{save}/../{name}"])
def test_the_repeated_runs_never_go_into_the_save_they_are_judged_against(tmp_path, capsys, spelling):
    from tests import ROOT

    save = ROOT / "calib" / "drift" / "data" / "save-mflux-0.24.0"
    before = sorted(p.name for p in save.rglob("*"))
    out = spelling.format(save=save, name=save.name)
    rc = calib_main(["drift", "--model", "tiny-open-flux1", "--against", str(save), "--out", out])
    err = capsys.readouterr().err
    assert rc == 2 and "is the --against folder" in err and len(err.strip().splitlines()) == 1
    assert sorted(p.name for p in save.rglob("*")) == before
