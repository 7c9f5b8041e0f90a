"""Output folders of record and sweep: resume only with the same settings, one writer at a time, Ctrl-C.

Every command here gets the session's tiny-flux1 instead of building its own (one model load per
session, not per call); 4 steps at 32x32 on two prompts keep each command to seconds.
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import json
import os
import socket
import subprocess
import sys

import pandas as pd
import pytest

import calib.run.generation
import teacache
import teacache.core
from calib import record as record_cmd
from tests import ROOT
from tests.conftest import SMALL, one_line, patch_everywhere, record, sweep


def _patch_generate(monkeypatch, fn) -> None:
    patch_everywhere(monkeypatch, calib.run.generation, "generate", fn)


# ------------------------------------------------------------------------------------ fingerprint


def test_record_resumes_only_what_the_same_settings_made(tmp_path, prompts, shared_model, capsys):
    out = tmp_path / "traces"
    assert record(out, prompts) == 0
    before = (out / "traces.parquet").read_bytes(), (out / "provenance.json").read_bytes()
    capsys.readouterr()
    assert record(out, prompts, "--steps", "6", "--size", "64x64") == 2
    line = one_line(capsys.readouterr().err)
    assert "steps 4 (this run: 6)" in line and "size 32x32 (this run: 64x64)" in line
    assert "--force-new" in line and "new --out" in line
    assert ((out / "traces.parquet").read_bytes(), (out / "provenance.json").read_bytes()) == before
    assert record(out, prompts) == 0
    assert "2 runs (2 already done)" in capsys.readouterr().out


def test_a_new_mflux_release_does_not_resume_an_old_recording(tmp_path, prompts, shared_model, monkeypatch, capsys):
    out = tmp_path / "traces"
    assert record(out, prompts) == 0
    installed = importlib.metadata.version("mflux")
    real = importlib.metadata.version
    monkeypatch.setattr(importlib.metadata, "version", lambda name: "99.0.0" if name == "mflux" else real(name))
    capsys.readouterr()
    assert record(out, prompts) == 2
    assert f"versions.mflux {installed} (this run: 99.0.0)" in one_line(capsys.readouterr().err)


def test_force_new_starts_the_folder_afresh(tmp_path, prompts, shared_model, capsys):
    out = tmp_path / "traces"
    assert record(out, prompts) == 0
    (out / "notes.txt").write_text("not the recorder's")
    assert record(out, prompts, "--steps", "6", "--force-new") == 0
    assert "--force-new: removed" in capsys.readouterr().out
    assert set(pd.read_parquet(out / "traces.parquet")["num_steps"]) == {6}
    assert json.loads((out / "provenance.json").read_text())["steps"] == 6
    assert (out / "notes.txt").exists()


def test_new_seeds_extend_a_recording_and_both_are_recorded(tmp_path, prompts, shared_model, capsys):
    out = tmp_path / "traces"
    assert record(out, prompts) == 0
    first = (out / "runs" / "fox-s0.parquet").read_bytes()
    capsys.readouterr()
    assert record(out, prompts, "--seeds", "0,1") == 0
    assert "extending" in capsys.readouterr().out
    assert set(pd.read_parquet(out / "traces.parquet")["run_id"]) == {"fox-s0", "fox-s1", "tower-s0", "tower-s1"}
    assert (out / "runs" / "fox-s0.parquet").read_bytes() == first
    provenance = json.loads((out / "provenance.json").read_text())
    assert provenance["seeds"] == [0, 1]
    assert provenance["history"][-1]["added"] == {"seeds": [1]}


def test_sweep_resumes_only_what_the_same_settings_made(tmp_path, prompts, shared_model, capsys):
    out = tmp_path / "sweep"
    assert sweep(out, prompts) == 0
    before = (out / "runs.parquet").read_bytes()
    capsys.readouterr()
    assert sweep(out, prompts, "--thresholds", "0.01,0.02", "--repeats", "5", "--steps", "10") == 2
    line = one_line(capsys.readouterr().err)
    assert "steps 4 (this run: 10)" in line and "repeats 1 (this run: 5)" in line
    assert "thresholds 0,0.5 (this run: 0.01,0.02" in line and "--force-new" in line
    assert (out / "runs.parquet").read_bytes() == before


def test_new_thresholds_and_seeds_extend_a_sweep(tmp_path, prompts, shared_model, capsys):
    out = tmp_path / "sweep"
    assert sweep(out, prompts) == 0
    first = pd.read_parquet(out / "runs.parquet").set_index("run_id")
    capsys.readouterr()
    assert sweep(out, prompts, "--thresholds", "0,0.3,0.5", "--seeds", "0,1") == 0
    printed = capsys.readouterr().out
    assert "extending" in printed and "seeds 1" in printed and "thresholds 0.3" in printed
    runs = pd.read_parquet(out / "runs.parquet")
    assert runs.groupby("kind").size().to_dict() == {"teacache": 4 * 3, "vanilla": 4}
    tc = runs[runs["kind"] == "teacache"]
    assert tc.groupby("pair_id")["threshold"].apply(sorted).map(lambda t: t == [0.0, 0.3, 0.5]).all()
    kept = runs.set_index("run_id").loc[first.index]  # finished runs are kept, not measured again
    assert [list(w) for w in kept["wall_s"]] == [list(w) for w in first["wall_s"]]
    decisions = pd.read_parquet(out / "decisions.parquet")
    assert {"fox-s0-t0.3", "tower-s1-t0.3"} <= set(decisions["run_id"])
    provenance = json.loads((out / "provenance.json").read_text())
    assert provenance["thresholds"] == [0.0, 0.3, 0.5] and provenance["seeds"] == [0, 1]
    assert provenance["history"][-1]["added"] == {"seeds": [1], "thresholds": [0.3]}
    from bench.sweep import records

    records.read_sweep(out)  # the extended folder passes the reader every consumer uses
    capsys.readouterr()
    assert sweep(out, prompts, "--thresholds", "0.5", "--seeds", "0,1") == 2
    assert "to extend the folder, list all of its thresholds" in one_line(capsys.readouterr().err)


def test_a_folder_from_before_fingerprints_resumes_only_when_its_runs_agree(tmp_path, prompts, shared_model, capsys):
    """An earlier version wrote no fingerprint, resumed under any settings and rewrote provenance.json."""
    out = tmp_path / "traces"
    assert record(out, prompts) == 0
    (out / "fingerprint.json").unlink()
    capsys.readouterr()
    assert record(out, prompts) == 0  # provenance and runs agree with this run: adopted
    assert "made by an earlier version; its provenance.json matches" in capsys.readouterr().out
    history = json.loads((out / "fingerprint.json").read_text())["history"]
    assert "not recorded then: base_model, weights" in history[0]["adopted"]
    (out / "fingerprint.json").unlink()  # the journey of the bug: a rerun at 6 steps rewrote the provenance
    provenance = json.loads((out / "provenance.json").read_text())
    (out / "provenance.json").write_text(json.dumps({**provenance, "steps": 6}))
    assert record(out, prompts, "--steps", "6") == 2
    line = one_line(capsys.readouterr().err)
    assert "disagree with its provenance.json" in line and "steps 4; provenance: steps 6" in line
    (out / "provenance.json").unlink()  # an interrupted first run of an earlier version
    assert record(out, prompts) == 2
    assert "without a settings fingerprint or a readable provenance.json" in one_line(capsys.readouterr().err)


# ------------------------------------------------------------------------------------------- lock

HOLD = """
import sys, time
from calib.run.folder import folder_lock
with folder_lock(sys.argv[1], "teacache-bench sweep (holder)"):
    print("locked", flush=True)
    time.sleep(120)
"""


def test_one_writer_at_a_time_and_a_dead_writer_is_named(tmp_path, prompts, shared_model, capsys):
    out = tmp_path / "sweep"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(out)], stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert holder.stdout.readline().strip() == "locked"
        assert sweep(out, prompts) == 2
        line = one_line(capsys.readouterr().err)
        assert f"pid {holder.pid} on host {socket.gethostname()}" in line and "being written" in line
        assert sorted(p.name for p in out.iterdir()) == [".lock"]
    finally:
        holder.kill()  # SIGKILL: no clean-up, the lock file stays behind
        holder.wait()
    assert sweep(out, prompts) == 0
    printed = capsys.readouterr().out
    assert "stale lock" in printed and f"pid {holder.pid}" in printed and "no longer running" in printed
    assert not (out / ".lock").exists()


# ----------------------------------------------------------------------------------------- Ctrl-C


def _interrupt_on_call(monkeypatch, n: int, kind: str):
    from mflux.utils.exceptions import StopImageGenerationException

    real = calib.run.generation.generate
    calls = []

    def generate(model, *args):
        calls.append(args)
        if len(calls) == n:
            if kind == "mflux":  # what mflux's own loop raises on Ctrl-C
                raise StopImageGenerationException("Stopping image generation at step 2/4")
            raise KeyboardInterrupt
        return real(model, *args)

    _patch_generate(monkeypatch, generate)
    return real


@pytest.mark.parametrize("kind", ["mflux", "keyboard"])
def test_ctrl_c_during_record_says_what_is_saved_and_exits_130(tmp_path, prompts, shared_model, monkeypatch, capsys,
                                                                 kind):  # fmt: skip
    out = tmp_path / "traces"
    real = _interrupt_on_call(monkeypatch, 3, kind)  # the estimate's timed run, the first run, then Ctrl-C
    assert record(out, prompts) == 130
    line = one_line(capsys.readouterr().err)
    assert line == (
        f"teacache-calib record: interrupted: 1 of 2 runs are saved in {out / 'runs'}; "
        "run the same command again to resume"
    )
    _patch_generate(monkeypatch, real)
    assert record(out, prompts) == 0
    assert "(1 already done)" in capsys.readouterr().out


def test_ctrl_c_during_sweep_says_what_is_saved_and_exits_130(tmp_path, prompts, shared_model, monkeypatch, capsys):
    out = tmp_path / "sweep"
    # 2 warm-up generations, then per pair vanilla + 2 thresholds + the proxy-noop: call 8 is in the second pair
    _interrupt_on_call(monkeypatch, 8, "mflux")
    assert sweep(out, prompts) == 130
    line = one_line(capsys.readouterr().err)
    assert line == (
        f"teacache-bench sweep: interrupted: 1 of 2 pairs are saved in {out / 'pairs'}; "
        "run the same command again to resume"
    )
    assert not (out / "runs.parquet").exists()


# ------------------------------------------------------------------------------- recording overhead


def test_an_implausible_recording_overhead_is_not_stored_as_a_figure(tmp_path, prompts, shared_model, monkeypatch,
                                                                      capsys):  # fmt: skip
    real = calib.run.generation.generate

    def generate(model, *args):  # the recorder measured 35 % faster than vanilla: a busy machine
        gen = real(model, *args)
        return dataclasses.replace(gen, loop_s=0.65 if teacache.core.is_applied(model) else 1.0)

    _patch_generate(monkeypatch, generate)
    out = tmp_path / "traces"
    argv = [*SMALL, "--prompts", str(prompts), "--seeds", "0", "--overhead-pairs", "2", "--out", str(out)]
    assert record_cmd.main(argv) == 0
    assert "recording overhead: unreliable, not stored" in capsys.readouterr().out
    overhead = json.loads((out / "provenance.json").read_text())["recording_overhead"]
    assert overhead["reliable"] is False and overhead["median"] is None and overhead["min"] is None
    assert "-35.0%" in overhead["reason"]


@pytest.mark.slow
def test_sigint_to_a_real_recording_exits_130_in_one_line_and_the_rerun_resumes(tmp_path, prompts):
    """The console script in its own process, stopped by a real SIGINT in the middle of a generation."""
    import signal
    import time

    out = tmp_path / "traces"
    argv = [sys.executable, "-m", "calib.cli", "record", *SMALL, "--steps", "40", "--prompts", str(prompts),
            "--seeds", "0-9", "--overhead-pairs", "0", "--out", str(out)]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    deadline = time.monotonic() + 300
    while not list((out / "runs").glob("*.parquet")) and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    saved = len(list((out / "runs").glob("*.parquet")))
    assert one_line(err) == (
        f"teacache-calib record: interrupted: {saved} of 20 runs are saved in {out / 'runs'}; "
        "run the same command again to resume"
    )
    done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr
    assert f"20 runs ({saved} already done)" in done.stdout


def test_a_resume_keeps_the_measured_overhead_and_judges_an_unjudged_one(tmp_path, prompts, shared_model):
    out = tmp_path / "traces"
    assert record(out, prompts) == 0
    path = out / "provenance.json"
    legacy = {"pairs": 3, "median": -0.117, "min": -0.25, "max": 0.39}  # as an earlier version stored it
    path.write_text(json.dumps({**json.loads(path.read_text()), "recording_overhead": legacy}))
    assert record(out, prompts, "--seeds", "0,1") == 0  # a resume (adding a seed) measures no new overhead
    kept = json.loads(path.read_text())["recording_overhead"]
    assert kept["reliable"] is False and kept["median"] is None and "-11.7%" in kept["reason"]
    assert kept["pairs"] == 3


@pytest.mark.parametrize("model", ["tiny-open-flux2", "tiny-open-flux1", "tiny-shapes"])
def test_a_trained_embedded_model_is_identified_by_its_weights_file(model):
    """A folder recorded from one training's weights never resumes with another's: the fingerprint holds the file's
    SHA-256 (a random-weight embedded model's holds its seed)."""
    from calib.run.fingerprint import embedded_weight_files, weights_identity
    from teacache.io import file_sha256

    (weights,) = embedded_weight_files(model)
    assert weights_identity(model)["weights_sha256"] == file_sha256(weights)
    assert weights_identity("tiny-flux1")["seed"] == 0 and not embedded_weight_files("tiny-flux1")
