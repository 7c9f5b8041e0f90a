"""What a recipe question costs in quality at the default threshold: images of the saved runs made with TeaCache
(the saved calibrated gate at the variant's default threshold) against vanilla images of the same model, made in
the same process, once at the saved recipe and once at the one asked. With a LoRA asked, that arm's reference is
vanilla with the LoRA: the question is what the gate costs on the model with the LoRA, not what the LoRA changes.

Each arm is a folder: ``fingerprint.json`` (its settings: the runs, gate and threshold it measures) and
``<run_id>.json`` per run, written as each run finishes, so a stopped drift resumes at the next run. The saved
recipe's arm lies in the drift's ``--out`` (``quality-as-saved/<model>/``: one for every question of a call), the
asked one in the question's effect folder (``quality/``). Said beside the verdict, which it does not change: no
tolerance of SSIM is measured here.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Callable
from pathlib import Path

from calib.drift import effect, model_runs
from teacache.errors import InputError
from teacache.io import read_json_object, write_json

ARM = model_runs.RUNS  # an arm's fingerprint: its settings are the runs, gate and threshold
SAVED_ARM = "quality-as-saved"  # in --out
ASKED_ARM = "quality"  # in the question's effect folder


def of_question(
    saved: Path, runs: model_runs.ModelRuns, current: Path, root: Path, log: Callable[[str], None]
) -> dict | None:
    """Both arms of a recipe question whose saved folder is ``saved`` and whose runs at the asked recipe lie in
    ``current``; the saved recipe's arm kept under ``root``. None where the variant has no default threshold."""
    threshold = _threshold(runs)
    if threshold is None:
        return None
    gate = effect.Gate.from_dict(read_json_object(saved / "gate.json"))
    _file, as_saved = model_runs.read_runs(saved)
    arms = {"threshold": threshold, "gate": gate.source}
    missing = _missing_loras(as_saved)
    if missing:
        arms["as_saved"] = {"not_measured": missing}
    else:
        arms["as_saved"] = measure(as_saved, gate, threshold, root / SAVED_ARM / runs.name, log, "as saved")
    arms["asked"] = measure(runs, gate, threshold, current / ASKED_ARM, log, "as asked")
    return arms


def _missing_loras(runs: model_runs.ModelRuns) -> str | None:
    """Why a save's LoRAs cannot be loaded here as it loaded them (their files moved or changed); None when they can."""
    from teacache.lora import LoraError

    if not runs.lora_paths:
        return None
    try:
        if runs.loras.sha256 == runs.lora_sha256:
            return None
    except LoraError:
        pass
    return f"the saved LoRA {model_runs.describe_loras(runs.lora_records)} is not where the save found it"


def measure(
    runs: model_runs.ModelRuns,
    gate: effect.Gate,
    threshold: float,
    folder: Path,
    log: Callable[[str], None],
    arm: str,
) -> dict:
    """Each run vanilla and with the gate at ``threshold``, paired in one process; one file per run as it
    finishes (runs already in ``folder`` are kept). Returns :func:`summarize` of them."""
    from calib.record import run_id
    from calib.run import arguments

    wanted = _settings(runs, gate, threshold)
    _refuse_other(folder, wanted)
    if ARM.read(folder) is None:
        ARM.save(folder, wanted)
    todo = [r for r in runs.runs if not (folder / f"{run_id(r[0], r[2])}.json").is_file()]
    if todo:
        model = arguments.load_model(runs.model, runs.base_model, runs.quantize, runs.loras)
        for index, (pid, text, seed) in enumerate(todo, 1):
            row = _pair(model, runs, gate, threshold, text, seed)
            write_json(folder / f"{run_id(pid, seed)}.json", {"run_id": run_id(pid, seed), **row})
            log(f"{runs.name}: quality {arm}: run {run_id(pid, seed)} SSIM {row['ssim']:.4f} ({index}/{len(todo)})")
    rows = [read_json_object(folder / f"{run_id(p, s)}.json") for p, _t, s in runs.runs]
    return summarize(rows, runs.steps)


def check_resumable(root: Path, current: Path, runs: model_runs.ModelRuns, saved: Path) -> None:
    """Before anything runs: the arms a recipe question would measure into ``root`` and ``current`` (see
    :func:`of_question`) are new or hold these runs with this gate."""
    _file, as_saved = model_runs.read_runs(saved)
    threshold = _threshold(runs)
    if not model_runs.recipe_change(as_saved, runs) or threshold is None:
        return
    gate = effect.Gate.from_dict(read_json_object(saved / "gate.json"))
    for folder, arm in ((root / SAVED_ARM / runs.name, as_saved), (current / ASKED_ARM, runs)):
        _refuse_other(folder, _settings(arm, gate, threshold))


def _threshold(runs: model_runs.ModelRuns) -> float | None:
    from teacache import variants

    threshold = variants.get(runs.variant).default_threshold
    return threshold if threshold and threshold > 0 else None


def _settings(runs: model_runs.ModelRuns, gate: effect.Gate, threshold: float) -> dict:
    return {"runs": runs.to_dict(), "gate": gate.to_dict(), "threshold": threshold}


def _refuse_other(folder: Path, wanted: dict) -> None:
    """An arm's folder measures one set of runs with one gate: another's is refused in one line."""
    held = (ARM.read(folder) or {"settings": {}})["settings"]
    if not held and not any(folder.glob("*.json")):  # an earlier version's arm (no fingerprint): refused
        return
    try:
        why = model_runs.mismatch(
            model_runs.ModelRuns.from_dict(held["runs"]), model_runs.ModelRuns.from_dict(wanted["runs"])
        )
    except (KeyError, TypeError, ValueError):
        why = "its settings do not read as a drift's"
    if why is None and (held.get("gate"), held.get("threshold")) != (wanted["gate"], wanted["threshold"]):
        why = "another gate or threshold"
    if why is not None:
        raise InputError(f"--out: {folder} holds the quality of other runs ({why}); choose a new --out")


def _pair(model, runs: model_runs.ModelRuns, gate: effect.Gate, threshold: float, text: str, seed: int) -> dict:
    """One run vanilla, then with the gate: SSIM and PSNR of the decoded images, and the steps skipped."""
    from calib.run.generation import generate
    from calib.run.similarity import image_metrics
    from teacache import apply_teacache

    recipe = (runs.steps, runs.width, runs.height, runs.guidance)
    vanilla = generate(model, text, seed, *recipe)
    config = dataclasses.replace(gate.config, rel_l1_thresh=threshold)
    with apply_teacache(model, config=config) as handle:
        cached = generate(model, text, seed, *recipe)
        skipped = handle.stats.skipped
    return {**image_metrics(cached.image, vanilla.image), "skipped": int(skipped)}


def summarize(rows: list[dict], steps: int) -> dict:
    """Mean and lowest SSIM over the runs, and the mean number of steps skipped of ``steps``."""
    ssim = [r["ssim"] for r in rows]
    return {
        "runs": rows,
        "n": len(rows),
        "steps": steps,
        "ssim_mean": statistics.fmean(ssim),
        "ssim_min": min(ssim),
        "skipped_mean": statistics.fmean(r["skipped"] for r in rows),
    }


def describe(quality: dict | None) -> str:
    """One clause for a verdict line: both arms' SSIM and steps skipped."""
    if not quality:
        return ""

    def arm(found: dict) -> str:
        if "not_measured" in found:
            return f"not measured ({found['not_measured']})"
        return (
            f"SSIM {found['ssim_mean']:.3f} (lowest {found['ssim_min']:.3f}), {found['skipped_mean']:.3g} of "
            f"{found['steps']} steps skipped"
        )

    return (
        f"; at the default threshold {quality['threshold']:g}, against vanilla of the same recipe over "
        f"{quality['asked']['n']} runs: as saved {arm(quality['as_saved'])}; as asked {arm(quality['asked'])}"
    )
