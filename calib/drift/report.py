"""The release report: what a series of mflux (and MLX) releases changed, from the drift command's outputs.

``teacache-calib drift-report DIR... --out FOLDER`` reads ``verdict.json`` of each drift run (one per
release, run with ``teacache-calib drift --oracles --out DIR`` under that release), and writes
``FOLDER/report.md`` and ``FOLDER/summary.json``: per family, which hooked functions changed between
consecutive releases (from the fingerprint table), whether the numbers moved in float32 and in bfloat16
(each run against the committed references of the previous release), the verdict against the baseline,
and whether the no-op oracles held. Runs that differ from the first in MLX only are reported as an MLX
change against the references of their mflux release. Files next to the report: ``notes.md`` (what the
tables mean, written by hand) goes under the title, ``mlx-*-tests.txt`` (the adapter tests' summary under
that MLX) is quoted in the MLX section.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from calib.drift import code, hooked
from calib.run.arguments import CommandParser
from calib.run.command import command
from teacache.errors import InputError

PROG = "teacache-calib drift-report"
FULLSIZE_SECTION = "## Full size on the H200 (random weights, bfloat16)"
FAMILY_LABELS = {"flux1": "FLUX.1", "flux2": "FLUX.2", "qwen": "Qwen-Image", "zimage": "Z-Image"}


def load_runs(folders: list[Path]) -> list[dict]:
    from teacache.io import read_json_object

    runs = []
    for folder in folders:
        path = folder / "verdict.json"
        if not path.is_file():
            raise InputError(f"DIR: {folder} holds no verdict.json; expected a folder teacache-calib drift wrote")
        runs.append(read_json_object(path) | {"folder": folder.name})
    return sorted(runs, key=lambda r: (code.parse_version(r["mflux"]), code.parse_version(r["mlx"])))


def code_changes(table: dict, before: str, after: str, classes: dict) -> dict[str, list[str]]:
    """Per family, the hooked functions whose fingerprint differs between two releases of the table."""
    result: dict[str, list[str]] = {fam: [] for fam in FAMILY_LABELS}
    for function, history in table["functions"].items():
        if history.get(before) != history.get(after):
            for family in hooked.families_of_class(function, classes):
                result.setdefault(family, []).append(function.split(":")[-1])
    return result


def family_numbers(comparison: dict | None) -> dict[str, dict[str, dict]]:
    """{family: {dtype: {"moved", "ratio", "vanilla"}}} of one comparison."""
    from teacache import variants

    result: dict[str, dict[str, dict]] = {}
    for run in (comparison or {}).values():
        family = variants.get(run["variant"]).family
        ratio = max(m["distance"] / m["threshold"] for m in run["metrics"].values())
        result.setdefault(family, {})[run["dtype"]] = {
            "moved": run["moved"], "ratio": ratio, "vanilla": run["metrics"]["vanilla"]["distance"],
            "identical": run["identical"],
        }  # fmt: skip
    return result


def _cell(entry: dict | None) -> str:
    if entry is None:
        return "n/a"
    if entry["identical"]:
        return "unchanged (bit-identical)"
    word = "**moved**" if entry["moved"] else "unchanged"
    return f"{word} (rel-L2 {entry['vanilla']:.2g}; {entry['ratio']:.2g}x threshold)"


def _oracles(run: dict, family: str) -> str:
    found = [v["oracles"] for v in run["verdicts"] if v["family"] == family and v.get("oracles")]
    if not found:
        return "not run"
    return (
        "hold" if found[0]["holds"] else "FAIL: " + ", ".join(c["name"] for c in found[0]["checks"] if not c["holds"])
    )


def transitions(runs: list[dict], table: dict, classes: dict) -> list[dict]:
    """Consecutive mflux releases (on the first run's MLX): code changes and numbers moved, per family."""
    mlx = runs[0]["mlx"]
    series = [r for r in runs if r["mlx"] == mlx]
    rows = []
    for before, after in zip(series, series[1:], strict=False):
        changes = code_changes(table, before["mflux"], after["mflux"], classes)
        numbers_ = family_numbers(after["numbers_by_release"].get(before["mflux"]))
        for family, label in FAMILY_LABELS.items():
            found = numbers_.get(family, {})
            rows.append({
                "from": before["mflux"], "to": after["mflux"], "family": label, "code": changes.get(family, []),
                "float32": found.get("float32"), "bfloat16": found.get("bfloat16"), "oracles": _oracles(after, family),
            })  # fmt: skip
    return rows


def mlx_changes(runs: list[dict]) -> list[dict]:
    """Runs on another MLX than the first, against the references of their mflux release (made on the first MLX)."""
    mlx = runs[0]["mlx"]
    rows = []
    for run in runs:
        if run["mlx"] == mlx:
            continue
        numbers_ = family_numbers(run["numbers_by_release"].get(run["mflux"]))
        for family, label in FAMILY_LABELS.items():
            found = numbers_.get(family, {})
            rows.append({
                "mflux": run["mflux"], "from": mlx, "to": run["mlx"], "family": label,
                "float32": found.get("float32"), "bfloat16": found.get("bfloat16"), "oracles": _oracles(run, family),
            })  # fmt: skip
    return rows


def render(
    runs: list[dict],
    rows: list[dict],
    mlx_rows: list[dict],
    floor: dict,
    tests: dict[str, str],
    notes: str = "",
    fullsize: dict[str, str] | None = None,
) -> str:
    """The report's Markdown; ``fullsize`` holds the H200 comparisons (``h200/<run>/comparison.md``) by run."""
    fullsize = fullsize or {}
    first = runs[0]
    settings = floor.get("settings", {})
    lines = [
        "# mflux releases "
        + ", ".join(r["mflux"] for r in runs if r["mlx"] == first["mlx"])
        + f" (MLX {first['mlx']})"
        + "".join(f"; MLX {r['mlx']} (mflux {r['mflux']})" for r in runs if r["mlx"] != first["mlx"]),
        "",
        f"Hardware `{first['hardware']}`. Derived by `teacache-calib drift-report` from the `teacache-calib drift "
        "--oracles` output of each release (`drift/`); the per-release data and their provenance are there.",
        f"Embedded random-weight models ({settings.get('width')}x{settings.get('height')}, "
        f"{settings.get('steps')} steps, seed {settings.get('seed')}), every parameter non-zero. A dtype *moved* "
        "when any of vanilla latents, recorded latents or recorded trace lies farther from the reference than "
        "10x the noise floor (and a quarter of the dtype's epsilon); the floor: "
        + ", ".join(f"{d} {max(v.values()):.2g}" for d, v in floor["floor"].items())
        + f" ({len(floor.get('processes', []))} processes, {floor['provenance']['date_utc']}, mflux "
        f"{floor['provenance']['versions']['mflux']}). rel-L2 is the vanilla latents' distance; x threshold the "
        "largest distance / threshold over the three.",
        "",
        *([notes.strip(), ""] if notes.strip() else []),
        "## Verdict of each release against the pinned release's references",
        "",
        "| mflux | MLX | exit | verdicts (embedded variants) |",
        "|---|---|---|---|",
    ]
    for run in runs:
        embedded = [v for v in run["verdicts"] if v["variant"].startswith("tiny-")]
        text = "; ".join(f"{v['variant']}: {v['status']}" for v in embedded)
        lines.append(f"| {run['mflux']} | {run['mlx']} | {run['exit_status']} | {text} |")
    lines += ["", "## Release to release (each run against the previous release's references)", "",
              "| from -> to | family | hooked code changed | float32 | bfloat16 | no-op oracles |",
              "|---|---|---|---|---|---|"]  # fmt: skip
    for row in rows:
        changed = ", ".join(f"`{c}`" for c in row["code"]) or "none"
        lines.append(f"| {row['from']} -> {row['to']} | {row['family']} | {changed} | {_cell(row['float32'])} | "
                     f"{_cell(row['bfloat16'])} | {row['oracles']} |")  # fmt: skip
    if mlx_rows:
        lines += ["", f"## MLX {mlx_rows[0]['from']} -> {mlx_rows[0]['to']} (mflux {mlx_rows[0]['mflux']})", "",
                  "| family | float32 | bfloat16 | no-op oracles |", "|---|---|---|---|"]  # fmt: skip
        for row in mlx_rows:
            lines.append(f"| {row['family']} | {_cell(row['float32'])} | {_cell(row['bfloat16'])} | {row['oracles']} |")
        for name, text in sorted(tests.items()):
            lines += ["", f"Adapter tests (`{name}`):", "", "```", text.strip(), "```"]
    lines += ["", FULLSIZE_SECTION, ""]
    if not fullsize:
        lines += ["_To be filled from the H200 run (see `h200.md` beside this report)._", ""]
    for name, text in sorted(fullsize.items()):
        lines += [f"`h200/{name}/comparison.md`:", "", text.strip(), ""]
    return "\n".join(lines)


def report_parser(prog: str, description: str) -> argparse.ArgumentParser:
    """DIR... --out FOLDER of a report over drift runs."""
    parser = CommandParser(prog=prog, description=description)
    parser.add_argument("runs", nargs="+", type=Path, metavar="DIR", help="folders teacache-calib drift wrote")
    parser.add_argument("--out", type=Path, required=True, help="folder for report.md and summary.json")
    return parser


def report_inputs(parser: argparse.ArgumentParser, argv: list[str] | None) -> tuple[argparse.Namespace, list[dict]]:
    """A report's parsed arguments and the drift runs its DIR... folders hold."""
    args = parser.parse_args(argv)
    return args, load_runs(args.runs)


def setup_arg_parser() -> argparse.ArgumentParser:
    return report_parser(PROG, __doc__.split("\n\n")[0])


@command(PROG)
def main(argv: list[str] | None = None) -> int:
    args, runs = report_inputs(setup_arg_parser(), argv)
    from calib.drift import noise
    from teacache.io import write_json, write_text

    table = code.load_table()
    classes = hooked.classes_by_family()
    floor = noise.load_floor(noise.floor_path(runs[0]["hardware"]))
    rows, mlx_rows = transitions(runs, table, classes), mlx_changes(runs)
    tests = {p.name: p.read_text(encoding="utf-8") for p in sorted(args.out.glob("mlx-*-tests.txt"))}
    notes = (args.out / "notes.md").read_text(encoding="utf-8") if (args.out / "notes.md").is_file() else ""
    fullsize = {p.parent.name: p.read_text(encoding="utf-8") for p in sorted(args.out.glob("h200/*/comparison.md"))}
    write_text(args.out / "report.md", render(runs, rows, mlx_rows, floor, tests, notes, fullsize))
    write_json(args.out / "summary.json", {"format_version": 1, "transitions": rows, "mlx": mlx_rows,
                                           "runs": [r["folder"] for r in runs]})  # fmt: skip
    print(f"wrote {args.out / 'report.md'}")
    return 0
