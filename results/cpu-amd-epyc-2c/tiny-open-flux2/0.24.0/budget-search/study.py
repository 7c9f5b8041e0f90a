"""The budgeted reference on tiny-open-flux2: the best fixed schedule a local search finds per budget.

    .venv/bin/python results/cpu-amd-epyc-2c/tiny-open-flux2/0.24.0/budget-search/study.py

For 6, 8 and 10 computed steps of 28, reusing or forecasting the residual: a hill climb from the even
schedule (``bench.studies.budget_search``), scored by the mean SSIM against vanilla on three calibration
captions that the sweep does not use (open-09, open-10, open-14), seed 0; then the found schedule and the even
one scored on the sweep's 8 captions (held out), seed 0, as ``../rules-front`` scored every rule. Writes
schedules.csv, held_out.csv and summary.md beside this script.
"""

import teacache  # noqa: F401, I001  (first: MLX's CPU BLAS preload)

# isort: split
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from bench.quality.metrics import image_metrics
from bench.studies.budget_search import search
from calib.run.prompts import SETS, load_prompts
from teacache.schedule import StaticSchedule, apply_schedule

HERE = Path(__file__).resolve().parent
STEPS = 28
SEED = 0
BUDGETS = (6, 8, 10)
CALIBRATION = ("open-09", "open-10", "open-14")
ROUNDS = 4


def image(model, prompt: str) -> np.ndarray:
    return np.asarray(model.generate_image(seed=SEED, prompt=prompt, num_inference_steps=STEPS).image)


def main() -> int:
    model = teacache.load_model("tiny-open-flux2")
    calibration = {k: SETS["tiny-open"][k] for k in CALIBRATION}
    held_out = load_prompts("tiny-open-sweep")
    assert not set(calibration) & set(held_out)
    vanilla = {k: image(model, t) for k, t in {**calibration, **held_out}.items()}

    def ssim(schedule: StaticSchedule, prompts: dict, forecast: bool) -> list[float]:
        out = []
        for pid, text in prompts.items():
            with apply_schedule(model, schedule, forecast=forecast):
                out.append(image_metrics(image(model, text), vanilla[pid])["ssim"])
        return out

    rows, held = [], []
    for forecast in (False, True):
        how = "forecast" if forecast else "reuse"
        for budget in BUDGETS:
            even = StaticSchedule.evenly(STEPS, budget)
            best, history = search(even, lambda s, f=forecast: float(np.mean(ssim(s, calibration, f))), ROUNDS,
                                   fixed=frozenset({STEPS - 1}))  # fmt: skip
            for order, (schedule, score) in enumerate(history):
                steps = " ".join(str(s) for s, c in enumerate(schedule.compute) if c)
                rows.append({"residual": how, "budget": budget, "order": order, "computed_steps": steps,
                             "calibration_ssim": score})  # fmt: skip
            for name, schedule in (("even", even), ("searched", best)):
                for pid, value in zip(held_out, ssim(schedule, held_out, forecast), strict=True):
                    steps = " ".join(str(s) for s, c in enumerate(schedule.compute) if c)
                    held.append({"residual": how, "budget": budget, "schedule": name, "computed_steps": steps,
                                 "prompt_id": pid, "ssim": value})  # fmt: skip
            print(how, budget, "searched", len(history), "schedules", flush=True)
    pd.DataFrame(rows).to_csv(HERE / "schedules.csv", index=False, float_format="%.6g")
    frame = pd.DataFrame(held)
    frame.to_csv(HERE / "held_out.csv", index=False, float_format="%.6g")
    table = frame.groupby(["residual", "budget", "schedule", "computed_steps"], sort=False)["ssim"].mean().reset_index()
    lines = [
        "| residual | computed of 28 | schedule | computed steps | held-out SSIM mean |",
        "|---|---:|---|---|---:|",
    ]
    for r in table.itertuples():
        lines.append(f"| {r.residual} | {r.budget} | {r.schedule} | {r.computed_steps} | {r.ssim:.4f} |")
    (HERE / "summary.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
