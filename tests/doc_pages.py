"""The shell blocks of README.md and docs/*.md, by page, heading and position: what the journey tests run."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from tests import ROOT

PAGE_PATHS = (ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")))
PAGES = {path.relative_to(ROOT).as_posix(): path.read_text(encoding="utf-8") for path in PAGE_PATHS}
SCRIPTS = ("teacache-calib", "teacache-bench", "teacache-generate", "teacache-demo")
MODULES = {"bench.cli": "teacache-bench", "calib.cli": "teacache-calib"}  # `python -m bench.cli ...`


@dataclass(frozen=True)
class Block:
    page: str  # "README.md", "docs/curves.md"
    heading: str  # the nearest heading above it
    index: int  # its place among the blocks under that heading, from 0
    text: str  # as bash runs it

    @property
    def key(self) -> tuple[str, str, int]:
        return self.page, self.heading, self.index

    @property
    def lines(self) -> list[str]:
        return command_lines(self.text)


def command_lines(text: str) -> list[str]:
    """The command lines of a block's text, continuations joined and comments dropped."""
    joined = text.replace("\\\n", " ")
    lines = [line.split(" #", 1)[0].strip() for line in joined.splitlines() if not line.lstrip().startswith("#")]
    return [line for line in lines if line]


def blocks(pages: dict[str, str] = PAGES) -> list[Block]:
    """Every ```sh block of ``pages`` (name -> text), in page order."""
    found = []
    for page, text in pages.items():
        heading, position, seen = "", 0, {}
        for match in re.finditer(r"^```sh\n(.*?)^```", text, flags=re.S | re.M):
            headings = re.findall(r"^#+ (.+)$", text[position : match.start()], flags=re.M)
            heading = headings[-1] if headings else heading
            position = match.end()
            index = seen.get(heading, 0)
            seen[heading] = index + 1
            found.append(Block(page, heading, index, match.group(1)))
    return found


def block(page: str, heading: str, index: int = 0, pages: dict[str, str] = PAGES) -> str:
    """The text of one block; a key that names none fails with what the page holds."""
    texts = {b.key: b.text for b in blocks({page: pages[page]})}
    assert (page, heading, index) in texts, f"no block {(page, heading, index)}: the page has {list(texts)}"
    return texts[page, heading, index]


def run(text: str, cwd: Path, timeout: int = 600) -> subprocess.CompletedProcess:
    """A block run as written with bash (-euo pipefail) in ``cwd``, this checkout's console scripts first on PATH."""
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    return subprocess.run(
        ["bash", "-euo", "pipefail", "-c", text], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )


def commands(line: str) -> list[tuple[str, list[str]]]:
    """(console script, its arguments) for each project command of one line: ``a && b | c`` gives each, an
    ``mlx.launch ... -- python -m bench.cli`` the command after ``--``, ``VAR=value`` prefixes are dropped."""
    lexer = shlex.shlex(line, posix=True, punctuation_chars=";&|")
    lexer.whitespace_split = True
    found, words = [], []
    for token in [*lexer, ";"]:
        if token and set(token) <= set(";&|"):
            found += _project_command(words)
            words = []
        else:
            words.append(token)
    return found


def _project_command(words: list[str]) -> list[tuple[str, list[str]]]:
    while words and re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", words[0]):
        words = words[1:]
    if "--" in words and words and words[0].endswith("mlx.launch"):
        words = words[words.index("--") + 1 :]
    if len(words) >= 3 and words[0].endswith(("python", "python3")) and words[1] == "-m" and words[2] in MODULES:
        return [(MODULES[words[2]], words[3:])]
    if words and words[0] in SCRIPTS:
        return [(words[0], words[1:])]
    return []
