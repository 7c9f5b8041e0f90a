"""`teacache-bench report` on a synthetic sweep folder: numbers, recommendation, plots, bad input."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from bench.report import command as report
from bench.report import stats
from teacache.io import FORMAT_VERSION, write_parquet
from tests.bench.report.conftest import PROMPTS, SEEDS, STEPS, THRESHOLDS, make_sweep


@pytest.fixture(scope="module")
def sweep_dir(tmp_path_factory) -> Path:
    return make_sweep(tmp_path_factory.mktemp("sweep") / "sweep")


@pytest.fixture(scope="module")
def built(sweep_dir, tmp_path_factory) -> tuple[Path, dict]:
    out = tmp_path_factory.mktemp("report") / "report"
    return out, report.build_report(sweep_dir, out)


@pytest.fixture
def runs(sweep_dir) -> pd.DataFrame:
    return pd.read_parquet(sweep_dir / "runs.parquet")


def copy_sweep(src: Path, dst: Path, runs: pd.DataFrame | None = None) -> Path:
    dst.mkdir(parents=True)
    for name in ("decisions.parquet", "provenance.json"):
        (dst / name).write_bytes((src / name).read_bytes())
    if runs is not None:
        write_parquet(dst / "runs.parquet", runs)
    return dst


# ------------------------------------------------------------------------------------ pure statistics


def test_distribution_matches_numpy(runs):
    dist = stats.distribution(runs)
    assert list(dist.columns) == list(stats.DISTRIBUTION_COLUMNS)
    assert sorted(dist["threshold"].unique()) == list(THRESHOLDS)
    for t in THRESHOLDS:
        at = runs[(runs["kind"] == "teacache") & (runs["threshold"] == t)]
        for metric in stats.METRICS:
            v = at[metric].to_numpy(dtype=float)
            row = dist[(dist["threshold"] == t) & (dist["metric"] == metric)].iloc[0]
            assert row["n"] == len(v) == len(PROMPTS) * len(SEEDS)
            np.testing.assert_allclose(
                [row["min"], row["p5"], row["median"], row["mean"], row["p95"], row["max"]],
                [v.min(), np.percentile(v, 5), np.median(v), v.mean(), np.percentile(v, 95), v.max()],
                rtol=1e-12,
            )


def test_speedup_ci_contains_median(runs):
    dist = stats.distribution(runs)
    speed = dist[dist["metric"] == "speedup"]
    assert (speed["ci_low"] <= speed["median"]).all() and (speed["median"] <= speed["ci_high"]).all()
    assert (speed["ci_low"] < speed["ci_high"]).all()
    assert dist[dist["metric"] != "speedup"][["ci_low", "ci_high"]].isna().all().all()


def test_bootstrap_edge_cases():
    assert stats.bootstrap_median_ci([1.7]) == (1.7, 1.7)
    assert stats.bootstrap_median_ci([2.0, 2.0, 2.0]) == (2.0, 2.0)
    assert all(math.isnan(v) for v in stats.bootstrap_median_ci([math.nan]))
    values = [1.1, 1.3, 1.2, 1.6, 1.4]
    assert stats.bootstrap_median_ci(values) == stats.bootstrap_median_ci(values)  # fixed seed


def test_quantile_handles_infinite_psnr():
    assert stats.quantile([math.inf, math.inf, math.inf], 0.05) == math.inf
    assert stats.quantile([30.0, math.inf], 0.5) == math.inf
    assert stats.quantile([1.0, 2.0, 3.0, 4.0], 0.05) == pytest.approx(np.percentile([1, 2, 3, 4], 5))
    assert math.isnan(stats.quantile([], 0.5))


def test_recommendation_skips_the_failing_highest_threshold(runs):
    dist = stats.distribution(runs)
    p5 = stats.stat(dist, "ssim", "p5")
    assert p5[0.5] < 0.95 <= p5[0.3]  # the fixture's premise
    rec = stats.recommend(dist, "ssim", 0.95)
    assert rec.threshold == 0.3 and rec.p5 == p5[0.3]
    assert stats.recommend(dist, "ssim", 0.80).threshold == 0.5
    assert stats.recommend(dist, "cosine", 0.9955).threshold == 0.2  # cosine = 1 - 0.001 k in the fixture


def test_recommendation_none_when_smallest_fails(runs):
    rec = stats.recommend(stats.distribution(runs), "ssim", 0.9999)
    assert rec.threshold is None
    assert rec.reason.startswith("none") and "0.1" in rec.reason


def test_recommendation_takes_highest_passing_even_above_a_failing_one():
    dist = pd.DataFrame({"threshold": [0.1, 0.2, 0.3], "metric": "ssim", "p5": [0.96, 0.94, 0.951], "median": 0.97})
    rec = stats.recommend(dist, "ssim", 0.95)
    assert rec.threshold == 0.3 and "0.2" in rec.reason


def test_pareto_front_hand_made():
    speed = [1.0, 1.5, 1.4, 2.0, 2.0, 0.9, math.nan, 1.5]
    quality = [0.99, 0.98, 0.97, 0.90, 0.85, 0.99, 1.0, 0.98]
    # 0: fastest at 0.99; 1 and 7 tie (neither dominates the other); 2 dominated by 1; 3 fastest;
    # 4 dominated by 3; 5 dominated by 0 (same quality, slower); 6 has no speed.
    expected = [True, True, False, True, False, False, False, True]
    assert stats.pareto_front(speed, quality).tolist() == expected


def test_skip_pattern_fractions(runs):
    pattern = stats.skip_pattern(runs)
    assert list(pattern.index) == list(THRESHOLDS) and pattern.shape[1] == STEPS
    assert ((pattern >= 0) & (pattern <= 1)).all().all()
    at = runs[(runs["kind"] == "teacache") & (runs["threshold"] == 0.3)]
    expected = np.mean([2 in json.loads(s) for s in at["skipped_steps"]])
    assert pattern.loc[0.3, 2] == pytest.approx(expected)
    assert pattern[0].sum() == 0  # the fixture never skips step 0


def test_predicted_vs_actual(runs):
    pva = stats.predicted_vs_actual(runs)
    assert list(pva["threshold"]) == list(THRESHOLDS)
    assert (pva["n"] == 4).all()  # p2 has no prediction
    assert (pva["mean_abs_diff"] == 0.5).all() and (pva["exact"] == 0.5).all()


# ------------------------------------------------------------------------------------ the report


def test_report_files_and_links(built):
    out, summary = built
    for name in (
        "report.md",
        "distribution.csv",
        "summary.json",
        "predicted_vs_actual.csv",
        "speedup_vs_ssim.png",
        "speedup_vs_cosine.png",
        "skips_vs_threshold.png",
        "x_traces.png",
        "skip_heatmap.png",
    ):
        assert (out / name).is_file(), name
    for png in out.glob("*.png"):
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not list(out.glob(".*.tmp"))
    md = (out / "report.md").read_text()
    links = re.findall(r"\]\(([^)]+)\)", md)
    assert {"speedup_vs_ssim.png", "skip_heatmap.png", "distribution.csv"} <= set(links)
    for link in links:
        assert (out / link).is_file(), link
    assert summary["report"] == str(out / "report.md")
    assert summary["files"] == sorted(p.name for p in out.iterdir())


def test_report_content(built):
    out, summary = built
    assert summary["recommended_threshold"] == 0.3
    assert summary["metric"] == "ssim" and summary["floor"] == 0.95
    md = (out / "report.md").read_text()
    assert md.startswith("# TeaCache sweep: flux1-dev (black-forest-labs/FLUX.1-dev)")
    assert "Synthetic CPU" in md and "2026-01-02T03:04:05Z" in md
    assert "**Recommended threshold: 0.3**" in md
    assert "3 prompts x 2 seeds" in md and "eps = 1e-06" in md and "data_range 255" in md
    assert "Prompt adherence" in md and "vanilla" in md
    assert "Predicted vs actual skips" in md
    rows = [line for line in md.splitlines() if re.match(r"\| 0\.\d", line)]
    assert len(rows) == 2 * len(THRESHOLDS)  # the per-threshold table and the predicted-vs-actual table
    assert summary["adherence"]["vanilla_n"] == 6 and summary["adherence"]["threshold"] == 0.3
    written = json.loads((out / "summary.json").read_text())
    assert written["recommended_threshold"] == 0.3 and written["format_version"] == FORMAT_VERSION


@pytest.fixture
def no_png(monkeypatch):
    """Skip PNG encoding (the slow part) in tests about everything but the plots."""
    monkeypatch.setattr(report.plots, "figure_png", lambda fig: b"\x89PNG stub")


def test_cli_rebuild_is_deterministic_and_prints_summary(sweep_dir, built, tmp_path, capsys, no_png):
    out = tmp_path / "cli"
    assert report.main([str(sweep_dir), "--out", str(out), "--metric", "cosine", "--ssim-floor", "0.9999"]) == 0
    printed = capsys.readouterr().out
    assert str(out / "report.md") in printed.replace("\n", "")
    assert "Recommended threshold: none" in printed
    summary = json.loads((out / "summary.json").read_text())
    assert summary["metric"] == "cosine" and summary["recommended_threshold"] is None
    assert "**Recommended threshold: none.**" in (out / "report.md").read_text()
    # The distribution does not depend on the metric or floor: same input, byte-identical table.
    assert (out / "distribution.csv").read_bytes() == (built[0] / "distribution.csv").read_bytes()
    assert list(pd.read_csv(out / "distribution.csv").columns) == list(stats.DISTRIBUTION_COLUMNS)


def test_without_decisions_the_trace_plot_is_omitted(sweep_dir, runs, tmp_path, no_png):
    src = copy_sweep(sweep_dir, tmp_path / "sweep", runs)
    (src / "decisions.parquet").unlink()
    out = tmp_path / "r"
    out.mkdir()
    (out / "x_traces.png").write_bytes(b"stale plot of an earlier build")
    (out / "notes.txt").write_text("not the report's")
    report.build_report(src, out)
    assert not (out / "x_traces.png").exists()
    assert (out / "notes.txt").exists()
    assert "x_traces.png omitted" in (out / "report.md").read_text()


# ------------------------------------------------------------------------------------ bad input


def _no_runs(sweep_dir, runs, dst):
    return copy_sweep(sweep_dir, dst)


def _old_version(sweep_dir, runs, dst):
    return copy_sweep(sweep_dir, dst, runs.assign(format_version=FORMAT_VERSION + 98))


def _missing_columns(sweep_dir, runs, dst):
    return copy_sweep(sweep_dir, dst, runs.drop(columns=["ssim", "cosine"]))


def _missing_vanilla(sweep_dir, runs, dst):
    return copy_sweep(sweep_dir, dst, runs[runs["run_id"] != "p1-s2-vanilla"])


def _no_metric_values(sweep_dir, runs, dst):
    return copy_sweep(sweep_dir, dst, runs.assign(ssim=math.nan))


def _impossible_ssim(sweep_dir, runs, dst):
    return copy_sweep(sweep_dir, dst, runs.assign(ssim=runs["ssim"].where(runs["kind"] == "vanilla", 7.0)))


def _more_computed_than_steps(sweep_dir, runs, dst):
    return copy_sweep(sweep_dir, dst, runs.assign(computed=runs["num_steps"] + 472))


def _negative_times(sweep_dir, runs, dst):
    return copy_sweep(sweep_dir, dst, runs.assign(wall_s=runs["wall_s"].map(lambda w: [-float(t) for t in w])))


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (_no_runs, "no runs.parquet in"),
        (_impossible_ssim, "value(s) outside -1..1 (first: run_id"),
        (_more_computed_than_steps, "column 'computed' has"),
        (_negative_times, "column 'wall_s' has"),
        (
            _old_version,
            f"runs table from another tool version: format_version {FORMAT_VERSION + 98}, "
            f"this tool reads {FORMAT_VERSION}; re-run the sweep",
        ),
        (_missing_columns, "runs.parquet lacks columns: cosine, ssim"),
        (_missing_vanilla, "missing vanilla pair for run_id p1-s2-t0.1 (prompt_id p1, seed 2)"),
        (_no_metric_values, "column 'ssim' has"),
    ],
)
@pytest.mark.parametrize("out_exists", [False, True])
def test_bad_input_exits_2_and_writes_nothing(sweep_dir, runs, tmp_path, capsys, damage, message, out_exists):
    src = damage(sweep_dir, runs, tmp_path / "sweep")
    out = tmp_path / "out"
    if out_exists:
        out.mkdir()
    assert report.main([str(src), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert message in err
    assert len(err.strip().splitlines()) == 1
    assert (list(out.iterdir()) == []) if out_exists else not out.exists()


def test_missing_sweep_folder(tmp_path, capsys):
    assert report.main([str(tmp_path / "nowhere"), "--out", str(tmp_path / "out")]) == 2
    assert "no sweep folder at" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("floor", ["nan", "2", "-1", "inf"])
def test_a_floor_outside_the_metric_range_is_refused_in_one_line_before_reading(tmp_path, capsys, floor):
    out = tmp_path / "out"
    assert report.main([str(tmp_path / "nowhere"), "--out", str(out), "--ssim-floor", floor]) == 2
    err = capsys.readouterr().err
    assert err.strip() == (
        f"teacache-bench report: --ssim-floor {float(floor)!r}: expected a number from 0 to 1 (a floor on p5 ssim)"
    )
    assert not out.exists()


def test_a_psnr_floor_is_in_decibels(sweep_dir, tmp_path, no_png):
    summary = report.build_report(sweep_dir, tmp_path / "out", ssim_floor=30.0, metric="psnr")
    assert summary["floor"] == 30.0 and summary["metric"] == "psnr"
    with pytest.raises(report.ReportInputError, match="expected a finite number >= 0"):
        report.build_report(sweep_dir, tmp_path / "out2", ssim_floor=-3.0, metric="psnr")
    assert not (tmp_path / "out2").exists()
