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


def test_the_demo_times_one_repeat_unless_told_otherwise(monkeypatch):
    from bench import demo

    seen = []
    monkeypatch.setattr(demo, "campaign_main", lambda argv, prog: seen.append(list(argv)) or 0)
    monkeypatch.setattr(demo, "check_supported_mflux", lambda: None)
    demo._main([])
    demo._main(["--repeats", "3"])
    demo._main(["--out=elsewhere"])
    assert seen[0][seen[0].index("--repeats") + 1] == demo.DEMO_REPEATS == "1"
    assert seen[1].count("--repeats") == 1 and seen[1][seen[1].index("--repeats") + 1] == "3"
    assert "--out" not in seen[2] and "--out=elsewhere" in seen[2]  # a user's --out=DIR is not overridden
