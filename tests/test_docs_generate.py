"""docs/generate.md's commands, run as written (in a scratch folder, with this checkout's console scripts), do what
the page says: each prints its skips, writes its image and the sidecar the page names, with the TeaCache keys."""

from __future__ import annotations

import json
import re

from tests import ROOT, doc_pages

PAGE = ROOT / "docs" / "generate.md"


def test_the_page_links_only_files_that_exist():
    text = PAGE.read_text(encoding="utf-8")
    links = re.findall(r"\]\((\.\./[^)]+)\)", text)
    assert links and all((PAGE.parent / link).is_file() for link in links), links


def test_the_commands_of_the_page_run_as_written(tmp_path):
    (block,) = [b.text for b in doc_pages.blocks({PAGE.name: PAGE.read_text(encoding="utf-8")})]
    done = doc_pages.run(block, tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert len(re.findall(r"skipped (\d+) of 28 \(steps [\d, ]+\)", done.stdout)) == 2, done.stdout
    assert "skipped 14 of 28" in done.stdout  # --teacache-speedup 2, as the page's table says
    sidecar = json.loads((tmp_path / "open.metadata.json").read_text())
    assert sidecar["teacache_target"] == "p5 SSIM >= 0.95" and sidecar["teacache_skipped"] == 22
    assert (tmp_path / "shapes.png").is_file()
