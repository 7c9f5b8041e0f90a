"""A sweep folder's saved pairs: each (prompt, seed) pair's parts under ``pairs/``, written as soon as the pair is
measured, so a rerun resumes (or extends by thresholds) without measuring a finished pair again.

Once the folder's tables are merged, pairs/ goes (:func:`discard_parts`): the merged tables hold the same rows.
A rerun rebuilds the parts of the pairs they hold before it plans (:func:`restore_parts`), so it resumes, extends
and merges again as if pairs/ had been kept."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import TYPE_CHECKING

from bench.sweep.files import LAYOUT
from bench.sweep.settings import SweepSettings
from calib.run import fingerprint
from calib.run.prompts import pair_id
from calib.run.units import shard_folders

if TYPE_CHECKING:
    import pandas as pd

    from bench.sweep.schema import Table


def part_path(parts: Path, pid: str, table: str) -> Path:
    """Where pair ``pid`` keeps its part of ``table`` (runs, decisions or noop) inside ``parts``."""
    return parts / f"{pid}.{table}.parquet"


def read_part(path: Path, table: Table) -> pd.DataFrame:
    """One saved part of a pair; a damaged one is named with the way out (its pair is measured anew)."""
    # heavy (pandas): loaded after the arguments are checked
    from bench.sweep import records

    try:
        return records.read_table(path, table)  # a pair's predicted skips: added when the folder's table is assembled
    except records.RecordError as exc:
        raise records.RecordError(
            f"{exc} ({path}); delete that file and run the same command again: its pair is measured anew"
        ) from None


def done_thresholds(parts: Path, pairs: list[tuple[str, str, int]]) -> dict[str, set[float]]:
    """Per pair, the thresholds its finished part holds (a runs part is written last: it marks them done)."""
    # heavy (pandas): loaded after the arguments are checked
    from bench.sweep import records

    done = {}
    for prompt_id, _text, seed in pairs:
        path = part_path(parts, pair_id(prompt_id, seed), "runs")
        if path.is_file():
            runs = read_part(path, records.RUNS)
            done[pair_id(prompt_id, seed)] = {float(t) for t in runs.loc[runs["kind"] == "teacache", "threshold"]}
    return done


def save_pair(parts: Path, pid: str, rows: list[dict], decisions: list[dict], noop: dict) -> None:
    """Write one pair's tables, merged with what an earlier run of the pair left (an extension by thresholds).

    Decisions and noop first, runs last: a runs part marks the pair's thresholds done, and a rerun after
    an interruption between the writes recomputes them (rows of the same run_id are replaced, not doubled).
    """
    # heavy (pandas): loaded after the arguments are checked
    import pandas as pd

    from bench.sweep import records

    new_ids = {r["run_id"] for r in rows}
    merged = {}
    for table, fresh in ((records.DECISIONS, decisions), (records.NOOP, [noop]), (records.RUNS, rows)):
        path = parts / f"{pid}.{table.file}"
        frame = records.to_frame(table, fresh)
        if path.is_file():
            old = read_part(path, table)
            if table is records.NOOP:  # the proxy-noop of the first run of the pair stays
                frame = old
            elif table is records.RUNS:
                keep = old[~old["run_id"].isin(new_ids) & (old["kind"] != "vanilla")]
                vanilla = old[old["kind"] == "vanilla"]  # the pair's reference run stays the first one measured
                teacache = pd.concat([keep, frame[frame["kind"] != "vanilla"]], ignore_index=True)
                frame = pd.concat([vanilla, teacache.sort_values("threshold", kind="stable")], ignore_index=True)
            else:
                frame = pd.concat([old[~old["run_id"].isin(new_ids)], frame], ignore_index=True)
        merged[table.file] = frame
    for table in (records.DECISIONS, records.NOOP, records.RUNS):
        records.write_table(parts / f"{pid}.{table.file}", table, merged[table.file])


def check_parts_agree(settings: SweepSettings, folder: Path | None = None) -> None:
    """A folder from before fingerprints: its finished pairs (their parts, and the merged runs table that holds
    them once pairs/ is gone) must say what its provenance.json says.

    An earlier version resumed under any settings and rewrote the provenance, so a provenance alone
    cannot vouch for the runs; their own steps and repeat counts can.
    """
    # heavy (pandas): loaded after the arguments are checked
    from bench.sweep import records

    folder = settings.out if folder is None else folder
    merged = [folder / records.RUNS.file] if (folder / records.RUNS.file).is_file() else []
    for path in [*sorted((folder / "pairs").glob("*.runs.parquet")), *merged]:
        runs = read_part(path, records.RUNS) if path not in merged else records.read_table(path, records.RUNS)
        steps = sorted({int(n) for n in runs["num_steps"]})
        repeats = sorted({len(w) for w in runs["wall_s"]})
        if steps != [settings.steps] or repeats != [settings.repeats]:
            raise fingerprint.SettingsMismatch(
                f"--out: {folder} holds runs that disagree with its provenance.json ({path.name}: steps "
                f"{_joined(steps)}, repeats {_joined(repeats)}; provenance: steps {settings.steps}, repeats "
                f"{settings.repeats}); pass --force-new to start it afresh, or choose a new --out"
            )


def _joined(values) -> str:
    return ",".join(str(v) for v in values)


def todo_pairs(
    settings: SweepSettings, folder: Path | None = None, pairs: list[tuple[str, str, int]] | None = None
) -> list[tuple[tuple[str, str, int], list[float]]]:
    """The pairs with work left in ``folder`` (default: the sweep folder), each with the thresholds it lacks."""
    folder = settings.out if folder is None else folder
    pairs = settings.pairs if pairs is None else pairs
    done = done_thresholds(folder / "pairs", pairs)
    todo = []
    for pair in pairs:
        pid = pair_id(pair[0], pair[2])
        missing = [t for t in settings.thresholds if t not in done.get(pid, set())]
        if pid not in done or missing:
            todo.append((pair, missing))
    return todo


def restore_parts(out: Path) -> list[str]:
    """Rebuild the parts of the pairs ``out``'s merged tables hold and no folder of the sweep keeps; returns them.

    Each pair's rows (runs and noop by pair_id, decisions by the run_id of its runs), in the order its part held
    them, written through the writer :func:`save_pair` uses (derived columns left out, as in a part), runs last.
    """
    # heavy (pandas): loaded after the arguments are checked
    from bench.sweep import records

    if not (out / records.RUNS.file).is_file():
        return []
    held = set().union(*(LAYOUT.saved(folder) for _rank, folder in shard_folders(out)))
    runs = _merged(out, records.RUNS)
    missing = [pid for pid in dict.fromkeys(runs["pair_id"]) if pid not in held]
    if not missing:
        return []
    decisions, noop = _merged(out, records.DECISIONS), _merged(out, records.NOOP)
    owner = decisions["run_id"].map(dict(zip(runs["run_id"], runs["pair_id"], strict=True)))
    if owner.isna().any():
        raise records.RecordError(
            f"{out / records.DECISIONS.file}: decisions of run_id {decisions['run_id'][owner.isna()].iloc[0]}, "
            f"which {records.RUNS.file} lacks: its pairs cannot be rebuilt; pass --force-new to start it afresh"
        )
    parts = out / LAYOUT.subdir
    parts.mkdir(exist_ok=True)
    for pid in missing:
        records.write_table(part_path(parts, pid, "decisions"), records.DECISIONS, decisions[owner == pid])
        records.write_table(part_path(parts, pid, "noop"), records.NOOP, noop[noop["pair_id"] == pid])
        records.write_table(part_path(parts, pid, "runs"), records.RUNS, runs[runs["pair_id"] == pid])
    return missing


def _merged(out: Path, table: Table) -> pd.DataFrame:
    """One of ``out``'s merged tables, which a rebuild of its pairs needs."""
    # heavy (pandas): loaded after the arguments are checked
    from bench.sweep import records

    path = out / table.file
    if not path.is_file():
        raise records.RecordError(
            f"--out: {out} holds {records.RUNS.file} but no {table.file} and not every pair's parts: its pairs "
            "cannot be rebuilt; pass --force-new to start it afresh"
        )
    return records.read_table(path, table)


def discard_parts(out: Path) -> None:
    """After the merge, the parts under ``out/pairs`` go: the merged tables hold their rows. Each pair's marker
    (its runs part) first, so a deletion cut short leaves no pair that looks saved and lacks a part."""
    parts = out / LAYOUT.subdir
    if not parts.is_dir():
        return
    for path in parts.glob(f"*{LAYOUT.marker}"):
        path.unlink()
    shutil.rmtree(parts)
