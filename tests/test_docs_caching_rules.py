"""docs/caching-rules.md's First-Block Cache by speedup, run as written (in a scratch folder, with this checkout's
console scripts): it picks the threshold the page names and the run skips the steps the replay predicted."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from tests import doc_pages


def test_first_block_cache_by_speedup_runs_as_written(tmp_path):
    block = doc_pages.block("docs/caching-rules.md", "By speedup")
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    done = subprocess.run(["bash", "-euo", "pipefail", "-c", block], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=600)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    chosen = re.search(r"threshold ([\d.]+) for speedup 2x .* computed steps 11, skipped steps 17", done.stdout)
    assert chosen and round(float(chosen.group(1)), 2) == 0.18, done.stdout  # the page: 0.18, 11 computed
    assert "skipped 17 of 28" in done.stdout, done.stdout  # the run took the replayed decisions
    assert (tmp_path / "fbcache-2x.png").is_file()
