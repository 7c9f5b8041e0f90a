"""How a model's steps change: per-step medians of x, y and y/x by step fraction, beside real models'.

    teacache-bench dynamics TRACES [TRACES ...] [--reference TRACES ...] --out DIR

TeaCache predicts y (the relative L1 change of the transformer's output) from x (that of block 0's
modulated input). Whether a calibration's test subject behaves like a user's model shows in these
profiles: a straight flow (a prompt that fixes the whole image) has a nearly constant output and y
near 0; real models' output changes by 0.06-0.7 per step. REAL_MODELS holds the medians of the real
traces that mlx-teacache publishes (its calibration files, read by ``calib.traces``), by part of the
schedule; ``--reference`` adds any other trace table or calibration file. Writes dynamics.csv (per
step), parts.csv (first seventh / middle / last seventh), dynamics.md and dynamics.png.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pandas as pd

from calib.run.arguments import check_out_dir
from calib.run.command import command
from calib.traces.reader import load_traces
from teacache.errors import InputError
from teacache.io import atomic_path, write_json, write_text
from teacache.outputs import Writes

PROG = "teacache-bench dynamics"
# Medians of y_rel_l1 by part of the schedule and y/x mid-schedule, from mlx-teacache's published real
# calibration traces (as read by calib.traces.mlx_teacache; DESIGN.md, "Test subjects").
REAL_MODELS: dict[str, dict[str, float]] = {
    "FLUX.1-Krea-dev (28 steps)": {"first": 0.61, "middle": 0.24, "last": 0.33, "ratio_middle": 2.35},
    "FLUX.2 Klein 9B (8 steps)": {"first": 0.74, "middle": 0.50, "last": 0.39, "ratio_middle": 2.58},
    "FLUX.2 Klein base 4B (25 steps)": {"first": 0.18, "middle": 0.18, "last": 0.18, "ratio_middle": 1.42},
    "Qwen-Image (50 steps)": {"first": 0.25, "middle": 0.064, "last": 0.16, "ratio_middle": 0.66},
    "Z-Image base (50 steps)": {"first": 0.21, "middle": 0.097, "last": 0.13, "ratio_middle": 2.36},
}
# A test subject looks like a real model when its medians reach these (the real sets' lower ends, or near).
REALISTIC = {"first": 0.15, "middle": 0.05, "last_over_middle": 0.8, "ratio_middle": 0.5}
OUTPUTS = ("dynamics.csv", "dynamics.md", "parts.json", "dynamics.png")


def _is_parts(path: Path) -> bool:
    """A parts.json this command wrote: the folder beside it is its own (committed ones hold their traces too)."""
    try:
        return set(json.loads(path.read_text(encoding="utf-8"))) == {"measured", "real_models", "realistic"}
    except (OSError, UnicodeDecodeError, ValueError, TypeError):
        return False


WRITES = Writes(PROG, names=OUTPUTS, marker="parts.json", is_own=_is_parts, regenerates=("results",))


def step_fraction(traces: pd.DataFrame) -> pd.Series:
    """step / num_steps of every row (the step a y compares with the one before it)."""
    return traces["step"] / traces["num_steps"]


def parts(traces: pd.DataFrame) -> dict[str, float]:
    """Median y over the first seventh, the middle seventh and the last seventh; median y / median x mid."""
    frac = step_fraction(traces)
    first, middle, last = frac < 1 / 7, (frac >= 3 / 7) & (frac < 4 / 7), frac >= 6 / 7
    y, x = traces["y_rel_l1"], traces["x_rel_l1"]
    mid_y = float(y[middle].median())
    return {
        "first": float(y[first].median()),
        "middle": mid_y,
        "last": float(y[last].median()),
        "ratio_middle": mid_y / float(x[middle].median()),
    }


def shortfalls(measured: dict[str, float]) -> list[str]:
    """What keeps a profile from looking like a real model's: one phrase per unmet bound (empty: none)."""
    out = []
    for key in ("first", "middle", "ratio_middle"):
        if not measured[key] >= REALISTIC[key]:
            out.append(f"{key} {measured[key]:.3f} < {REALISTIC[key]}")
    if not measured["last"] >= REALISTIC["last_over_middle"] * measured["middle"]:
        out.append(f"last {measured['last']:.3f} < {REALISTIC['last_over_middle']} x middle")
    return out


def per_step(traces: pd.DataFrame) -> pd.DataFrame:
    """Median x, y and y/x at each step, with the step fraction."""
    grouped = traces.groupby("step")
    table = pd.DataFrame({"x": grouped["x_rel_l1"].median(), "y": grouped["y_rel_l1"].median()})
    table["ratio"] = table["y"] / table["x"]
    table["fraction"] = table.index / int(traces["num_steps"].iloc[0])
    return table.reset_index()


def markdown(named_parts: dict[str, dict[str, float]]) -> str:
    lines = [
        "| traces | first seventh | middle | last seventh | y / x, middle | looks real |",
        "|---|---:|---:|---:|---:|---|",
    ]
    for name, p in named_parts.items():
        gaps = shortfalls(p)
        verdict = "yes" if not gaps else "no: " + "; ".join(gaps)
        lines.append(
            f"| {name} | {p['first']:.3f} | {p['middle']:.3f} | {p['last']:.3f} | {p['ratio_middle']:.2f} | {verdict} |"
        )
    for name, p in REAL_MODELS.items():
        lines.append(
            f"| {name}, real (mlx-teacache) | {p['first']} | {p['middle']} | {p['last']} | {p['ratio_middle']} "
            "| reference |"
        )
    return "\n".join(lines) + "\n"


def plot(profiles: dict[str, pd.DataFrame], path: Path) -> None:
    # heavy (matplotlib): loaded only when this runs, and pyplot only after the Agg backend is chosen
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8), dpi=110)
    for name, table in profiles.items():
        axes[0].plot(table["fraction"], table["y"], marker=".", label=name)
        axes[1].plot(table["fraction"], table["ratio"], marker=".", label=name)
    for p in REAL_MODELS.values():
        axes[0].plot([1 / 14, 0.5, 13 / 14], [p["first"], p["middle"], p["last"]], ls=":", color="grey", lw=1)
    axes[0].plot([], [], ls=":", color="grey", label="real models (mlx-teacache), by seventh")
    axes[0].set(yscale="log", xlabel="step / steps", ylabel="median y (output rel-L1 change)")
    axes[1].set(yscale="log", xlabel="step / steps", ylabel="median y / median x")
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png")
    plt.close(fig)


def setup_arg_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n")[0])
    p.add_argument("traces", nargs="+", type=Path, help="trace tables (traces.parquet / .csv) or calibration files")
    p.add_argument("--reference", nargs="*", type=Path, default=[], help="more traces to show beside them")
    p.add_argument("--out", type=Path, required=True)
    return p


@command(PROG)
def main(argv: list[str] | None = None) -> int:
    args = setup_arg_parser().parse_args(argv)
    out = check_out_dir(args.out, writes=WRITES)
    named: dict[str, pd.DataFrame] = {}
    for path in [*args.traces, *args.reference]:
        data = load_traces([path], require=("x_rel_l1", "y_rel_l1")).frame
        if "num_steps" not in data.columns:
            raise InputError(f"{path}: needs a num_steps column to place steps on the schedule")
        label = path.parent.name if path.name == "traces.parquet" else path.stem
        named[label if label not in named else str(path)] = data  # two tables of one name: the second by its path
    out.mkdir(parents=True, exist_ok=True)
    named_parts = {name: parts(data) for name, data in named.items()}
    profiles = {name: per_step(data) for name, data in named.items()}
    table = pd.concat([t.assign(traces=name) for name, t in profiles.items()], ignore_index=True)
    with atomic_path(out / "dynamics.csv") as tmp:
        table.to_csv(tmp, index=False)
    write_json(out / "parts.json", {"measured": named_parts, "real_models": REAL_MODELS, "realistic": REALISTIC})
    text = markdown(named_parts)
    write_text(out / "dynamics.md", "# Per-step dynamics\n\n" + text + "\n![profiles](dynamics.png)\n")
    plot(profiles, out / "dynamics.png")
    print(text, end="")
    print(f"wrote {out}/dynamics.md, dynamics.csv, parts.json, dynamics.png")
    return 0
