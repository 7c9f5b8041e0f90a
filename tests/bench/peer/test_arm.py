"""mlx-teacache as an arm: its wrapper on the tiny models, in the sweep's and fullsize's timing loops."""

from __future__ import annotations

import json
import warnings

import mlx.core as mx
import pandas as pd
import pytest

pytest.importorskip("mlx_teacache")

import teacache  # noqa: E402
from bench.peer import arm as peer  # noqa: E402
from bench.peer import gate as peer_gate  # noqa: E402
from bench.sweep import baselines, records  # noqa: E402
from bench.timing import fullsize as bench_fullsize  # noqa: E402
from bench.timing import fullsize_tables  # noqa: E402
from calib.run.generation import generate  # noqa: E402
from teacache.gate import GateConfig  # noqa: E402
from teacache.rescale import RescaleFunction  # noqa: E402

IDENTITY = RescaleFunction((1.0, 0.0))
ARGS = ("a red fox in the snow", 0, 8, 64, 64)  # prompt, seed, steps, width, height


def our_signal(model, guidance: float) -> list[float | None]:
    """Our proxy's signal at every step (nothing skipped: every step is inside skip_first_n_steps)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", teacache.NeverSkipsWarning)
        return _signal(model, guidance)


def _signal(model, guidance: float) -> list[float | None]:
    with teacache.apply_teacache(model, rel_l1_thresh=1.0, coefficients=IDENTITY, skip_first_n_steps=8) as handle:
        generate(model, *ARGS, guidance)
        return [d.x for d in handle.stats.log]


def test_on_flux1_its_wrapper_does_what_its_gate_replayed_on_our_signal_predicts(tiny_flux1):
    xs = our_signal(tiny_flux1, 3.5)
    vanilla = generate(tiny_flux1, *ARGS, 3.5)
    every = peer.generate_with(tiny_flux1, peer.EVERY_STEP, *ARGS, 3.5)
    assert every.variant_id == "flux1-dev" and every.skipped_steps == []
    assert mx.array_equal(every.generation.latents, vanilla.latents).item()  # every step computed: bit-exact
    settings = peer_gate.PeerSettings(peer_gate.peer_coefficients(IDENTITY))
    skipping = 0
    for threshold in (0.1, 0.2, 0.4):
        run = peer.generate_with(tiny_flux1, {"rel_l1_thresh": threshold, "coefficients": settings.coefficients},
                                 *ARGS, 3.5)  # fmt: skip
        kinds = peer_gate.replay_peer(xs, threshold, settings)
        assert run.decisions == kinds  # the same signal on FLUX.1: the replay is its schedule, step for step
        skipping += len(run.skipped_steps)
    assert skipping > 0
    assert peer.refusal(tiny_flux1, IDENTITY) is None


def test_on_z_image_its_signal_is_another_and_no_threshold_it_takes_skips():
    """Why mlx-teacache skipped nothing on Z-Image where ours skipped: it gates on the first main layer's
    residual (rel-L1 above 1 per step here), ours on the noise refiner's modulated input; with the identity
    rescale one gated step already reaches any threshold its apply_teacache accepts (at most 1)."""
    model = teacache.load_model("tiny-z-image")
    xs = our_signal(model, 4.0)
    every = peer.generate_with(model, peer.EVERY_STEP, *ARGS, 4.0)
    theirs = [x for x in every.signal if x is not None]
    ours = [x for x in xs if x is not None]
    assert every.variant_id == "z-image-base" and len(theirs) == 8 - 3  # forced first/last, step 1 seeds
    assert min(theirs) > 1.0 > 0.3 > max(ours)
    run = peer.generate_with(model, {"rel_l1_thresh": 1.0, "coefficients": (0.0, 0.0, 0.0, 1.0, 0.0)}, *ARGS, 4.0)
    assert run.skipped_steps == []
    with teacache.apply_teacache(model, rel_l1_thresh=0.3, coefficients=IDENTITY) as handle:
        generate(model, *ARGS, 4.0)
        assert handle.stats.skipped > 0


def test_what_it_cannot_run_is_said_not_raised(monkeypatch):
    shapes = teacache.load_model("tiny-shapes")
    assert "no variant for TinyShapesPipeline" in peer.refusal(shapes)
    assert "x only" in peer.refusal(rescale=RescaleFunction((1.0, 0.0), form="poly+step", time_coefficients=(0.1,)))
    assert "[0, 1]" in peer.refusal(threshold=1.5)
    assert "0.24.0" in peer._declared_mflux_range() and "0.26.0" not in peer._declared_mflux_range()
    assert "0.17.4" not in peer.MfluxRange(">=0.17.5,<0.26") and "0.25.9rc1" in peer.MfluxRange(">=0.17.5,<0.26")
    monkeypatch.setattr(peer, "installed_version", lambda name: "0.99.0")
    assert "declares mflux <0.26,>=0.17.5; mflux 0.99.0 is installed" in peer.refusal()
    monkeypatch.setattr(peer, "version", lambda: None)
    assert "not installed" in peer.refusal()
    assert (
        baselines.mlx_teacache_arms({0.1: GateConfig(0.1, IDENTITY)}, ("mlx-teacache",), shapes, say=lambda _: None)
        == []
    )


def test_the_sweep_arm_is_timed_against_the_same_vanilla_run(tiny_flux1):
    gate = GateConfig(0.2, IDENTITY)
    arms = [baselines.teacache(gate), baselines.mlx_teacache(gate)]
    assert baselines.Arm.from_dict(arms[1].to_dict()) == arms[1]
    context = {"variant": "tiny-flux1", "model": "tiny-flux1", "steps": 8, "width": 64, "height": 64, "guidance": 3.5}
    kept: dict = {}
    rows = baselines.measure_pair(tiny_flux1, ("fox", ARGS[0], 0), context, arms, repeats=2, kept=kept)
    assert [r["arm"] for r in rows] == ["vanilla", "teacache", "mlx-teacache"]
    ours, theirs = (row for _i, row in records.derive_columns(pd.DataFrame(rows)).iloc[1:].iterrows())
    assert theirs["arm_setting"] == "0.2" and theirs["threshold"] == 0.2 and len(theirs["wall_s"]) == 2
    xs = [d.x for d in kept["results"][1].decisions]  # our arm's signal: the same on FLUX.1
    kinds = peer_gate.replay_peer(xs, 0.2, peer_gate.PeerSettings(peer_gate.peer_coefficients(IDENTITY)))
    assert json.loads(theirs["skipped_steps"]) == [i for i, k in enumerate(kinds) if k == "skipped"]
    assert theirs["computed"] == 8 - theirs["skipped"] and theirs["speedup"] > 0
    assert json.loads(ours["skipped_steps"]) != json.loads(theirs["skipped_steps"])  # step 1: it seeds, ours skips


@pytest.fixture
def tiny_fullsize(monkeypatch):
    """``random-flux1-dev`` / ``random-z-image`` built as the tiny models (same pipeline classes, seconds on CPU)."""
    from teacache.models import fullsize

    tiny = {"flux1-dev": "tiny-flux1", "z-image": "tiny-z-image"}
    monkeypatch.setattr(fullsize, "build_random", lambda variant, **_: teacache.load_model(tiny[variant]))
    monkeypatch.setattr(fullsize, "full_transformer", lambda variant, blocks=None: tiny[variant])
    monkeypatch.setattr(fullsize, "parameter_count", lambda _: 1000)


def test_fullsize_times_it_in_the_same_loop_and_says_where_it_cannot(tmp_path, tiny_fullsize, capsys, monkeypatch):
    import mlx_teacache

    match = mlx_teacache.match_variant  # as if its release had no Z-Image variant
    monkeypatch.setattr(
        mlx_teacache, "match_variant", lambda c, cls: None if cls.__name__ == "ZImage" else match(c, cls)
    )
    argv = ["--models", "random-flux1-dev,random-z-image", "--size", "32", "--steps", "8", "--repeats", "2",
            "--thresholds", "0.2", "--peer", "mlx-teacache", "--out", str(tmp_path)]  # fmt: skip
    assert bench_fullsize.main(argv) == 0
    summary = pd.read_csv(tmp_path / "summary.csv")
    assert list(summary.columns) == list(fullsize_tables.SUMMARY_COLUMNS)
    flux = summary[summary["variant"] == "flux1-dev"].set_index("arm")
    assert list(flux.index) == ["proxy-all", "gate", "mlx-teacache-all", "mlx-teacache"]
    assert flux.loc["mlx-teacache-all", "skipped"] == 0 and flux.loc["mlx-teacache-all", "noop_exact"]
    assert flux.loc["mlx-teacache", "threshold"] == 0.2 and flux["note"].isna().all()
    # its predicted count: its gate replayed over its own signal, read from the mlx-teacache-all run
    assert flux.loc["mlx-teacache", "skipped"] == flux.loc["mlx-teacache", "predicted_skipped"] > 0
    runs = pd.read_csv(tmp_path / "runs.csv")
    flux_runs = runs[runs["model"].str.contains("flux1")]
    assert sorted(flux_runs["arm"].unique()) == ["gate 0.2", "mlx-teacache 0.2", "mlx-teacache-all", "proxy-all",
                                                 "vanilla"]  # fmt: skip
    assert (flux_runs.groupby("arm")["repeat"].nunique() == 2).all()  # every arm in every repeat, interleaved
    zimage = summary[summary["variant"] == "z-image"].set_index("arm")
    assert list(zimage.index) == ["proxy-all", "gate", "mlx-teacache"]
    assert "no variant for ZImage" in zimage.loc["mlx-teacache", "note"]
    assert pd.isna(zimage.loc["mlx-teacache", "speedup"]) and zimage.loc["gate", "speedup"] > 0
    provenance = json.loads((tmp_path / "provenance.json").read_text())["models"]
    record = next(v["mlx_teacache"] for v in provenance.values() if v["variant"] == "flux1-dev")
    assert record["variant_id"] == "flux1-dev" and record["skipped_steps"]["mlx-teacache-all"] == []
    assert len(record["signal_trace"]) == 8 and record["signal_trace"][:2] == [None, None]
    assert "not run: mlx-teacache" in capsys.readouterr().out
    from bench.peer import table as peer_table

    assert peer_table.main([str(tmp_path)]) == 0
    table = capsys.readouterr().out.splitlines()
    flux_lines = [line for line in table if line.startswith("| random-flux1-dev")]
    assert len(flux_lines) == 2 and "every step computed" in flux_lines[0] and "bit-exact / bit-exact" in flux_lines[0]
    assert "threshold 0.2" in flux_lines[1]
    assert any("mlx-teacache not run" in line and "no variant for ZImage" in line for line in table)
    assert peer_table.main([str(tmp_path / "nothing")]) == 2


def test_fullsize_refuses_a_threshold_it_does_not_take_before_loading(tmp_path, capsys):
    argv = ["--models", "random-flux1-dev", "--thresholds", "1.5", "--peer", "mlx-teacache", "--out", str(tmp_path)]
    assert bench_fullsize.main(argv) == 2
    assert "--peer: apply_teacache takes rel_l1_thresh in [0, 1]" in capsys.readouterr().err
    assert not any(tmp_path.iterdir())


def test_a_sweep_with_the_mlx_teacache_arm(tmp_path, tiny_flux1, monkeypatch):
    from bench.report import command as report
    from bench.sweep import command as sweep_cmd
    from bench.sweep import records

    monkeypatch.setattr(teacache, "load_model", lambda name, *a, **k: tiny_flux1)
    prompts = tmp_path / "prompts.json"
    prompts.write_text(json.dumps({"fox": "a red fox in the snow"}))
    out = tmp_path / "sweep"
    argv = ["--model", "tiny-flux1", "--steps", "8", "--size", "32x32", "--seeds", "0", "--repeats", "1",
            "--prompts", str(prompts), "--thresholds", "0.1,0.3", "--coefficients", "1,0", "--baselines",
            "mlx-teacache", "--out", str(out)]  # fmt: skip
    assert sweep_cmd.main(argv) == 0
    runs = records.read_sweep(out).runs
    theirs = runs[runs["arm"] == "mlx-teacache"].set_index("arm_setting")
    assert sorted(theirs.index) == ["0.1", "0.3"] and (theirs["computed"] + theirs["skipped"] == 8).all()
    assert theirs.loc["0.3", "skipped"] >= theirs.loc["0.1", "skipped"] and theirs["ssim"].notna().all()
    provenance = json.loads((out / "provenance.json").read_text())
    assert provenance["arms"]["settings"]["mlx-teacache"] == ["0.1", "0.3"]
    files, _ = report.render(report.load_sweep(out))
    assert "mlx-teacache" in files["report.md"].decode()


def test_fullsize_keeps_our_rows_when_its_wrapper_fails(tmp_path, tiny_fullsize, monkeypatch):
    def broken(*_args, **_kwargs):
        raise RuntimeError("shape mismatch in its forward\nmore")

    monkeypatch.setattr(peer, "generate_with", broken)
    argv = ["--models", "random-flux1-dev", "--size", "32", "--steps", "6", "--repeats", "1", "--thresholds", "0.2",
            "--peer", "mlx-teacache", "--out", str(tmp_path)]  # fmt: skip
    assert bench_fullsize.main(argv) == 0
    summary = pd.read_csv(tmp_path / "summary.csv").set_index("arm")
    assert list(summary.index) == ["proxy-all", "gate", "mlx-teacache"]
    assert summary.loc["mlx-teacache", "note"] == (
        "its apply_teacache failed on this model: RuntimeError: shape mismatch in its forward"
    )
