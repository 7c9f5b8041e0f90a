"""Every relative link in README.md and docs/*.md points to a file or folder that exists."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from tests import ROOT

PAGES = (ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")))
# Pages the README already links to that come with other branches: they are named here until they land.
NOT_YET_WRITTEN = {"docs/generate.md", "docs/rescale-forms.md"}
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def relative_links(text: str) -> list[str]:
    """The targets of the page's Markdown links that name a path: no scheme, no bare #anchor."""
    targets = (target.split("#", 1)[0] for target in LINK.findall(text))
    return [t for t in targets if t and not re.match(r"^[a-z][a-z0-9+.-]*:", t, flags=re.I)]


def test_relative_links_are_the_path_part_of_markdown_links():
    text = "[a](docs/x.md#part) [b](https://example.org/y.md) [c](#here) [d](../results/r.md)"
    assert relative_links(text) == ["docs/x.md", "../results/r.md"]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_relative_link_points_to_an_existing_file(page: Path):
    missing = []
    for target in relative_links(page.read_text(encoding="utf-8")):
        path = (page.parent / target).resolve()
        if not path.exists() and Path(os.path.relpath(path, ROOT)).as_posix() not in NOT_YET_WRITTEN:
            missing.append(target)
    assert not missing, f"{page.relative_to(ROOT)}: {missing}"
