"""One trace reader for fit, replay, sweep --traces and compare-hardware: formats, run identity, steps placed
by their step column, num_steps inferred, mlx-teacache calibrations, and the same refusals everywhere."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

from bench.compare import command as compare_hardware
from bench.sweep import command as sweep_cmd
from bench.sweep import replay as replay_cmd
from calib.fit import command as fit_cmd
from calib.fit.coefficient_sources import resolve_coefficients
from calib.fit.errors import FitError
from calib.traces.errors import TraceError
from calib.traces.reader import load_traces
from teacache.gate import GateConfig, replay
from teacache.rescale import RescaleFunction
from tests.bench.compare.conftest import make_campaign

LINE = "0,0,0,1.5,0.01"  # y = 1.5 x + 0.01, highest power first
N_STEPS = 12


def other_tool_rows(n_prompts: int = 5, n_steps: int = N_STEPS, seed: int = 0) -> pd.DataFrame:
    """Like another tool's CSV: prompt_id, step, x_rel_l1, y_rel_l1; steps 1..N-1; no num_steps, run_id or seed."""
    rng = np.random.default_rng(seed)
    rows = []
    for p in range(n_prompts):
        for step in range(1, n_steps):
            x = float(rng.uniform(0.02, 0.2))
            rows.append({"prompt_id": f"p{p}", "step": step, "x_rel_l1": x, "y_rel_l1": 0.01 + 1.5 * x})
    return pd.DataFrame(rows)


def replay_csv(tmp_path, capsys, frame: pd.DataFrame, *extra: str) -> tuple[pd.DataFrame, str, dict]:
    path = tmp_path / "traces.csv"
    frame.to_csv(path, index=False)
    out = tmp_path / "schedules.csv"
    args = [str(path), "--coefficients", LINE, "--x-range", "0.01,0.5", "--out", str(out), "--force", *extra]
    assert replay_cmd.main(args) == 0, capsys.readouterr().err
    err = capsys.readouterr().err
    provenance = json.loads((tmp_path / "schedules.provenance.json").read_text())
    return pd.read_csv(out), err, provenance


# ------------------------------------------------------------------------------- steps and num_steps


def test_a_trace_starting_at_step_1_is_placed_by_its_step_column(tmp_path, capsys):
    frame = other_tool_rows(n_prompts=1)
    frame.loc[frame["step"] == 4, "x_rel_l1"] = 0.4  # one large change: its position decides the schedule
    schedules, _, _ = replay_csv(tmp_path, capsys, frame, "--thresholds", "0.2")
    rescale = RescaleFunction((0, 0, 0, 1.5, 0.01), x_range=(0.01, 0.5))
    xs = [None, *frame.sort_values("step")["x_rel_l1"]]  # step 0 has no anchor
    expected = [d.step for d in replay(GateConfig(0.2, rescale), xs, num_steps=N_STEPS) if not d.compute]
    shifted = [d.step for d in replay(GateConfig(0.2, rescale), xs[1:], num_steps=N_STEPS) if not d.compute]
    assert expected != shifted  # the trace is one where a shift by one step shows
    row = schedules.iloc[0]
    assert json.loads(row["predicted_skipped_steps"]) == expected
    assert row["num_steps"] == N_STEPS and row["run_id"] == "p0" and row["predicted_skipped"] == len(expected)


def test_a_table_without_num_steps_is_inferred_and_said(tmp_path, capsys):
    frame = other_tool_rows()
    schedules, err, provenance = replay_csv(tmp_path, capsys, frame, "--thresholds", "0,0.3")
    assert (schedules["num_steps"] == N_STEPS).all()
    assert "inferred per run as max(step) + 1 = 12" in err
    assert provenance["num_steps"] == {"source": "inferred", "values": [N_STEPS]}
    # --num-steps sets it, and is recorded as the source
    schedules, err, provenance = replay_csv(tmp_path, capsys, frame, "--thresholds", "0.3", "--num-steps", "12")
    assert provenance["num_steps"] == {"source": "--num-steps", "values": [N_STEPS]} and "inferred" not in err
    # a longer schedule leaves steps 12 and 13 without a signal: a replay refuses to guess it
    frame.to_csv(tmp_path / "t.csv", index=False)
    assert replay_cmd.main([str(tmp_path / "t.csv"), "--thresholds", "0.3", "--num-steps", "14"]) == 2
    assert "no finite x_rel_l1 at step(s) 12, 13 of 1..13" in capsys.readouterr().err


def test_fit_on_another_tools_table_tries_the_time_aware_forms(tmp_path, capsys):
    frame = other_tool_rows()
    frame.to_csv(tmp_path / "t.csv", index=False)
    rc = fit_cmd.main([str(tmp_path / "t.csv"), "--out", str(tmp_path / "fit"), "--degree", "1", "--no-plots"])
    assert rc == 0
    err = capsys.readouterr().err
    assert "num_steps: no 'num_steps' column; inferred per run as max(step) + 1 = 12" in err
    fit = json.loads((tmp_path / "fit" / "fit.json").read_text())
    assert "poly+step" in {c["form"] for c in fit["candidates"]}
    assert fit["data"]["num_steps_source"] == "inferred" and fit["data"]["num_steps"] == [N_STEPS]
    assert fit["input"]["num_steps"] == {"source": "inferred", "values": [N_STEPS]}


def test_num_steps_from_the_table_wins_and_a_contradiction_is_refused(tmp_path):
    frame = other_tool_rows().assign(num_steps=N_STEPS)
    frame.to_csv(tmp_path / "t.csv", index=False)
    traces = load_traces([tmp_path / "t.csv"])
    assert traces.num_steps == {"source": "table", "values": [N_STEPS]} and traces.notes == []
    with pytest.raises(TraceError, match="--num-steps 20 disagrees with column 'num_steps' in t.csv \\(12\\)"):
        load_traces([tmp_path / "t.csv"], num_steps=20)
    frame.loc[3, "step"] = N_STEPS  # a step beyond the schedule
    frame.to_csv(tmp_path / "t.csv", index=False)
    with pytest.raises(TraceError, match="at or beyond num_steps"):
        load_traces([tmp_path / "t.csv"])


def test_run_identity_is_run_id_else_prompt_and_seed(tmp_path):
    frame = pd.concat([other_tool_rows(n_prompts=2).assign(seed=s) for s in (0, 1)], ignore_index=True)
    frame.to_csv(tmp_path / "seeds.csv", index=False)
    runs = load_traces([tmp_path / "seeds.csv"]).runs()
    assert sorted(r.run_id for r in runs) == ["p0-s0", "p0-s1", "p1-s0", "p1-s1"]
    assert {r.seed for r in runs} == {0, 1}
    frame.drop(columns="seed").to_csv(tmp_path / "noseed.csv", index=False)
    with pytest.raises(TraceError, match="duplicate"):  # without the seed the two runs cannot be told apart
        load_traces([tmp_path / "noseed.csv"])
    frame.assign(run_id=[f"r{i // (N_STEPS - 1)}" for i in range(len(frame))]).to_csv(tmp_path / "ids.csv", index=False)
    assert sorted(r.run_id for r in load_traces([tmp_path / "ids.csv"]).runs()) == ["r0", "r1", "r2", "r3"]


def test_replay_out_has_one_row_per_run_and_threshold(tmp_path, capsys):
    frame = pd.concat([other_tool_rows(n_prompts=3).assign(seed=s) for s in (0, 1)], ignore_index=True)
    schedules, _, provenance = replay_csv(tmp_path, capsys, frame, "--thresholds", "0,0.1,0.4")
    assert list(schedules.columns) == replay_cmd.SCHEDULE_COLUMNS
    assert len(schedules) == 6 * 3
    for row in schedules.itertuples():
        steps = json.loads(row.predicted_skipped_steps)
        assert row.predicted_skipped == len(steps) and row.run_id == f"{row.prompt_id}-s{row.seed}"
        streak = run = 0
        for s in range(row.num_steps):
            run = run + 1 if s in steps else 0
            streak = max(streak, run)
        assert row.longest_streak == streak
    assert (schedules[schedules["threshold"] == 0]["predicted_skipped"] == 0).all()
    assert (schedules[schedules["threshold"] == 0.4]["predicted_skipped"] > 0).all()
    assert provenance["rescale"]["x_range"] == [0.01, 0.5] and provenance["skip_first_n_steps"] == 1


def test_replay_skip_defaults_come_from_the_variant(tmp_path, capsys):
    frame = other_tool_rows(n_prompts=1).assign(variant="tiny-shapes")
    _, _, provenance = replay_csv(tmp_path, capsys, frame, "--thresholds", "0.3")
    assert provenance["skip_first_n_steps"] == 2 and provenance["gate_defaults_from"] == "variant tiny-shapes"
    _, _, provenance = replay_csv(tmp_path, capsys, frame, "--thresholds", "0.3", "--skip-first", "3")
    assert provenance["skip_first_n_steps"] == 3 and provenance["gate_defaults_from"] == "arguments"


def test_replay_skip_defaults_are_the_registrys():
    from teacache import variants

    for spec in variants.all_specs():
        assert replay_cmd.gate_defaults(spec.name)[:2] == (spec.skip_first_n_steps, 1), spec.name
    assert replay_cmd.gate_defaults("no-such-variant")[:2] == (1, 1)


def test_replay_gives_the_schedule_the_gate_gives_inside_a_generation(tiny_flux1, tmp_path, capsys):
    """Same numbers in, same schedule out: the decision log of a real generation, replayed from a CSV."""
    import teacache

    steps = 10
    rescale = RescaleFunction((0, 0, 0, 1.5, 0.01), x_range=(0.005, 0.8))
    for threshold in (0.15, 0.4):
        with teacache.apply_teacache(tiny_flux1, rel_l1_thresh=threshold, coefficients=rescale) as handle:
            tiny_flux1.generate_image(seed=2, prompt="a lighthouse", num_inference_steps=steps, height=64, width=64)
        log = handle.stats.log
        assert handle.stats.skipped > 0
        rows = [{"prompt_id": "p", "step": d.step, "x_rel_l1": d.x} for d in log if d.x is not None]
        pd.DataFrame(rows).to_csv(tmp_path / "log.csv", index=False)
        out = tmp_path / "s.csv"
        argv = [str(tmp_path / "log.csv"), "--coefficients", LINE, "--x-range", "0.005,0.8", "--thresholds",
                str(threshold), "--variant", "tiny-flux1", "--out", str(out), "--force"]  # fmt: skip
        assert replay_cmd.main(argv) == 0, capsys.readouterr().err
        row = pd.read_csv(out).iloc[0]
        assert json.loads(row["predicted_skipped_steps"]) == handle.stats.skipped_steps
        assert row["longest_streak"] == handle.stats.longest_skip_streak and row["num_steps"] == steps


# ---------------------------------------------------------------------------------------- mlx-teacache


def mlx_calibration(rows: pd.DataFrame, n_steps: int, signals: bool = False) -> dict:
    """A file laid out like mlx-teacache's _calibration_<variant>.json (pairs prompt by prompt, steps 1..N-1)."""
    rows = rows.sort_values(["prompt_id", "step"])
    xs, ys = rows["x_rel_l1"].tolist(), rows["y_rel_l1"].tolist()
    fit = {
        "coefficients_c4_to_c0": list(np.polyfit(xs, ys, 4)),
        "fit_r_squared": 0.99,
        "x_min": min(xs),
        "x_max": max(xs),
        "x_values": xs,
        "y_values": ys,
    }
    head = {"variant": "flux2-klein-4b", "num_inference_steps": n_steps, "height": 512, "width": 512,
            "guidance": 1.0, "seed": 42, "num_prompts": rows["prompt_id"].nunique(), "num_pairs": len(xs)}  # fmt: skip
    if not signals:
        return {**head, **fit}
    other = {**fit, "x_values": [2 * v for v in xs], "x_min": 2 * min(xs), "x_max": 2 * max(xs)}
    return {**head, "signals": {"A": fit, "B": other}}


def test_mlx_teacache_calibration_round_trip(tmp_path, capsys):
    rows = other_tool_rows()
    data = mlx_calibration(rows, N_STEPS)
    path = tmp_path / "_calibration_flux2_klein_4b.json"
    path.write_text(json.dumps(data))
    traces = load_traces([path])
    back = traces.frame[["prompt_id", "step", "x_rel_l1", "y_rel_l1"]].reset_index(drop=True)
    original = rows.assign(prompt_id=[f"p{int(p[1:]):02d}" for p in rows["prompt_id"]]).reset_index(drop=True)
    pd.testing.assert_frame_equal(back, original[["prompt_id", "step", "x_rel_l1", "y_rel_l1"]])
    assert traces.num_steps == {"source": "table", "values": [N_STEPS]} and traces.variants == ["flux2-klein-4b"]
    assert traces.provenance["resolution"] == "512x512" and traces.provenance["seed"] == 42
    rescale, source = resolve_coefficients(str(path), None)
    assert rescale.coefficients == tuple(data["coefficients_c4_to_c0"])
    assert rescale.x_range == (data["x_min"], data["x_max"]) and "mlx-teacache" in source
    np.testing.assert_allclose(rescale(np.array([0.05, 0.1])), np.polyval(data["coefficients_c4_to_c0"], [0.05, 0.1]))
    # its raw pairs refitted here, its own tuple scored against the refit
    out = tmp_path / "fit"
    assert fit_cmd.main([str(path), "--out", str(out), "--compare", str(path), "--degree", "1", "--no-plots"]) == 0
    comp = json.loads((out / "fit.json").read_text())["comparison"]
    assert comp["x_range"] == [data["x_min"], data["x_max"]] and comp["r2"] > 0.999
    assert "mlx-teacache calibration _calibration_flux2_klein_4b.json" in comp["source"]


def test_mlx_teacache_signals_are_named_and_a_tuple_only_file_is_coefficients(tmp_path, capsys):
    path = tmp_path / "_calibration_qwen.json"
    path.write_text(json.dumps(mlx_calibration(other_tool_rows(), N_STEPS, signals=True)))
    with pytest.raises(TraceError, match=r"holds signals A, B; name one as _calibration_qwen.json#A"):
        load_traces([path])
    b = load_traces([f"{path}#B"]).frame
    a = load_traces([f"{path}#A"]).frame
    np.testing.assert_allclose(b["x_rel_l1"], 2 * a["x_rel_l1"])
    assert resolve_coefficients(f"{path}#B", None)[0].x_range == (2 * a["x_rel_l1"].min(), 2 * a["x_rel_l1"].max())
    tuple_only = {k: v for k, v in mlx_calibration(other_tool_rows(), N_STEPS).items() if not k.endswith("_values")}
    path = tmp_path / "_calibration_flux2_klein_4b.json"
    path.write_text(json.dumps(tuple_only))
    assert fit_cmd.main([str(path), "--out", str(tmp_path / "o")]) == 2
    assert "holds no raw x_values/y_values" in capsys.readouterr().err
    assert resolve_coefficients(str(path), None)[0].coefficients == tuple(tuple_only["coefficients_c4_to_c0"])


def test_x_range_goes_with_numbers_only(tmp_path):
    rescale, _ = resolve_coefficients("1,0.1", None, (0.02, 0.3))
    assert rescale.x_range == (0.02, 0.3)
    assert resolve_coefficients("1,0.1", None)[0].x_range == (0.0, math.inf)
    with pytest.raises(FitError, match="carry their own calibrated range"):
        resolve_coefficients("packaged", "tiny-flux1", (0.02, 0.3))
    path = tmp_path / "traces.csv"
    other_tool_rows().to_csv(path, index=False)
    for bad in ("0.3,0.1", "a,b", "0.1", "-1,2", "nan,1"):
        assert replay_cmd.main([str(path), "--thresholds", "0.1", "--coefficients", LINE, f"--x-range={bad}"]) == 2


# ------------------------------------------------------------------------ the same refusals everywhere


def _bad_tables(root) -> dict:
    good = other_tool_rows().assign(num_steps=N_STEPS, seed=0)
    root.mkdir(parents=True, exist_ok=True)
    cases = {}
    nan = good.copy()
    nan.loc[7, "x_rel_l1"] = np.nan
    cases["nan"] = (nan, "NaN or inf")
    inf = good.copy()
    inf.loc[9, "x_rel_l1"] = np.inf
    cases["inf"] = (inf, "NaN or inf")
    huge = good.copy()
    huge.loc[12, "x_rel_l1"] = 1e300  # finite, but no step's change: a fit's powers of it overflow
    cases["huge"] = (huge, "1 row(s) above 1e+06 (expected a relative L1 change of one step, at most 1e+06): "
                           f"prompt_id={good.loc[12, 'prompt_id']} step={good.loc[12, 'step']}")  # fmt: skip
    cases["duplicates"] = (pd.concat([good, good.iloc[:3]]), "duplicate (run, step) keys")
    cases["missing column"] = (good.drop(columns="x_rel_l1"), "lacks column(s) x_rel_l1")
    cases["zero rows"] = (good.iloc[:0], "empty input")
    out = {}
    for name, (frame, words) in cases.items():
        path = root / f"{name.replace(' ', '-')}.parquet"
        frame.to_parquet(path, index=False)
        out[name] = (path, words)
    junk = root / "unreadable.parquet"
    junk.write_bytes(b"not a parquet file")
    out["unreadable"] = (junk, "cannot read")
    return out


BAD = ["nan", "inf", "huge", "duplicates", "missing column", "zero rows", "unreadable"]


def _one_line(err: str) -> str:
    lines = [line for line in err.strip().splitlines() if line.strip()]
    assert len(lines) == 1, err
    return lines[0]


@pytest.mark.parametrize("case", BAD)
def test_every_command_refuses_bad_traces_the_same_way(tmp_path, capsys, case, no_model):
    path, words = _bad_tables(tmp_path / "in")[case]
    commands = {
        "fit": lambda out: fit_cmd.main([str(path), "--out", str(out)]),
        "replay": lambda out: replay_cmd.main([str(path), "--thresholds", "0.1", "--out", str(out / "s.csv")]),
        "sweep": lambda out: sweep_cmd.main(
            ["--model", "tiny-flux1", "--steps", "12", "--thresholds", "0.1", "--traces", str(path), "--out", str(out)]
        ),
    }
    for name, command in commands.items():
        out = tmp_path / f"out-{name}"
        assert command(out) == 2, name  # no_model: refused before any model is loaded
        line = _one_line(capsys.readouterr().err)
        assert words in line, (name, line)
        assert not out.exists(), name
    # compare-hardware reads a campaign's traces/traces.parquet with the same reader
    camp_a, camp_b = make_campaign(tmp_path / "hw", "cpu-test-2c"), make_campaign(tmp_path / "hw", "cuda-test-gpu")
    (camp_b / "traces").mkdir()
    (camp_b / "traces" / "traces.parquet").write_bytes(path.read_bytes())
    out = tmp_path / "out-compare"
    assert compare_hardware.main([str(camp_a), str(camp_b), "--out", str(out), "--no-plot"]) == 2
    line = _one_line(capsys.readouterr().err)
    assert words in line and "traces.parquet" in line and not out.exists()
