"""docs/caching-rules.md's First-Block Cache by speedup, run as written (in a scratch folder, with this checkout's
console scripts): it picks the threshold the page names and the run skips the steps the replay predicted; and its
full-size table is the committed run's."""

from __future__ import annotations

import re
from pathlib import Path

from tests import doc_pages

ROOT = Path(__file__).resolve().parents[1]


def test_first_block_cache_by_speedup_runs_as_written(tmp_path):
    block = doc_pages.block("docs/caching-rules.md", "By speedup")
    done = doc_pages.run(block, tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    chosen = re.search(r"threshold ([\d.]+) for speedup 2x .* computed steps 11, skipped steps 17", done.stdout)
    assert chosen and round(float(chosen.group(1)), 2) == 0.18, done.stdout  # the page: 0.18, 11 computed
    assert "skipped 17 of 28" in done.stdout, done.stdout  # the run took the replayed decisions
    assert (tmp_path / "fbcache-2x.png").is_file()


def test_the_python_route_the_pages_name_picks_the_same_threshold_and_the_run_takes_its_steps():
    """docs/api.md and caching-rules.md: fbcache_by_speedup(handle.changes, S, handle.num_blocks, FBCacheConfig())."""
    import teacache
    from calib.targets import fbcache_by_speedup
    from teacache.fbcache import FBCacheConfig, apply_fbcache

    model = teacache.load_model("tiny-shapes")
    prompt = "a red circle on a blue background at the left"
    with apply_fbcache(model, calibrate=True) as calibration:
        model.generate_image(seed=0, prompt=prompt, num_inference_steps=28, width=32, height=32)
    choice = fbcache_by_speedup(calibration.changes, 2, calibration.num_blocks, FBCacheConfig())
    assert round(choice.threshold, 2) == 0.18 and len(choice.source["skipped_steps"]) == 17
    with apply_fbcache(model, threshold=choice.threshold) as handle:
        model.generate_image(seed=0, prompt=prompt, num_inference_steps=28, width=32, height=32)
    assert handle.stats.skipped_steps == choice.source["skipped_steps"]


def test_the_full_size_table_is_the_committed_summary():
    """docs/caching-rules.md's and the run's tables of each rule at full size: rows of the committed summary.csv,
    each family's peak against its own vanilla's."""
    import pandas as pd

    folder = ROOT / "results" / "cuda-nvidia-h100" / "fullsize-rules"
    summary = pd.read_csv(folder / "summary.csv")
    rows = [
        f"| {r['arm']} | {'' if pd.isna(r['threshold']) else format(r['threshold'], 'g')} | {r['skipped']} of "
        f"{r['steps']} | {r['speedup']:.3f}x ({r['speedup_min']:.3f}-{r['speedup_max']:.3f}) | {r['ideal']:.3f}x | "
        f"{r['ratio_to_ideal']:.3f} | {r['arm_ms_per_step']:.1f} | "
        f"{1024 * (r['peak_memory_gib'] - r['vanilla_peak_memory_gib']):+.0f} |"
        for r in summary.to_dict("records")
    ]
    assert sorted(summary["model"].unique()) == sorted(
        ["random-flux1-dev", "random-flux2-klein-base-4b", "random-qwen-image", "random-z-image"]
    )
    assert len(rows) == 33
    for page in (ROOT / "docs" / "caching-rules.md", folder / "RUN.md"):
        text = page.read_text(encoding="utf-8")
        assert all(row in text for row in rows), page
