"""The release series judged by effect: what each release did to every family's numbers and calibrated gate.

``teacache-calib drift-effect-report DIR... --out FOLDER`` reads the ``verdict.json`` of drift runs, the first
the series' start, each later one made with ``--against`` the previous release's ``--save`` (``run.sh`` beside
the report chains them), and writes ``FOLDER/report.md`` and ``FOLDER/summary.json``: per release step and family,
the hooked functions that changed, whether the numbers moved (float32, against the previous release's numbers and
noise floor), and the effect on the family's effect model's gate (decisions differing against the measured
tolerance, the nearest unchanged call, the gate's RMSE before and after) with the verdict it gives.
"""

from __future__ import annotations

import argparse

from calib.drift.report import FAMILY_LABELS, family_numbers, report_inputs, report_parser
from calib.run.command import command

PROG = "teacache-calib drift-effect-report"


def _numbers(entry: dict | None) -> str:
    if entry is None:
        return "n/a"
    if entry["identical"]:
        return "bit-identical"
    return f"{'**moved**' if entry['moved'] else 'within floor'} ({entry['ratio']:.2g}x threshold)"


def _effect(found: dict | None) -> tuple[str, str, str]:
    """(decisions differing / allowed, nearest call, RMSE) cells of one family's effect."""
    if found is None:
        return "n/a", "n/a", "n/a"
    rows = found["thresholds"]
    worst = max(rows, key=lambda c: c["decisions_differ_fraction"] - c["allowed_fraction"])
    decisions = ", ".join(f"{c['decisions_differ']}/{c['decisions']}" for c in rows)
    allowed = ", ".join(f"{c['allowed_fraction']:.0%}" for c in rows)
    margins = [c["nearest_margin"] for c in rows if c["nearest_margin"] is not None]
    nearest = f"{min(margins):.2%}" if margins else "n/a"
    fit = found["fit"]
    rmse = f"{fit['before']['rmse']:.3g} -> {fit['after']['rmse']:.3g} (+{fit['allowed_rmse_rise']:.2g} allowed)"
    cell = f"{decisions} (allowed {allowed})"
    if worst["decisions_differ_fraction"] > worst["allowed_fraction"]:
        cell = f"**{cell}**"
    return cell, nearest, rmse


def rows_of(runs: list[dict]) -> list[dict]:
    """One row per (run, family): the run's verdict of that family and what it rests on."""
    rows = []
    for run in runs:
        numbers = family_numbers(run.get("numbers"))
        by_family = {}
        for v in run["verdicts"]:
            by_family.setdefault(v["family"], []).append(v["status"])
        for family, label in FAMILY_LABELS.items():
            found = (run.get("effect") or {}).get(family)
            changed = run["code"]["families"].get(family, [])
            decisions, nearest, rmse = _effect(found)
            rows.append({
                "mflux": run["mflux"], "mlx": run["mlx"], "against": run.get("baseline"), "family": label,
                "code": [c.split(":")[-1] for c in changed], "float32": numbers.get(family, {}).get("float32"),
                "model": None if found is None else found["model"], "gate": None if found is None else found["gate"],
                "decisions": decisions, "nearest": nearest, "rmse": rmse,
                "statuses": sorted(set(by_family.get(family, []))),
            })  # fmt: skip
    return rows


def render(runs: list[dict], rows: list[dict], notes: str = "") -> str:
    first = runs[0]
    lines = [
        "# Releases judged by effect: " + " -> ".join(f"mflux {r['mflux']} / MLX {r['mlx']}" for r in runs),
        "",
        f"Each row is one step: the newer release's runs against the previous one's save, starting from mflux "
        f"{first['mflux']} / MLX {first['mlx']}.",
        "",
        f"Hardware `{first['hardware']}`, float32. Derived by `teacache-calib drift-effect-report` from the "
        "`verdict.json` of each step (`drift/`), each made under the newer release with `teacache-calib drift "
        "--against` the older one's `--save` (`run.sh`). Decisions are counted at the variant's default threshold "
        "and those skipping about 25/50/75 % of the steps; the allowed fractions and RMSE rise are the tolerance "
        "the older release's save measured (calib/drift/effect.py).",
        "",
        *([notes.strip(), ""] if notes.strip() else []),
        "| step | family | hooked code changed | numbers (float32) | effect model, gate | decisions differing | "
        "nearest unchanged call | gate RMSE | verdicts |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        step = f"-> mflux {row['mflux']} / MLX {row['mlx']}"
        changed = ", ".join(f"`{c}`" for c in row["code"]) or "none"
        model = "n/a" if row["model"] is None else f"{row['model']} ({row['gate'].split(' (')[0]})"
        lines.append(
            f"| {step} | {row['family']} | {changed} | {_numbers(row['float32'])} | {model} | {row['decisions']} | "
            f"{row['nearest']} | {row['rmse']} | {', '.join(row['statuses'])} |"
        )
    return "\n".join(lines) + "\n"


def setup_arg_parser() -> argparse.ArgumentParser:
    return report_parser(PROG, __doc__.split("\n\n")[0])


@command(PROG)
def main(argv: list[str] | None = None) -> int:
    args, runs = report_inputs(setup_arg_parser(), argv)
    from teacache.io import write_json, write_text

    rows = rows_of(runs[1:])  # the first run is where the series starts: its save is what the second judges
    notes = (args.out / "notes.md").read_text(encoding="utf-8") if (args.out / "notes.md").is_file() else ""
    write_text(args.out / "report.md", render(runs, rows, notes))
    write_json(args.out / "summary.json", {"format_version": 1, "rows": rows, "runs": [r["folder"] for r in runs]})
    print(f"wrote {args.out / 'report.md'}")
    return 0
