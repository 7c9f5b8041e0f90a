"""``teacache-bench fullsize``'s output folder: one writer at a time, and the settings of every configuration it
holds, so a rerun keeps what is finished and never mixes settings under one configuration.

A fullsize folder holds several configurations (``CONFIG_KEY``: model, quantization, resolution, steps, tag),
each measured by a command of its own (the committed H200 folder holds seven, from five commands). Its
``fingerprint.json`` (:mod:`calib.run.fingerprint`'s file, naming the command) records under
``configurations`` the settings each configuration's rows were measured with, written with its rows. A run
into the folder (:func:`plan`), before any model loads:

- a configuration finished with the same settings is kept and not measured again;
- one the budget stopped before ``--repeats`` (or one not in runs.csv) is measured;
- one measured with other settings, or by an earlier version that recorded none, is refused in one line
  naming what differs: ``--force-new`` measures it again and replaces its rows, another ``--tag`` keeps both.

Configurations this run does not name are never touched.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from pathlib import Path

from bench.timing.fullsize_records import RUNS, SUMMARY, read_table
from bench.timing.fullsize_tables import config_keys, key_text
from calib.run import fingerprint
from calib.run.folder import LOG, RunFolder
from teacache import variants
from teacache.models import fullsize

PROG = "teacache-bench fullsize"
OUTPUTS = (RUNS.file, SUMMARY.file, "provenance.json", LOG)  # LOG: every line it prints, timestamped
FOLDER = RunFolder(PROG, outputs=OUTPUTS)
WAY_OUT = "pass --force-new to measure it again (its rows are replaced), or choose another --tag or --out"


@dataclass(frozen=True)
class Configuration:
    """One model of a run, as the folder knows it: its key (provenance.json's) and the settings behind its rows."""

    variant: str
    key: str  # the CONFIG_KEY values joined by "|"
    settings: dict


def configuration(variant: str, args: argparse.Namespace, plan: dict, hardware: str) -> Configuration:
    """``variant``'s configuration under these arguments, from its spec alone (nothing loads)."""
    spec = variants.get(variant)
    steps = args.steps or spec.generation.steps
    size = args.size or spec.generation.width
    label = fullsize.model_label(variant, args.blocks)
    key = "|".join(key_text(v) for v in (label, args.quantize, f"{size}x{size}", steps, args.tag))
    settings = {
        "guidance": spec.generation.guidance if args.guidance is None else args.guidance,
        "repeats": args.repeats,
        "skip_fractions": plan["fractions"],
        "thresholds": plan["thresholds"],
        "coefficients": args.coefficients,
        "fast_path": args.fast_path,
        "peer": args.peer,
        "seed": args.seed,
        "blocks": args.blocks,
        "versions": fingerprint.versions(),
        "hardware": hardware,
    }
    if plan.get("rules"):  # absent otherwise: the folders measured before --rules hold the same settings
        settings["rules"] = list(plan["rules"])
    return Configuration(variant, key, json.loads(json.dumps(settings, sort_keys=True, default=str)))


def finished(out: Path) -> dict[str, int | None]:
    """The configurations runs.csv holds: how many repeats each has timed; None for the rows of a campaign
    from before runs.csv held every raw field (its ``kind`` is empty)."""
    path = out / RUNS.file
    if not path.is_file():
        return {}
    runs = read_table(path, RUNS)
    runs = runs.assign(_key=["|".join(key) for key in config_keys(runs)])
    done: dict[str, int | None] = {}
    for key, rows in runs.groupby("_key", sort=False):
        timed = rows[rows["note"].isna()]
        done[key] = None if rows["kind"].isna().all() else int(timed["repeat"].nunique())
    return done


def plan(out: Path, configurations: list[Configuration], force_new: bool) -> tuple[list, list]:
    """(the configurations to measure, those kept as finished); raises SettingsMismatch, naming the first
    configuration whose rows were made with other settings, before any model loads."""
    stored, done = FOLDER.configurations(out), finished(out)
    todo, kept = [], []
    for config in configurations:
        if force_new or config.key not in done:
            todo.append(config)
            continue
        if config.key not in stored:
            raise fingerprint.SettingsMismatch(
                f"--out: {out} holds {config.key} without a record of its settings (measured by an earlier "
                f"version), so it cannot be checked against this run; {WAY_OUT}"
            )
        differences, _ = fingerprint.compare(stored[config.key], config.settings)
        if differences:
            raise fingerprint.SettingsMismatch(
                f"--out: {out} holds {config.key} measured with other settings: {'; '.join(differences)}; {WAY_OUT}"
            )
        (todo if (done[config.key] or 0) < config.settings["repeats"] else kept).append(config)
    return todo, kept
