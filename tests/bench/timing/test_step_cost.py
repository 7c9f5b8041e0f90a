"""``teacache-bench step-cost``: the pair arithmetic and its bootstrap, the committed H200 figures rebuilt from their
raw step times, and the command itself on the embedded tiny models of every family (arms alternating in blocks
within one generation, bit-exact where vanilla is, the pipeline left as it was, the run folder's rules)."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

import teacache
from bench.timing import step_cost, step_cost_measure, step_cost_summary
from bench.timing.step_cost_measure import Session, mixed_schedule, mixed_unit, warm_up, whole_unit
from bench.timing.step_cost_records import read_sources
from bench.timing.step_cost_summary import interval, pair_figures, pair_ratios
from teacache.core import is_applied
from tests import ROOT
from tests.tolerances import load_tolerances

COMMITTED = ROOT / "results" / "cuda-nvidia-h200" / "proxy-cost-flux1"
STEPS, BLOCK, SIZE = 8, 2, 64
TINY = ["tiny-flux1", "tiny-flux2", "tiny-qwen-image", "tiny-z-image"]
# mflux's compiled Z-Image predict and the proxy's compiled segments round differently on this CPU (its adapter
# tests hold them to a cosine bound): the only family whose arms are not bit-exact with vanilla here
NOT_BIT_EXACT_ON_CPU = {"tiny-z-image"}
# what one run's allocator readings move by beside another's on this CPU, other tests' arrays in the process
ALLOCATOR_SLACK = 16384
FAST = ["--model", "tiny-flux1", "--steps", str(STEPS), "--size", f"{SIZE}x{SIZE}", "--block", str(BLOCK)]


# ------------------------------------------------------------------------------------------ the arithmetic


def test_mixed_schedules_alternate_in_blocks_and_flip():
    assert mixed_schedule(8, 2, arm_first=False) == "vvppvvpp"
    assert mixed_schedule(8, 2, arm_first=True) == "ppvvppvv"
    assert mixed_schedule(10, 4, arm_first=False) == "vvvvppppvv"


def test_a_pair_leaves_out_each_block_s_first_step():
    """Blocks' first steps hold 100 s (late releases, a first compile): no ratio sees them."""
    schedule = "vvvppp" * 2
    seconds = [100.0, 1.0, 1.0, 100.0, 1.1, 1.1] * 2
    assert pair_ratios(schedule, seconds, 3) == pytest.approx([1.1, 1.1])
    flipped = "pppvvv"  # the arm's block first: still arm over vanilla
    assert pair_ratios(flipped, [100.0, 2.0, 2.0, 100.0, 1.0, 1.0], 3) == pytest.approx([2.0])


def test_the_bootstrap_interval_holds_the_median_and_is_reproducible():
    ratios = list(1 + np.random.default_rng(3).normal(0.002, 0.02, size=60))
    figures = pair_figures(ratios)
    assert figures["median_lo_pct"] <= figures["median_pct"] <= figures["median_hi_pct"]
    assert figures["mean_lo_pct"] <= figures["mean_pct"] <= figures["mean_hi_pct"]
    assert figures["median_lo_pct"] < figures["median_hi_pct"]
    assert interval(np.array(ratios), np.median) == interval(np.array(ratios), np.median)


def test_the_committed_h200_figures_rebuild_from_their_raw_step_times():
    """The figures RUN.md and docs/hardware.md quote, from the earlier scripts' raw files."""
    rows = step_cost_summary.pair_rows(read_sources(COMMITTED)[0]).set_index("record")
    figures = {
        "session4/pooled: forced-2.json, forced.json": (120, 0.17, -0.10, 0.39, 0.50),
        "session4/gated.json": (60, 0.99, 0.43, 1.29, 0.86),
        "session5/forced-carry.json": (60, 0.11, -0.56, 0.55, 0.06),
        "session3/pooled: steps-alternating-2.json, steps-alternating.json": (120, 0.69, 0.32, 1.15, 0.94),
    }
    for record, (pairs, median, low, high, mean) in figures.items():
        row = rows.loc[record]
        assert row["pairs"] == pairs
        assert [round(row[k], 2) for k in ("median_pct", "median_lo_pct", "median_hi_pct", "mean_pct")] == [
            median, low, high, mean,
        ]  # fmt: skip
    phases = {(r["arm"], r["repeat"]): r for r in step_cost_summary.phase_rows(read_sources(COMMITTED)[0])}
    assert (phases[("p", 1)]["loop"], phases[("p", 1)]["decode"], phases[("p", 1)]["held"]) == (520, 0, 0)


@pytest.mark.parametrize(
    "committed",
    [
        COMMITTED,
        COMMITTED.parent / "step-cost-overlap",
        ROOT / "results" / "cuda-nvidia-h100" / "step-cost-cfg-fix",
        ROOT / "results" / "cuda-nvidia-h100" / "step-cost-async",
    ],
    ids=lambda p: p.name,
)
def test_the_committed_summary_rebuilds_byte_for_byte(tmp_path, committed):
    copy = tmp_path / committed.name
    shutil.copytree(committed, copy)
    step_cost_summary.write_summary(copy)
    for name in (step_cost_summary.SUMMARY_MD, step_cost_summary.SUMMARY_CSV):
        assert (copy / name).read_bytes() == (committed / name).read_bytes(), name


def test_the_hardware_pages_per_step_table_is_the_committed_summary():
    """docs/hardware.md's table of each family's per-step cost: rows of step-cost-async's summary.csv, each
    record's model and steps from its fingerprint."""
    import pandas as pd

    folder = ROOT / "results" / "cuda-nvidia-h100" / "step-cost-async"
    page = (ROOT / "docs" / "hardware.md").read_text(encoding="utf-8")
    summary = pd.read_csv(folder / "summary.csv")
    shown = summary[~summary["record"].str.startswith("pooled") & (summary["record"] != "klein-before")]
    for r in shown.to_dict("records"):
        settings = json.loads((folder / r["record"] / "fingerprint.json").read_text(encoding="utf-8"))["settings"]
        row = (
            f"| {settings['model']} | {settings['steps']} | {r['arm']} | {r['pairs']} | {r['median_pct']:+.2f} % "
            f"[{r['median_lo_pct']:+.2f}, {r['median_hi_pct']:+.2f}] | {r['bit_exact']}/{r['compared']} |"
        )
        assert row in page, row
    models = {json.loads((folder / n / "fingerprint.json").read_text())["settings"]["model"] for n in shown["record"]}
    assert models == {"random-flux1-dev", "random-flux2-klein-base-4b", "random-qwen-image", "random-z-image"}


# ------------------------------------------------------------------------------- one generation, each family


@pytest.fixture(scope="module", params=TINY)
def session(request):
    model = teacache.load_model(request.param)
    session = Session(model, "a lighthouse on a cliff at dusk", 0, STEPS, SIZE, SIZE, 3.5)
    warm_up(session, ["forced", "gated", "vanilla"], BLOCK)
    return request.param, session


def _untouched(model, transformer) -> bool:
    registry = model.callbacks
    ours = [c for lst in (registry.before_loop, registry.in_loop, registry.after_loop) for c in lst
            if type(c).__module__.startswith(("bench.", "teacache."))]  # fmt: skip
    return model.transformer is transformer and "_predict" not in vars(model) and not is_applied(model) and not ours


@pytest.mark.parametrize("arm", ["forced", "gated"])
def test_a_mixed_generation_runs_the_arm_only_in_its_blocks_and_stays_exact(session, arm):
    name, session = session
    transformer = session.model.transformer
    for index in (0, 1):
        generations, steps, run = mixed_unit(session, arm, index, 0, BLOCK)
        arm_steps = tuple(i for i, side in enumerate(run.schedule) if side == "p")
        assert run.arm_steps == arm_steps  # the controller decided those steps and no other
        assert run.skipped == 0 and run.cache_bytes > 0
        assert len(steps) == STEPS and all(row["seconds"] > 0 for row in steps)
        if name not in NOT_BIT_EXACT_ON_CPU:
            assert generations[0]["exact"], generations[0]["max_abs"]
        else:  # the bound measured for the proxy's computed steps against vanilla, where this hardware has one
            bound = getattr(load_tolerances(), "TINY_Z_IMAGE_PROXY_NOOP_MAX_ABS", None)
            assert bound is None or generations[0]["max_abs"] <= bound, (generations[0], bound)
    assert run.schedule == mixed_schedule(STEPS, BLOCK, arm_first=True)  # the second generation starts with the arm
    assert _untouched(session.model, transformer)


def test_the_vanilla_arm_installs_nothing_and_is_bit_exact(session):
    name, session = session
    generations, _steps, run = mixed_unit(session, "vanilla", 0, 0, BLOCK)
    assert run.arm_steps == () and run.cache_bytes == 0
    assert generations[0]["exact"]


def test_whole_runs_read_memory_per_phase(session):
    name, session = session
    generations, steps, runs = whole_unit(session, [None, "forced"], 0)
    vanilla, forced = generations
    assert vanilla["role"] == "reference" and forced["role"] == "arm" and vanilla["exact"]
    for row in generations:
        assert row["base_bytes"] <= row["held_after_loop_bytes"] <= row["loop_peak_bytes"]
    assert all(row["peak_bytes"] > 0 for row in steps)
    if name == "tiny-flux1":  # after the loop the proxy holds its cache (a lazy one: the graph behind it as well)
        held = forced["held_after_loop_bytes"] - forced["base_bytes"]
        held -= vanilla["held_after_loop_bytes"] - vanilla["base_bytes"]
        assert forced["cache_bytes"] > 0 and abs(held - forced["cache_bytes"]) <= ALLOCATOR_SLACK, held


# ------------------------------------------------------------------------------------------ the command


def _run(argv: list[str]) -> int:
    """The command's exit status, argparse's own refusals (SystemExit) included."""
    try:
        return step_cost.main(argv)
    except SystemExit as exc:
        return exc.code


def test_the_command_writes_its_folder_resumes_and_refuses_other_settings(tmp_path, capsys, shared_model):
    out = tmp_path / "run"
    argv = [*FAST, "--generations", "2", "--repeats", "1", "--arms", "forced,vanilla", "--out", str(out)]
    assert _run(argv) == 0
    for name in ("generations.csv", "steps.csv", "summary.md", "summary.csv", "provenance.json", "fingerprint.json",
                 "progress.log"):  # fmt: skip
        assert (out / name).is_file(), name
    summary = (out / "summary.md").read_bytes()
    assert json.loads((out / "fingerprint.json").read_text())["command"] == step_cost.PROG
    capsys.readouterr()
    assert _run(argv) == 0
    assert "nothing to measure" in capsys.readouterr().out
    assert (out / "summary.md").read_bytes() == summary
    assert _run([*argv[:-2], "--generations", "3", "--out", str(out)]) == 2
    assert "generations 2 (this run: 3)" in capsys.readouterr().err
    assert _run(["--summarize", str(out)]) == 0
    assert (out / "summary.md").read_bytes() == summary


def test_ctrl_c_keeps_what_is_done_and_the_same_command_resumes(tmp_path, capsys, shared_model, monkeypatch):
    out = tmp_path / "run"
    argv = [*FAST, "--generations", "2", "--repeats", "0", "--arms", "forced", "--out", str(out)]
    calls = []
    measured = step_cost_measure.mixed_unit

    def stop_at_second(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return measured(*args, **kwargs)

    monkeypatch.setattr(step_cost, "mixed_unit", stop_at_second)
    assert _run(argv) == 130
    assert "holds 1 of 2 units" in capsys.readouterr().err
    monkeypatch.setattr(step_cost, "mixed_unit", measured)
    assert _run(argv) == 0
    assert "1 of 2 units" in capsys.readouterr().out
    rows = (out / "generations.csv").read_text().splitlines()[1:]
    assert [r.split(",")[3] for r in rows] == ["0", "1"]  # each generation once


@pytest.mark.parametrize(
    ("extra", "named"),
    [
        (["--arms", "forced,bogus"], "--arms"),
        (["--arms", "forced,forced"], "--arms"),
        (["--block", "1"], "--block"),
        (["--steps", "3"], "--steps"),
        (["--generations", "0"], "--generations"),
        (["--repeats", "-1"], "--repeats"),
        (["--blocks", "2"], "--blocks"),
        (["--prompt", " "], "--prompt"),
        (["--size", "64"], "--size"),
    ],
)
def test_bad_arguments_exit_2_naming_them_before_anything_loads(tmp_path, capsys, monkeypatch, extra, named):
    def no_load(*args, **kwargs):
        raise AssertionError("a model was loaded")

    monkeypatch.setattr(step_cost.arguments, "load_model", no_load)
    out = tmp_path / "run"
    assert _run([*FAST, *extra, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert named in err and len(err.strip().splitlines()) == 1
    assert not out.exists()


def test_summarize_refusals(tmp_path, capsys):
    assert _run(["--summarize", str(tmp_path / "none")]) == 2
    assert "--summarize" in capsys.readouterr().err
    assert _run(["--summarize", str(tmp_path)]) == 2
    assert "no teacache-bench step-cost run folder" in capsys.readouterr().err
    assert _run(["--summarize", str(COMMITTED), "--arms", "gated"]) == 2
    assert "--arms: not used with --summarize" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())
    records = tmp_path / "records"
    shutil.copytree(COMMITTED / "session5", records)
    (records / "summary.md").write_text("# my notes\n")
    assert _run(["--summarize", str(records)]) == 2
    assert "is not a summary" in capsys.readouterr().err
    assert (records / "summary.md").read_text() == "# my notes\n" and not (records / "summary.csv").exists()


def test_a_folder_that_is_not_its_own_is_refused_and_left_as_it_was(tmp_path, capsys):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep me\n")
    a_file = tmp_path / "a-file.txt"
    a_file.write_text("keep me\n")
    for out, named in ((mine, "notes.txt"), (a_file, "is a file"), ("", "--out")):
        assert _run([*FAST, "--out", str(out)]) == 2
        assert named in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["a-file.txt", "mine", "notes.txt"]
