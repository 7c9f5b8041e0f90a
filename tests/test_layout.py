"""One job per module: every module of teacache/, calib/ and bench/ stays at or under 450 lines (docs/reference.md
names where each part lives). A module that grows past it is split along a seam of its responsibilities into a
module whose name says what it is, not trimmed of its docstrings and comments."""

from __future__ import annotations

from tests import ROOT

MAX_LINES = 450
PACKAGES = ("teacache", "calib", "bench")


def test_every_module_stays_at_or_under_the_line_limit():
    sizes = {
        path.relative_to(ROOT).as_posix(): len(path.read_text(encoding="utf-8").splitlines())
        for package in PACKAGES
        for path in sorted((ROOT / package).rglob("*.py"))
    }
    assert sizes, f"no modules found under {', '.join(PACKAGES)} in {ROOT}"
    over = {name: n for name, n in sizes.items() if n > MAX_LINES}
    assert not over, f"modules over {MAX_LINES} lines (split each along a seam of its jobs): " + ", ".join(
        f"{name} ({n})" for name, n in sorted(over.items(), key=lambda item: -item[1])
    )
