"""Several recipe questions in one call: ``drift --model M --against DIR --lora-paths F --lora-scales 0.5,1,1.5``
asks, for each scale, whether the saved calibration serves the model with the LoRA at that scale.

Each is answered in a folder of its own inside ``--out`` (``lora-scale-<s>/``: its ``verdict.json``, effect runs
and quality arm, written as a one-question drift writes them, so a stopped call resumes scale by scale and a
finished scale is not run again), and ``--out/verdict.json`` gathers their verdicts with the worst exit status.
The saved recipe's quality arm is measured once for all of them (``--out/quality-as-saved/``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

from calib.drift import model_runs
from calib.drift.verdict import Verdict
from teacache.io import write_json

FOLDERS = "lora-scale-*"  # what a call of several questions writes into --out besides a one-question drift's files
FORMAT = 1


def out_of(out: Path, runs: model_runs.ModelRuns, count: int) -> Path:
    """Where one question's answer is written: ``--out`` itself when it is the call's only question."""
    if count <= 1:
        return out
    return out / FOLDERS.replace("*", "-".join(f"{s:g}" for s in runs.lora_scales))


def heading(runs: model_runs.ModelRuns, out: Path) -> str:
    """The line that opens one question's section of the output."""
    return f"{runs.name} with LoRA {model_runs.describe_loras(runs.lora_records)} (in {out}):"


def answer_each(plan_, answer: Callable[[object], Verdict], provenance: dict) -> int:
    """Each question of a drift plan (``calib.drift.plan.Plan``) answered in its own folder by ``answer``, then
    :func:`conclude`."""
    answers = []
    for runs, saved in plan_.effect:
        out = out_of(plan_.out, runs, len(plan_.effect))
        print(heading(runs, out))
        one = dataclasses.replace(plan_, out=out, effect=((runs, saved),), shared_out=plan_.out)
        answers.append((out, answer(one)))
    return conclude(plan_.out, answers, provenance)


def conclude(out: Path, answers: list[tuple[Path, Verdict]], provenance: dict) -> int:
    """``--out/verdict.json`` of every question's verdicts (each one's own is in its folder); returns the worst of
    their exit statuses, which it also writes."""
    first = answers[0][1]
    worst = max(found.exit_status for _folder, found in answers)
    report = {
        "format_version": FORMAT,
        **{k: getattr(first, k) for k in ("mflux", "mlx", "hardware", "baseline", "code")},
        "questions": [
            {
                "folder": folder.name,
                "lora": [(v.get("effect") or {}).get("recipe", {}).get("lora", {}).get("now") for v in found.verdicts],
                "statuses": [v["status"] for v in found.verdicts],
                "exit_status": found.exit_status,
            }
            for folder, found in answers
        ],
        "verdicts": [v for _folder, found in answers for v in found.verdicts],
        "exit_status": worst,
        "provenance": provenance,
    }
    write_json(out / "verdict.json", report)
    statuses = ", ".join(f"{q['folder']}: {' '.join(q['statuses']) or 'no verdict'}" for q in report["questions"])
    print(f"wrote {out / 'verdict.json'} ({statuses})")
    return worst
