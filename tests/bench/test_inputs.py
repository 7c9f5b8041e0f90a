"""Bad input to the bench and calib commands: one clear message, exit code 2, no partial files."""

from __future__ import annotations

import pandas as pd
import pytest

from bench.common import parse_thresholds
from bench.sweep import command as sweep_cmd
from bench.sweep import replay as replay_cmd
from bench.tolerances import derive as tolerances_cmd
from calib import record as record_cmd
from calib.run.prompts import load_prompts, parse_seeds, parse_size
from tests import ROOT


@pytest.mark.parametrize(
    ("text", "match"),
    [("0,-0.1", "negative"), ("0,nan", "not finite"), ("0.1,0.2,0.1", "duplicate"), ("0,abc", "not a number"),
     ("", "at least one")],
)  # fmt: skip
def test_bad_thresholds(text, match):
    with pytest.raises(ValueError, match=match):
        parse_thresholds(text)


def test_thresholds_are_sorted():
    assert parse_thresholds("0.3,0,0.1") == [0.0, 0.1, 0.3]


@pytest.mark.parametrize("text", ["", "1,1", "-1", "a"])
def test_bad_seeds(text):
    with pytest.raises(ValueError, match="--seeds"):
        parse_seeds(text)


def test_seed_ranges():
    assert parse_seeds("0-2,5") == [0, 1, 2, 5]
    assert parse_size("64x32") == (64, 32)
    with pytest.raises(ValueError, match="--size"):
        parse_size("64")


def test_empty_prompt_file_is_refused(tmp_path):
    path = tmp_path / "prompts.txt"
    path.write_text("# only a comment\n\n")
    with pytest.raises(ValueError, match="holds no prompts"):
        load_prompts(str(path))
    with pytest.raises(ValueError, match="neither a built-in set"):
        load_prompts(str(tmp_path / "missing.txt"))


def test_prompt_files_give_stable_ids(tmp_path):
    """A .txt prompt's id comes from its text alone, so a resumed or extended sweep finds its pairs again."""
    path = tmp_path / "p.txt"
    path.write_text("a cat\na dog\n")
    ids = {"file-008bd0f0": "a cat", "file-61128e1e": "a dog"}  # as every earlier sweep folder names them
    assert load_prompts(str(path)) == ids
    reordered = tmp_path / "q.txt"
    reordered.write_text("# a comment\na bird\n\n  a dog  \na cat\n")  # other order, more lines, padding
    assert {k: v for k, v in load_prompts(str(reordered)).items() if v != "a bird"} == ids
    csv = tmp_path / "p.csv"
    csv.write_text("id,text\ncat,a cat\n")
    assert load_prompts(str(csv)) == {"cat": "a cat"}


def test_sweep_refuses_bad_input_before_writing(tmp_path, capsys):
    out = tmp_path / "sweep"
    code = sweep_cmd.main(["--model", "tiny-flux1", "--thresholds", "0,-1", "--out", str(out)])
    assert code == 2 and "negative" in capsys.readouterr().err
    assert not out.exists()
    empty = tmp_path / "empty.txt"
    empty.write_text("\n")
    code = sweep_cmd.main(["--model", "tiny-flux1", "--thresholds", "0", "--prompts", str(empty), "--out", str(out)])
    assert code == 2 and "no prompts" in capsys.readouterr().err
    assert not out.exists()


def test_record_dry_run_prints_the_plan_and_writes_nothing(tmp_path, capsys):
    out = tmp_path / "rec"
    assert (
        record_cmd.main(
            ["--model", "tiny-flux1", "--prompts", "fast", "--seeds", "0,1", "--dry-run", "--out", str(out)]
        )
        == 0
    )
    printed = capsys.readouterr().out
    assert "6 runs" in printed and "would record scene-city-s1" in printed
    assert not out.exists()


def _traces(n_runs=40, steps=28):
    rows = []
    for r in range(n_runs):
        for s in range(steps):
            rows.append({"run_id": f"p{r}-s0", "prompt_id": f"p{r}", "seed": 0, "step": s, "num_steps": steps,
                         "sigma": 1 - s / steps, "x_rel_l1": float("nan") if s == 0 else 0.05 + 0.01 * (r % 3),
                         "variant": "tiny-flux1", "branch": "cond"})  # fmt: skip
    return pd.DataFrame(rows)


def test_replay_predicts_a_schedule_per_run_and_threshold_without_a_model(tmp_path, no_model, capsys):
    path = tmp_path / "traces.parquet"
    _traces().to_parquet(path)
    assert replay_cmd.main([str(path), "--thresholds", "0,0.2,0.4,0.8", "--out", str(tmp_path / "s.csv")]) == 0
    schedules = pd.read_csv(tmp_path / "s.csv")
    assert len(schedules) == 40 * 4
    zero = schedules[schedules["threshold"] == 0]
    assert (zero["predicted_skipped"] == 0).all()
    assert replay_cmd.main([str(path), "--thresholds", "0.1,-1"]) == 2


def test_tolerances_refuse_a_threshold_that_was_not_swept(tmp_path, capsys):
    assert tolerances_cmd.main([str(tmp_path), "--out", str(tmp_path / "t.py")]) == 2
    assert "no runs.parquet" in capsys.readouterr().err
    assert not (tmp_path / "t.py").exists()


# ------------------------------------------------------------------ bad input before any model loads


@pytest.fixture
def paths(tmp_path) -> dict:
    (tmp_path / "file").write_text("not a folder")
    (tmp_path / "folder").mkdir()
    (tmp_path / "bad.json").write_text("{not json")
    pd.DataFrame({"run_id": ["a"], "prompt_id": ["a"], "seed": [0], "step": [0]}).to_parquet(tmp_path / "nox.parquet")
    names = {"file": "file", "folder": "folder", "bad_json": "bad.json", "no_x": "nox.parquet", "new": "new/out",
             "missing": "nothing.parquet"}  # fmt: skip
    return {key: tmp_path / name for key, name in names.items()}


def _commands():
    from bench import campaign as campaign_cmd
    from bench.timing import overhead as overhead_cmd

    return {"sweep": sweep_cmd.main, "record": record_cmd.main, "overhead": overhead_cmd.main,
            "campaign": campaign_cmd.main}  # fmt: skip


T = ["--thresholds", "0,0.1"]
BAD_INPUT = [
    ("sweep", [*T, "--out", "{file}"], "--out: {file} is a file"),
    ("record", ["--out", "{file}"], "--out: {file} is a file"),
    ("campaign", ["--out", "{file}"], "--out: {file} is a file"),
    ("sweep", [*T, "--out", "{file}/sub"], "--out: cannot create"),
    ("sweep", [*T, "--traces", "{no_x}", "--out", "{new}"], "--traces: nox.parquet lacks column(s) x_rel_l1"),
    ("sweep", [*T, "--traces", "{missing}", "--out", "{new}"], "--traces: {missing} does not exist"),
    ("sweep", [*T, "--coefficients", "{missing}.json", "--out", "{new}"], "--coefficients: {missing}.json does not"),
    ("sweep", [*T, "--coefficients", "1,nan", "--out", "{new}"], "--coefficients: expected finite numbers"),
    ("sweep", [*T, "--prompts", "{folder}", "--out", "{new}"], "--prompts: cannot read {folder}"),
    ("sweep", [*T, "--prompts", "{bad_json}", "--out", "{new}"], "--prompts: {bad_json} is not a usable prompt file"),
    ("sweep", [*T, "--model", "tiny-foo", "--out", "{new}"], "--model: unknown model 'tiny-foo'"),
    ("sweep", [*T, "--model", "dev", "--base-model", "schnell", "--out", "{new}"], "--model: no folder at dev"),
    ("sweep", [*T, "--model", "{folder}", "--out", "{new}"], "--base-model: {folder} is a local folder"),
    ("sweep", [*T, "--model", "{file}", "--out", "{new}"], "--model: {file} is a file"),
    ("sweep", [*T, "--repeats", "0", "--out", "{new}"], "--repeats: expected at least 1"),
    ("sweep", [*T, "--quantize", "7", "--out", "{new}"], "argument --quantize: invalid choice"),
    ("record", ["--model", "tiny-foo", "--out", "{new}"], "--model: unknown model 'tiny-foo'"),
    ("record", ["--model", "tiny-foo", "--dry-run", "--out", "{new}"], "--model: unknown model 'tiny-foo'"),
    ("record", ["--steps", "1", "--out", "{new}"], "--steps: expected at least 3 steps"),
    ("overhead", ["--model", "tiny-foo"], "--model: unknown model 'tiny-foo'"),
    ("overhead", ["--pairs", "0"], "--pairs: expected at least 1"),
    ("campaign", ["--thresholds=-1", "--out", "{new}"], "--thresholds: -1 is negative"),
    ("campaign", ["--ssim-floor", "nan", "--out", "{new}"], "--ssim-floor: expected a number in (0, 1]"),
    ("campaign", ["--ssim-floor", "2", "--out", "{new}"], "--ssim-floor: expected a number in (0, 1]"),
    ("campaign", ["--ssim-floor", "0", "--out", "{new}"], "--ssim-floor: expected a number in (0, 1]"),
    ("campaign", ["--record-seeds", "0,0", "--out", "{new}"], "--record-seeds: expected distinct"),
    ("campaign", ["--model", "tiny-flux1", "--thresholds", "0,0.3", "--out", "{new}"], "--thresholds: include"),
]


def _run(command: str, argv: list[str]) -> int:
    try:
        return _commands()[command](argv)
    except SystemExit as exc:  # argparse's own refusals
        return int(exc.code)


def _listing(root) -> list:
    return sorted(str(p) for p in root.rglob("*"))


@pytest.mark.parametrize(("command", "argv", "message"), BAD_INPUT, ids=[f"{c}-{i}" for i, (c, _a, _m) in
                                                                          enumerate(BAD_INPUT)])  # fmt: skip
def test_bad_input_is_one_line_exit_2_before_any_model_loads(command, argv, message, paths, no_model, tmp_path,
                                                               capsys):  # fmt: skip
    argv = [a.format(**paths) for a in argv]
    before = _listing(tmp_path)
    assert _run(command, argv) == 2  # no_model: refused before any model loads
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert message.format(**paths) in err[0]
    assert _listing(tmp_path) == before  # no partial file, no folder left behind


def _read_only(folder) -> bool:
    """Make a folder unwritable for this process (chmod, or chattr +i for root); False when neither works."""
    import os
    import subprocess
    import tempfile

    os.chmod(folder, 0o555)
    try:
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError:
        return True
    subprocess.run(["chattr", "+i", str(folder)], capture_output=True, check=False)
    try:
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError:
        return True
    return False


@pytest.mark.parametrize("command", ["sweep", "record"])
def test_a_read_only_output_folder_is_refused_before_any_model_loads(command, tmp_path, no_model, capsys):
    import subprocess

    folder = tmp_path / "ro"
    folder.mkdir()
    if not _read_only(folder):
        pytest.skip("cannot make a folder read-only for this user here")
    try:
        argv = [*T, "--out", str(folder / "out")] if command == "sweep" else ["--out", str(folder)]
        assert _run(command, argv) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and f"--out: cannot write in {folder}" in err[0], err
    finally:
        subprocess.run(["chattr", "-i", str(folder)], capture_output=True, check=False)
        folder.chmod(0o755)


def test_a_fresh_process_refuses_bad_input_without_importing_the_heavy_modules(tmp_path):
    """What a user sees: a new interpreter, the console script, one line, exit 2, none of the big imports."""
    import json
    import subprocess
    import sys

    (tmp_path / "file").write_text("x")
    script = (
        "import json, sys\n"
        "from bench.cli import main\n"
        "code = main(sys.argv[1:])\n"
        "heavy = sorted({m.split('.')[0] for m in sys.modules} & {'pandas', 'scipy', 'skimage', 'matplotlib', "
        "'mflux', 'PIL', 'pyarrow'})\n"
        "print(json.dumps({'code': code, 'heavy': heavy}))\n"
    )
    root = ROOT
    for argv in (["sweep", *T, "--out", str(tmp_path / "file")], ["overhead", "--model", "tiny-foo"],
                 ["campaign", "--thresholds=-1", "--out", str(tmp_path / "c")]):  # fmt: skip
        done = subprocess.run([sys.executable, "-c", script, *argv], capture_output=True, text=True, cwd=root,
                              env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"}, timeout=60)  # fmt: skip
        result = json.loads(done.stdout.strip().splitlines()[-1])
        assert result["code"] == 2 and len(done.stderr.strip().splitlines()) == 1, (argv, done.stderr)
        assert result["heavy"] == [], argv  # nothing heavy imported, so nothing loaded: the refusal comes first


def test_help_shows_the_defaults_and_the_prompt_sets(capsys):
    from calib.run.prompts import SETS
    from teacache import variants

    for command in ("sweep", "record", "campaign"):
        assert _run(command, ["--help"]) == 0
        text = " ".join(capsys.readouterr().out.split())
        assert all(name in text for name in SETS), command
        assert f"(default: {variants.default_model()})" in text, command
    assert _run("sweep", ["--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "(default: 0,1)" in text and "(default: 3)" in text and "(default: packaged)" in text
