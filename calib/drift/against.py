"""The embedded models' numbers against a reference: which run moved beyond the noise floor, per family.

Detection only (:mod:`calib.drift.effect` judges what a change does to a calibrated gate).
"""

from __future__ import annotations

from pathlib import Path

from calib.drift import noise, numbers
from teacache import variants
from teacache.errors import InputError
from teacache.io import read_json_object


def load_numbers(path: Path) -> dict:
    """numbers.json as ``numbers`` wrote it (its format checked)."""
    data = read_json_object(path)
    if data.get("format_version") != numbers.RESULT_FORMAT or not isinstance(data.get("runs"), dict):
        raise InputError(f"{path}: not numbers of format_version {numbers.RESULT_FORMAT}")
    return data


def comparable(current: dict, reference: dict) -> bool:
    """Whether two numbers files were made with the same generation settings."""
    keys = ("steps", "width", "height", "prompt", "seed", "fullsize", "sketch_size", "blocks")
    return all(current["settings"].get(k) == reference["settings"].get(k) for k in keys)


def compare_numbers(current: dict, reference: dict, floor: dict) -> dict:
    """Per run (variant/dtype): each metric's distance, its threshold from the floor, and whether it moved."""
    result = {}
    for key, run in current["runs"].items():
        ref = reference["runs"].get(key)
        if not numbers.comparable(run, ref) or run["dtype"] not in floor["floor"]:
            continue
        metrics = {}
        for metric, distance in numbers.distances(run, ref).items():
            limit = noise.threshold(floor, run["dtype"], metric)
            metrics[metric] = {"distance": distance, "threshold": limit, "moved": distance > limit}
        result[key] = {
            "variant": run["variant"],
            "dtype": run["dtype"],
            "identical": all(run[p]["sha256"] == ref[p]["sha256"] for p in ("vanilla", "recorded")),
            "moved": any(m["moved"] for m in metrics.values()),
            "metrics": metrics,
        }
    return result


def moved_by_family(comparison: dict | None, dtypes: tuple[str, ...]) -> dict[str, dict[str, bool] | None]:
    result: dict[str, dict[str, bool] | None] = {fam.name: None for fam in variants.families()}
    if comparison is None:
        return result
    for run in comparison.values():
        family = variants.get(run["variant"]).family
        result[family] = (result[family] or {}) | {run["dtype"]: run["moved"]}
    return {fam: ({d: m[d] for d in dtypes if d in m} or None) if m else None for fam, m in result.items()}


def ratios_by_family(comparison: dict | None) -> dict[str, dict[str, float]]:
    """Per family and dtype, the largest distance / threshold over the metrics (above 1: moved)."""
    result: dict[str, dict[str, float]] = {}
    for run in (comparison or {}).values():
        worst = max(m["distance"] / m["threshold"] for m in run["metrics"].values())
        slot = result.setdefault(variants.get(run["variant"]).family, {})
        slot[run["dtype"]] = max(slot.get(run["dtype"], 0.0), worst)
    return result


def numbers_errors(current: dict | None) -> dict[str, str]:
    """The first error of each family whose model failed to build or run."""
    errors: dict[str, str] = {}
    for run in (current or {}).get("runs", {}).values():
        if "error" in run:
            errors.setdefault(variants.get(run["variant"]).family, f"{run['variant']} {run['dtype']}: {run['error']}")
    return errors


def committed_references(slug: str) -> dict[str, dict]:
    """The committed numbers of every verified release on this hardware, by release."""
    folder = noise.REFERENCES / slug
    return {p.stem.removeprefix("mflux-"): load_numbers(p) for p in sorted(folder.glob("mflux-*.json"))}
