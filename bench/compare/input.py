"""The input of compare-hardware: campaign folders found under a hardware folder, and what each one holds.

A campaign is ``teacache-bench campaign`` output (``fit/``, ``sweep/``, ``traces/``, ``report/``); this
module finds them, names their hardware and reads their provenance, fit and tolerance source. Every
unreadable input becomes one CompareError naming the file.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from teacache.errors import TeaCacheError
from teacache.io import project_root, read_json_object
from teacache.provenance import tolerance_module_name

PROJECT_ROOT = project_root()
STAGES = ("traces", "fit", "sweep", "report", "tolerances.py", "gapcheck")


class CompareError(TeaCacheError, ValueError):
    """An input this command cannot compare; the message says which and why."""


def _is_campaign(folder: Path) -> bool:
    return (folder / "sweep" / "runs.parquet").is_file() or (folder / "fit" / "fit.json").is_file()


def version_key(name: str):
    try:  # packaging is not a declared dependency: without it, names sort as text
        from packaging.version import Version

        return (0, Version(name))
    except Exception:  # noqa: BLE001 - not a version string: sort it before every real version
        return (-1, name)


def _read_json(path: Path) -> dict:
    return read_json_object(path, CompareError)


def _variant_of(campaign: Path) -> str:
    for path in (campaign / "sweep" / "provenance.json", campaign / "fit" / "fit.json"):
        if path.is_file():
            variant = _read_json(path).get("variant")
            if isinstance(variant, str) and variant:
                return variant
    return campaign.parent.name


def find_campaigns(root: Path) -> dict[str, Path]:
    """variant -> campaign folder under a hardware, variant or campaign folder (newest mflux version wins)."""
    root = Path(root)
    if not root.is_dir():
        raise CompareError(f"{root} is not a folder")
    if _is_campaign(root):
        return {_variant_of(root): root}
    found: dict[str, list[Path]] = {}
    for child in sorted(p for p in root.iterdir() if p.is_dir()):
        candidates = [child] if _is_campaign(child) else sorted(p for p in child.iterdir() if p.is_dir())
        for folder in candidates:
            if _is_campaign(folder):
                found.setdefault(_variant_of(folder), []).append(folder)
    return {v: max(paths, key=lambda p: version_key(p.name)) for v, paths in sorted(found.items())}


def hardware_label(root: Path, campaigns: dict[str, Path]) -> str:
    """The hardware's folder name (results/<hardware>/<variant>/<version>), else one built from the provenance."""
    root = Path(root).resolve()
    found = [p.resolve() for p in campaigns.values()]
    if _is_campaign(root):
        if root.parent.name == _variant_of(root):
            return root.parent.parent.name
    elif all(len(p.relative_to(root).parts) == 2 for p in found):
        return root.name
    elif all(len(p.relative_to(root).parts) == 1 for p in found) and root.name in campaigns:
        return root.parent.name
    prov = _campaign_provenance(found[0])
    name = "".join(c if c.isalnum() else "-" for c in str(prov.get("device_name", "unknown")).lower())
    return f"{prov.get('backend', 'unknown')}-" + "-".join(p for p in name.split("-") if p)


def _campaign_provenance(campaign: Path) -> dict:
    for path in (campaign / "sweep" / "provenance.json", campaign / "traces" / "provenance.json"):
        if path.is_file():
            return _read_json(path)
    fit = campaign / "fit" / "fit.json"
    if fit.is_file():
        return _read_json(fit).get("provenance") or {}
    return {}


def tolerance_source(campaign: Path, label: str) -> Path | None:
    """The campaign's own tolerances.py, else the hardware's generated tests/tolerances/<hardware>.py."""
    own = campaign / "tolerances.py"
    if own.is_file():
        return own

    generated = PROJECT_ROOT / "tests" / "tolerances" / f"{tolerance_module_name(label)}.py"
    return generated if generated.is_file() else None


def _pairs_measured(campaign: Path, planned: int) -> str | None:
    """'n of planned' (prompt, seed) pairs in the sweep's runs table: an interrupted sweep shows here."""
    runs = campaign / "sweep" / "runs.parquet"
    if not runs.is_file():
        return None
    try:
        n = int(pd.read_parquet(runs, columns=["pair_id"])["pair_id"].nunique())
    except Exception:  # noqa: BLE001 - a damaged table is reported by load_sweep with its own message
        return None
    return f"{n} of {planned}" if planned else str(n)


def provenance_summary(campaign: Path) -> dict:
    prov = _campaign_provenance(campaign)
    versions = prov.get("versions") or {}
    traces_prov = campaign / "traces" / "provenance.json"
    overhead = None
    if traces_prov.is_file():
        overhead = (_read_json(traces_prov).get("recording_overhead") or {}).get("median")
    prompts = prov.get("prompts") or []
    seeds = prov.get("seeds") or []
    return {
        "path": str(campaign),
        "backend": prov.get("backend"),
        "device_name": prov.get("device_name"),
        "os": prov.get("os"),
        "mlx": versions.get("mlx"),
        "mflux": versions.get("mflux"),
        "python": versions.get("python"),
        "numpy": versions.get("numpy"),
        "date_utc": prov.get("date_utc"),
        "git_commit": (prov.get("git") or {}).get("commit"),
        "steps": prov.get("steps"),
        "resolution": prov.get("resolution"),
        "guidance": prov.get("guidance"),
        "sweep_prompts_x_seeds": f"{len(prompts)} x {len(seeds)}" if prompts else None,
        "sweep_pairs_measured": _pairs_measured(campaign, len(prompts) * len(seeds)),
        "stages": [name for name in STAGES if (campaign / name).exists()],
        "repeats": prov.get("repeats"),
        "default_threshold": prov.get("default_threshold"),
        "recording_overhead_median": overhead,
    }


def fit_summary(campaign: Path) -> dict | None:
    path = campaign / "fit" / "fit.json"
    if not path.is_file():
        return None
    fit = _read_json(path)
    sel = fit.get("selected")
    if not isinstance(sel, dict):
        raise CompareError(f"{path}: no 'selected' candidate (not a teacache-calib fit output)")
    return {
        "label": sel.get("label"),
        "form": sel.get("form"),
        "coefficients": list(sel.get("coefficients") or []),
        "time_coefficients": list(sel.get("time_coefficients") or []),
        "x_range": list(sel.get("x_range") or []),
        "r2": sel.get("r2"),
        "cv_r2": sel.get("cv_r2"),
        "cv_rmse": sel.get("rmse"),
        "n_pairs": sel.get("n_pairs"),
        "n_prompts": sel.get("n_prompts"),
        "candidates_cv_r2": {c["label"]: c.get("cv_r2") for c in fit.get("candidates") or [] if "label" in c},
        "options": fit.get("options") or {},
    }
