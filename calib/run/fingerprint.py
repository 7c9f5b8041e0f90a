"""A folder's settings fingerprint: a rerun resumes only work that was made with the same settings.

Resuming blindly mixes runs made with other settings (steps, size, weights, versions) under a
provenance that describes only the last command. ``fingerprint.json`` records the settings before
the first generation; a later run into the folder compares its own with them and either resumes
(the same), extends (only new seeds or thresholds were added: said, and recorded with the date) or
stops with one line naming what differs.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import mlx.core as mx

from teacache.errors import TeaCacheError
from teacache.io import FORMAT_VERSION, file_sha256, portable, project_root
from teacache.loading import RANDOM_PREFIX, resolve_spec
from teacache.lora import Loras
from teacache.provenance import DISTRIBUTION, hardware_slug, installed_version
from teacache.revisions import local_revision

FILE = "fingerprint.json"
MAX_SHOWN = 8  # values of one list shown in a message before "..."
# Settings that come from a computation (fitted coefficients): a refit of the same traces in another process
# or on another machine is not bit-identical, so these compare within FIT_RTOL, not by their bytes.
COMPUTED = ("coefficients", "compare_rescales")
# Relative. Measured: refits of the committed tiny-shapes traces (teacache-calib fit --min-step 2) on an Intel
# Xeon differ from the committed fit made on an AMD EPYC by at most 2.9e-15 (coefficients) and 6.6e-16 (time
# coefficients), x ranges identical; two refits on one machine are identical. A fit from other traces moves
# them by 1e-2 or more (one seed of the two: another selected form). 1e-9 sits between, far from both.
FIT_RTOL = 1e-9


class SettingsMismatch(TeaCacheError, ValueError):
    """The folder holds results made with other settings; the message names them and the way out."""


@dataclass(frozen=True)
class FolderState:
    """What a run does with the folder: start it, resume it, or extend it by new seeds/thresholds."""

    status: str  # "new", "resume", "extend" or "adopt" (a folder from before fingerprints whose provenance matches)
    added: dict[str, list] = field(default_factory=dict)
    history: list[dict] = field(default_factory=list)

    def message(self, folder: Path) -> str | None:
        if self.status == "adopt":
            return f"resuming {folder}: made by an earlier version; its provenance.json matches these settings"
        if self.status != "extend":
            return None
        parts = [f"{key} {_show(values)}" for key, values in self.added.items()]
        return f"extending {folder}: adding {' and '.join(parts)}; everything else matches, finished work is kept"


# ------------------------------------------------------------------------------------- what to record


def versions() -> dict:
    """The versions a folder's results depend on: MLX, mflux and this project."""
    return {"mlx": mx.__version__, "mflux": installed_version("mflux"), "project": installed_version(DISTRIBUTION)}


HEAD = 1 << 20  # bytes read from each end of a weights file


def _folder_digest(folder: Path) -> str:
    """Each safetensors file's name, size and both ends: cheap on many GB, changes when a weight file does, and
    the same for a copy of the folder (moved, or copied to another machine, as a drift save is judged)."""
    digest = hashlib.sha256()
    for path in sorted(folder.rglob("*.safetensors")):
        size = path.stat().st_size
        with path.open("rb") as handle:
            head = handle.read(HEAD)
            handle.seek(max(size - HEAD, 0))
            tail = handle.read(HEAD)
        digest.update(f"{path.relative_to(folder)}:{size}:".encode())
        digest.update(hashlib.sha256(head + tail).digest())
    return digest.hexdigest()


def embedded_weight_files(name: str) -> list[Path]:
    """A trained embedded model's committed weights files (none: its weights are drawn from a seed)."""
    weights = project_root() / "teacache" / "models" / "weights"
    return sorted(weights.glob(f"{name}.safetensors")) + sorted((weights / name).glob("*.safetensors"))


def weights_identity(
    model: str, base_model: str | None = None, blocks: int | None = None, loras: Loras | None = None
) -> dict:
    """Which weights a model name stands for, without loading them (``blocks``: of a random-<variant> build),
    with the LoRAs applied to them (each file's SHA-256 and scale; the key is there only with LoRAs, so a folder
    recorded without any keeps its fingerprint)."""
    identity = _base_weights(model, base_model, blocks)
    return {**identity, "loras": loras.identity()} if loras else identity


def _base_weights(model: str, base_model: str | None, blocks: int | None) -> dict:
    if model.startswith(RANDOM_PREFIX) and base_model is None:
        return {"random": model, "seed": 0, "blocks": blocks}
    path = Path(model).expanduser()
    if base_model is not None and path.is_dir():
        return {"folder": str(path.resolve()), "files_sha256": _folder_digest(path)}
    spec = resolve_spec(model)
    if spec.embedded:  # random weights come from the builder and a seed; trained ones from its weights file
        files = embedded_weight_files(spec.name)
        identity = {"embedded": spec.name, "builder": spec.builder}
        return {**identity, "weights_sha256": file_sha256(files[0])} if files else {**identity, "seed": 0}
    repo = spec.mflux_names[0]
    return {"repo": repo, "revision": local_revision(repo)}


def environment(model: str, base_model: str | None = None, loras: Loras | None = None) -> dict:
    """The settings every fingerprint holds besides the command's own: weights (LoRAs included), versions,
    hardware."""
    weights = weights_identity(model, base_model, loras=loras)
    return {"weights": weights, "versions": versions(), "hardware": hardware_slug()}


# ---------------------------------------------------------------------------------------- comparison


def canonical(settings: dict) -> dict:
    """As the file will hold it: JSON types, and machine paths written portably (teacache.io.portable)."""
    return json.loads(portable(json.dumps(settings, sort_keys=True, default=str)))


def _same(a, b) -> bool:
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def close(a, b) -> bool:
    """Equal, numbers within FIT_RTOL of each other (for COMPUTED settings)."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(close(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(close(x, y) for x, y in zip(a, b, strict=True))
    numbers = (int, float)
    if isinstance(a, numbers) and isinstance(b, numbers) and not isinstance(a, bool) and not isinstance(b, bool):
        return math.isclose(a, b, rel_tol=FIT_RTOL, abs_tol=0.0)
    return _same(a, b)


def _show(value, digits: int = 6) -> str:
    if isinstance(value, list):
        items = [f"{v:.{digits}g}" if isinstance(v, float) else str(v) for v in value]
        return ",".join(items[:MAX_SHOWN]) + (",..." if len(items) > MAX_SHOWN else "")
    if isinstance(value, float):
        return f"{value:.{digits}g}"
    if value is None:
        return "none"
    return str(value)


def _show_both(stored, current) -> tuple[str, str]:
    """Both values at the precision at which they differ (6 significant digits when that is enough)."""
    for digits in range(6, 18):
        shown = _show(stored, digits), _show(current, digits)
        if shown[0] != shown[1]:
            return shown
    return _show(stored, 17), _show(current, 17)


def _list_difference(key: str, stored: list, current: list) -> str:
    """Two lists by their lengths and their first difference, which a shortened list would hide."""
    at = next((i for i, (a, b) in enumerate(zip(stored, current, strict=False)) if not _same(a, b)), None)
    if at is None:
        at = min(len(stored), len(current))
    old, new = _show_both(stored[at] if at < len(stored) else None, current[at] if at < len(current) else None)
    return f"{key}: {len(stored)} (this run: {len(current)}), first different at item {at + 1}: {old} (this run: {new})"


def _difference(key: str, stored, current) -> str:
    if key == "prompts" and isinstance(stored, dict) and isinstance(current, dict):
        if list(stored) != list(current):
            return _list_difference("prompts", list(stored), list(current))
        changed = [k for k in stored if stored[k] != current[k]]
        return f"prompts: the text of {_show(changed)} (this run: other text)"
    if isinstance(stored, dict) and isinstance(current, dict):
        keys = [k for k in {**stored, **current} if not _same(stored.get(k), current.get(k))]
        return "; ".join(_difference(f"{key}.{k}", stored.get(k), current.get(k)) for k in keys)
    if isinstance(stored, list) and isinstance(current, list) and max(len(stored), len(current)) > MAX_SHOWN:
        return _list_difference(key, stored, current)
    old, new = _show_both(stored, current)
    return f"{key} {old} (this run: {new})"


def compare(stored: dict, current: dict, extendable: tuple[str, ...] = ()) -> tuple[list[str], dict[str, list]]:
    """(what differs, what was added) between recorded and current settings; only keys of ``current``."""
    differences, added = [], {}
    for key, value in current.items():
        if key not in stored:
            differences.append(f"{key} not recorded (this run: {_show(value)})")
            continue
        old = stored[key]
        if _same(old, value) or (key in COMPUTED and close(old, value)):
            continue
        if key in extendable and isinstance(old, list) and isinstance(value, list):
            new = [v for v in value if v not in old]
            if all(v in value for v in old):
                added[key] = new
                continue
            differences.append(
                f"{key} {_show(old)} (this run: {_show(value)}; to extend the folder, list all of its {key} "
                "plus the new ones)"
            )
            continue
        differences.append(_difference(key, old, value))
    return differences, added


# ----------------------------------------------------------------------------------------- the folder


def has_results(folder: Path, outputs: tuple[str, ...]) -> bool:
    """Any of ``outputs`` in ``folder``: a file, or a folder with something in it."""
    for name in outputs:
        path = folder / name
        if path.is_file() or (path.is_dir() and any(path.iterdir())):
            return True
    return False


def read(folder: Path) -> dict | None:
    path = folder / FILE
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise SettingsMismatch(f"--out: cannot read {path} ({exc}); pass --force-new to start afresh") from None
    if not isinstance(data, dict) or data.get("format_version") != FORMAT_VERSION or "settings" not in data:
        raise SettingsMismatch(
            f"--out: {path} is from another tool version; pass --force-new to start afresh, or choose a new --out"
        )
    return data


def from_provenance(folder: Path, current: dict) -> dict:
    """The settings of a folder from before fingerprints, as its provenance.json recorded them.

    What an earlier version did not record (the weights' identity, a base model, the core count in the
    hardware name) is taken from this run, and the fingerprint's history says so. Without a readable
    provenance.json (an interrupted first run) the folder cannot be checked: SettingsMismatch.
    """
    try:
        prov = json.loads((folder / "provenance.json").read_text(encoding="utf-8"))
        versions = prov.get("versions") or {}
        recorded = {
            "model": prov["model"],
            "quantize": prov.get("quantization"),
            "steps": prov["steps"],
            "size": prov["resolution"],
            "guidance": prov["guidance"],
            "prompts": {p["id"]: p["text"] for p in prov["prompts"]},
            "seeds": prov["seeds"],
            "variant": prov["variant"],
            "versions": {
                "mlx": versions.get("mlx"),
                "mflux": versions.get("mflux"),
                "project": versions.get("teacache"),
            },
            "hardware": hardware_slug({k: prov.get(k) for k in ("backend", "device_name", "cpu_count")}),
        }
        if "thresholds" in prov:
            recorded |= {"thresholds": prov["thresholds"], "repeats": prov["repeats"]}
            recorded["coefficients"] = {k: v for k, v in prov["rescale"].items() if k != "provenance"}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        raise SettingsMismatch(
            f"--out: {folder} holds results without a settings fingerprint or a readable provenance.json (an earlier "
            "version, interrupted), so they cannot be checked against this run; pass --force-new to start it "
            "afresh, or choose a new --out"
        ) from None
    settings = {key: recorded.get(key, value) for key, value in current.items()}
    assumed = sorted(set(current) - set(recorded))
    note = f"settings read from provenance.json of an earlier version; not recorded then: {', '.join(assumed)}"
    command = "teacache-bench sweep" if "thresholds" in prov else "teacache-calib record"
    history = [{"date_utc": prov.get("date_utc"), "adopted": note}]
    return {"settings": canonical(settings), "history": history, "command": command}


def digest(data: dict) -> str:
    """A short name of a fingerprint's settings, for provenance."""
    return hashlib.sha256(json.dumps(data["settings"], sort_keys=True).encode()).hexdigest()
