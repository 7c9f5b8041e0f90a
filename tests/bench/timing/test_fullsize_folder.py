"""fullsize's folder lifecycle, without building a model (measure_model replaced by rows of the right
configuration): one writer per folder, settings checked per configuration before anything loads, finished
models kept on a rerun, --force-new and --tag."""

from __future__ import annotations

import json

import pandas as pd
import pytest

import teacache  # noqa: F401  (first: OpenBLAS preload before MLX)
from bench.timing import fullsize as bench_fullsize
from bench.timing import fullsize_records as records
from calib.run.folder import folder_lock
from teacache.models import fullsize
from tests.bench.timing.test_fullsize import _runs

SMALL = ["--size", "64", "--steps", "4"]  # the configuration _runs' rows belong to


@pytest.fixture
def measured(monkeypatch):
    """measure_model replaced: each call is recorded and returns rows of that variant's configuration."""
    calls = []

    def measure(variant, args, plan, deadline, say):
        calls.append(variant)
        label = fullsize.model_label(variant, args.blocks)
        return _runs(label, 2.0, tag=args.tag, quantize=args.quantize), {"model": label}

    monkeypatch.setattr(bench_fullsize, "measure_model", measure)
    return calls


def _main(out, models: str, *extra: str) -> int:
    return bench_fullsize.main(["--models", models, *SMALL, *extra, "--out", str(out)])


def _tree(folder):
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def test_a_second_writer_on_the_same_folder_is_refused(tmp_path, measured, capsys):
    out = tmp_path / "out"
    with folder_lock(out, "teacache-bench fullsize --models random-z-image"):
        assert _main(out, "random-qwen-image") == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "is being written by pid" in err[0] and "random-z-image" in err[0]
    assert measured == [] and not out.exists()


def test_a_rerun_keeps_the_finished_models_and_measures_only_the_new_one(tmp_path, measured, capsys):
    out = tmp_path / "out"
    assert _main(out, "random-qwen-image,random-z-image") == 0
    assert measured == ["qwen-image", "z-image"]
    runs_before = (out / "runs.csv").read_bytes()
    assert _main(out, "random-qwen-image,random-z-image,random-flux1-dev") == 0
    assert measured == ["qwen-image", "z-image", "flux1-dev"]
    printed = capsys.readouterr().out
    assert "random-qwen-image||64x64|4|: kept" in printed and "random-z-image||64x64|4|: kept" in printed
    runs = records.read_table(out / "runs.csv", records.RUNS)
    assert (out / "runs.csv").read_bytes().startswith(runs_before) and len(runs) == 3 * 9  # kept as they were
    assert sorted(set(runs["model"])) == ["random-flux1-dev", "random-qwen-image", "random-z-image"]
    recorded = json.loads((out / "fingerprint.json").read_text())
    assert recorded["command"] == "teacache-bench fullsize" and len(recorded["configurations"]) == 3
    assert "progress.log" in {p.name for p in out.iterdir()}


@pytest.mark.parametrize("smoke", [[], ["--blocks", "1"]], ids=["full-size", "blocks"])
def test_other_settings_are_refused_before_any_model_loads(tmp_path, measured, capsys, smoke):
    out = tmp_path / "out"
    assert _main(out, "random-qwen-image", *smoke) == 0
    before = _tree(out)
    capsys.readouterr()
    assert _main(out, "random-qwen-image", *smoke, "--repeats", "2") == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "repeats 3 (this run: 2)" in err[0] and "--force-new" in err[0]
    assert measured == ["qwen-image"] and _tree(out) == before  # nothing loaded, nothing written


def test_force_new_measures_a_configuration_again_and_replaces_its_rows(tmp_path, measured):
    out = tmp_path / "out"
    assert _main(out, "random-qwen-image,random-z-image") == 0
    assert _main(out, "random-qwen-image", "--skip-fractions", "0.5", "--force-new") == 0
    assert measured == ["qwen-image", "z-image", "qwen-image"]
    runs = records.read_table(out / "runs.csv", records.RUNS)
    assert len(runs) == 2 * 9  # the rows of qwen-image replaced, not added
    settings = json.loads((out / "fingerprint.json").read_text())["configurations"]
    assert settings["random-qwen-image||64x64|4|"]["skip_fractions"] == [0.5]
    assert settings["random-z-image||64x64|4|"]["skip_fractions"] == [0.35, 0.7]


def test_another_tag_is_a_configuration_of_its_own(tmp_path, measured):
    out = tmp_path / "out"
    assert _main(out, "random-qwen-image") == 0
    assert _main(out, "random-qwen-image", "--repeats", "2", "--tag", "two-repeats") == 0
    summary = records.read_table(out / "summary.csv", records.SUMMARY)
    assert sorted(summary["tag"].fillna("")) == ["", "", "two-repeats", "two-repeats"]


def test_a_model_the_budget_stopped_early_is_measured_again(tmp_path, measured):
    out = tmp_path / "out"
    assert _main(out, "random-qwen-image", "--repeats", "4") == 0  # _runs times 3 repeats: short of 4
    assert _main(out, "random-qwen-image", "--repeats", "4") == 0
    assert measured == ["qwen-image", "qwen-image"]


def test_rows_of_an_earlier_version_without_settings_are_refused_not_mixed(tmp_path, measured, capsys):
    from bench.timing import fullsize_tables

    out = tmp_path / "out"
    out.mkdir()
    fullsize_tables.write_outputs(out, _runs("random-qwen-image", 2.0), {"q": {}})
    assert _main(out, "random-qwen-image") == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "without a record of its settings" in err[0] and "--force-new" in err[0]
    assert measured == []
    assert _main(out, "random-qwen-image", "--force-new") == 0 and measured == ["qwen-image"]
    assert len(pd.read_csv(out / "runs.csv")) == 9
