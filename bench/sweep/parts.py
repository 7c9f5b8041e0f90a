"""A sweep folder's saved pairs: each (prompt, seed) pair's parts under ``pairs/``, written as soon as the pair is
measured, so a rerun resumes (or extends by thresholds) without measuring a finished pair again."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from bench.sweep.settings import SweepSettings
from calib.run import fingerprint
from calib.run.prompts import pair_id

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
    """A folder from before fingerprints: its finished pairs must say what its provenance.json says.

    An earlier version resumed under any settings and rewrote the provenance, so a provenance alone
    cannot vouch for the runs; their own steps and repeat counts can.
    """
    # heavy (pandas): loaded after the arguments are checked
    from bench.sweep import records

    folder = settings.out if folder is None else folder
    for path in sorted((folder / "pairs").glob("*.runs.parquet")):
        runs = read_part(path, records.RUNS)
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
