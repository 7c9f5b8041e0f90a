"""The units of work of a sharded command: each rank's share of them, and where each rank's folder keeps them.

A unit (a (prompt, seed) pair of a sweep, a run of a recording) is saved as files under one folder, the file
that marks it saved written last (:class:`UnitLayout`); rank r writes ``OUT/shards/rank-<r>`` under
``mlx.launch``, a plain run writes ``OUT`` (:func:`writer_folder`). Pure paths: no MLX.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from calib.run.ranks import World

SHARDS = "shards"  # OUT/shards/rank-<r>/: the folder rank r writes when there are several ranks


def assign(keys: Sequence[str], size: int, sticky: dict[str, int] | None = None) -> list[list[str]]:
    """Deterministic, disjoint shares of ``keys`` that cover them all, in plan order.

    A key in ``sticky`` goes to that rank (a unit a rank already started stays with it); every other key
    goes to the rank with the fewest keys so far, the lowest rank on a tie (round robin when nothing is
    sticky).
    """
    if size < 1:
        raise ValueError(f"size: expected at least 1 rank, got {size}")
    sticky = {k: r for k, r in (sticky or {}).items() if 0 <= r < size}
    shares: list[list[str]] = [[] for _ in range(size)]
    for key in keys:
        if key in sticky:
            shares[sticky[key]].append(key)
    for key in keys:
        if key not in sticky:
            min(shares, key=len).append(key)  # min() returns the first (lowest) rank among equals
    order = {k: i for i, k in enumerate(keys)}
    return [sorted(share, key=order.__getitem__) for share in shares]


@dataclass(frozen=True)
class UnitLayout:
    """Where a command keeps one unit's files inside the folder a rank writes."""

    subdir: str  # "pairs" (sweep) or "runs" (record)
    marker: str  # name ending of the file written last, which marks a unit saved: ".runs.parquet"
    noun: str = "pairs"  # what a unit is called in messages
    shared: tuple[str, ...] = ()  # files under OUT itself that belong to a unit, "{key}" in the pattern

    def saved(self, folder: Path) -> set[str]:
        parts = folder / self.subdir
        if not parts.is_dir():
            return set()
        names = (p.name for p in parts.iterdir() if not p.name.startswith("."))
        return {n.removesuffix(self.marker) for n in names if n.endswith(self.marker)}

    def files(self, out: Path, folder: Path, key: str) -> list[Path]:
        """The unit's files, relative to ``out``, marker last (it is the one that says the unit is saved)."""
        own = sorted((folder / self.subdir).glob(f"{_glob_escape(key)}.*"))
        marker = folder / self.subdir / f"{key}{self.marker}"
        listed = [p for p in own if p != marker and not p.name.startswith(".")]
        for pattern in self.shared:
            listed += sorted(out.glob(pattern.format(key=_glob_escape(key))))
        return [p.relative_to(out) for p in [*listed, marker]]


def _glob_escape(text: str) -> str:
    return "".join(f"[{c}]" if c in "*?[" else c for c in text)


def shard_folders(out: Path) -> list[tuple[int | None, Path]]:
    """Every folder under ``out`` that holds units: ``out`` itself (rank None), then shards/rank-<r> by rank."""
    found: list[tuple[int | None, Path]] = [(None, out)]
    root = out / SHARDS
    if root.is_dir():
        ranks = []
        for p in root.iterdir():
            number = p.name.removeprefix("rank-")
            if p.is_dir() and p.name.startswith("rank-") and number.isdigit():
                ranks.append((int(number), p))
        found += sorted(ranks)
    return found


def writer_folder(out: Path, world: World) -> Path:
    """The one folder this rank writes: ``out`` for a plain run, ``out/shards/rank-<r>`` under mlx.launch."""
    return out if world.size == 1 else out / SHARDS / f"rank-{world.rank}"


def locate(
    out: Path, plan: Sequence[str], layout: UnitLayout, complete: Callable[[Path, str], bool] | None = None
) -> dict[str, Path]:
    """Each complete unit of the plan and the folder holding it: ``out`` first, then shards by rank."""
    located: dict[str, Path] = {}
    wanted = set(plan)
    for _rank, folder in shard_folders(out):
        for key in sorted(layout.saved(folder) & wanted):
            if key not in located and (complete is None or complete(folder, key)):
                located[key] = folder
    return located
