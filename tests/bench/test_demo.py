"""``make demo`` (teacache-demo) speaks as the command the user ran, not as the campaign it runs."""

from __future__ import annotations

import pytest

from calib.run.interrupts import Interrupted


@pytest.mark.parametrize("stop", [KeyboardInterrupt(), Interrupted("interrupted: 3 of 8 runs are saved")])
def test_ctrl_c_during_the_demo_names_the_demo(stop, tmp_path, monkeypatch, capsys):
    from bench import campaign, demo

    def interrupted(*_args, **_kwargs):
        raise stop

    monkeypatch.setattr(campaign, "run_campaign", interrupted)
    assert demo.main(["--out", str(tmp_path / "demo")]) == 130
    err = capsys.readouterr().err
    assert err.startswith("teacache-demo: interrupted") and "teacache-bench campaign" not in err, err


def test_a_bad_demo_argument_names_the_demo(capsys):
    from bench import demo

    with pytest.raises(SystemExit) as exited:
        demo.main(["--ssim-floor", "x"])
    assert exited.value.code == 2
    assert capsys.readouterr().err.startswith("teacache-demo: ")
