"""The input of a report: a sweep folder's runs, decisions and provenance, read and validated.

Every problem found becomes one ReportInputError whose message says what is wrong and what to do, raised
before anything is computed or written.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from teacache.io import FORMAT_VERSION

RUN_COLUMNS: tuple[str, ...] = (
    "format_version",
    "run_id",
    "pair_id",
    "kind",
    "variant",
    "model",
    "prompt_id",
    "prompt",
    "seed",
    "threshold",
    "num_steps",
    "computed",
    "skipped",
    "skipped_steps",
    "longest_skip_streak",
    "predicted_skipped",
    "wall_s",
    "wall_s_median",
    "speedup",
    "ideal_speedup",
    "max_abs",
    "mean_abs",
    "max_rel",
    "cosine",
    "ssim",
    "psnr",
    "adherence",
    "image_path",
)
DECISION_COLUMNS: tuple[str, ...] = (
    "run_id",
    "step",
    "num_steps",
    "sigma",
    "x",
    "rescaled",
    "accumulated",
    "compute",
    "reason",
)
KINDS = ("vanilla", "teacache")
MAX_LISTED = 5  # offending rows named in one error message before "and N more"


class ReportInputError(ValueError):
    """The sweep folder cannot be reported on; the message says what is wrong and what to do."""


@dataclass(frozen=True)
class Sweep:
    """The raw records of one sweep folder, validated."""

    runs: pd.DataFrame
    decisions: pd.DataFrame | None
    provenance: dict
    runs_sha256: str


def _read_parquet(path: Path) -> pd.DataFrame:
    try:
        return pd.read_parquet(path)
    except Exception as exc:  # noqa: BLE001 - pyarrow raises many types for a damaged file
        raise ReportInputError(f"cannot read {path}: {exc}") from None


def _missing(frame: pd.DataFrame, required: tuple[str, ...], what: str) -> None:
    missing = [c for c in required if c not in frame.columns]
    if missing:
        raise ReportInputError(f"{what} lacks columns: {', '.join(missing)}")


def validate_runs(runs: pd.DataFrame) -> None:
    """Refuse a runs table this tool cannot read, with one message naming the first problem found."""
    if "format_version" in runs.columns:
        versions = sorted({int(v) for v in runs["format_version"].dropna().unique()})
        if versions != [FORMAT_VERSION] and versions:
            found = ", ".join(str(v) for v in versions)
            raise ReportInputError(
                f"runs table from another tool version: format_version {found}, this tool reads "
                f"{FORMAT_VERSION}; re-run the sweep"
            )
    _missing(runs, RUN_COLUMNS, "runs.parquet")
    if runs.empty:
        raise ReportInputError("runs.parquet has no rows: the sweep recorded no run")
    bad_kind = sorted(set(runs["kind"]) - set(KINDS))
    if bad_kind:
        raise ReportInputError(f"runs.parquet: unknown kind {', '.join(map(repr, bad_kind))}; expected {KINDS}")
    tc = runs[runs["kind"] == "teacache"]
    if tc.empty:
        raise ReportInputError("runs.parquet has no TeaCache runs (kind == 'teacache'): nothing to report")
    no_threshold = tc[pd.to_numeric(tc["threshold"], errors="coerce").isna()]
    if not no_threshold.empty:
        raise ReportInputError(f"TeaCache run_id {no_threshold['run_id'].iloc[0]} has no threshold")
    vanilla_pairs = set(runs.loc[runs["kind"] == "vanilla", "pair_id"])
    orphans = tc[~tc["pair_id"].isin(vanilla_pairs)]
    if not orphans.empty:
        listed = [
            f"missing vanilla pair for run_id {r.run_id} (prompt_id {r.prompt_id}, seed {r.seed})"
            for r in orphans.head(MAX_LISTED).itertuples()
        ]
        more = len(orphans) - len(listed)
        tail = f"; and {more} more" if more > 0 else ""
        raise ReportInputError("; ".join(listed) + tail + "; re-run the sweep for those pairs")


def load_sweep(runs_dir: str | Path) -> Sweep:
    """Read and validate a sweep folder; raises ReportInputError with one clear message."""
    runs_dir = Path(runs_dir)
    if not runs_dir.is_dir():
        raise ReportInputError(f"no sweep folder at {runs_dir}")
    runs_path = runs_dir / "runs.parquet"
    if not runs_path.is_file():
        raise ReportInputError(
            f"no runs.parquet in {runs_dir}: point at the folder `teacache-bench sweep` wrote (…/sweep)"
        )
    runs = _read_parquet(runs_path)
    validate_runs(runs)

    prov_path = runs_dir / "provenance.json"
    if not prov_path.is_file():
        raise ReportInputError(f"no provenance.json in {runs_dir}: a report needs to say where its runs came from")
    try:
        provenance = json.loads(prov_path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ReportInputError(f"cannot read {prov_path}: {exc}") from None
    if not isinstance(provenance, dict):
        raise ReportInputError(f"{prov_path}: expected a JSON object")
    if provenance.get("format_version") != FORMAT_VERSION:
        raise ReportInputError(
            f"provenance.json from another tool version: format_version {provenance.get('format_version')}, "
            f"this tool reads {FORMAT_VERSION}; re-run the sweep"
        )

    decisions = None
    dec_path = runs_dir / "decisions.parquet"
    if dec_path.is_file():
        decisions = _read_parquet(dec_path)
        _missing(decisions, DECISION_COLUMNS, "decisions.parquet")
    return Sweep(runs, decisions, provenance, hashlib.sha256(runs_path.read_bytes()).hexdigest())
