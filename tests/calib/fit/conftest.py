"""Synthetic traces for the fitting tests: known relations plus noise, written in any format the reader takes."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd


def quadratic(x, u, sigma):
    return 0.03 + 0.5 * x + 3.0 * x**2


def make_traces(
    truth=quadratic,
    n_prompts: int = 6,
    n_steps: int = 12,
    seeds=(0, 1),
    noise: float = 0.002,
    rng_seed: int = 0,
    variant: str = "tiny-flux1",
    branches=("cond", "uncond"),
    x_range=(0.02, 0.4),
) -> pd.DataFrame:
    """Rows like the recorder's: one per run x step x branch, NaN x/y on the first step of each run."""
    rng = np.random.default_rng(rng_seed)
    rows = []
    for p in range(n_prompts):
        for seed in seeds:
            for branch in branches:
                for step in range(n_steps):
                    u = step / (n_steps - 1)
                    sigma = (1 - u) ** 1.5
                    x = float(rng.uniform(*x_range))
                    y = float(truth(x, u, sigma) + rng.normal(0, noise))
                    if branch != "cond":
                        y = 5.0 - y  # a different relation: must never leak into a cond fit
                    if step == 0:
                        x = y = float("nan")
                    rows.append(
                        {
                            "run_id": f"p{p}-s{seed}",
                            "variant": variant,
                            "model": "synthetic",
                            "prompt_id": f"p{p}",
                            "prompt": f"prompt {p}",
                            "seed": seed,
                            "step": step,
                            "num_steps": n_steps,
                            "sigma": sigma,
                            "branch": branch,
                            "x_rel_l1": x,
                            "y_rel_l1": y,
                            "residual_rel_l1": 0.1,
                            "x_norm": 1.0,
                            "y_norm": 1.0,
                            "residual_norm": 1.0,
                        }
                    )
    return pd.DataFrame(rows)


def write(frame: pd.DataFrame, path, provenance: dict | None = None):
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix == ".parquet":
        frame.to_parquet(path, index=False)
    elif path.suffix == ".csv":
        frame.to_csv(path, index=False)
    else:  # json.dumps keeps every digit (pandas' to_json rounds to 10)
        records = [{k: (v.item() if hasattr(v, "item") else v) for k, v in r.items()} for r in frame.to_dict("records")]
        if path.suffix == ".jsonl":
            path.write_text("".join(json.dumps(r) + "\n" for r in records))
        else:
            path.write_text(json.dumps(records))
    if provenance is not None:
        (path.parent / "provenance.json").write_text(json.dumps(provenance))
    return path


def loads_as_selected(path) -> None:
    """A fit.json loads as the function it selected: the same label and terms (x*u terms included, when the
    selection chose them) and finite values over its calibrated x range, early and late in the run."""
    from calib.fit.result import rescale_from_fit

    sel = json.loads(Path(path).read_text())["selected"]
    rescale = rescale_from_fit(path)
    assert rescale.provenance["fitted_model"] == sel["label"], path
    assert rescale.coefficients == tuple(sel["coefficients"]), path
    assert rescale.interaction_coefficients == tuple(sel.get("interaction_coefficients") or ()), path
    xs = np.linspace(*sel["x_range"], 9)
    assert all(np.isfinite(rescale(x, u)) for x in xs for u in (0.0, 0.5, 1.0)), path


def interaction_truth(x, u, sigma):
    return 0.05 + 0.4 * x + 1.2 * x * u + 0.3 * u**3  # the slope in x grows over the schedule


def run_fit(args, capsys) -> tuple[int, str, str]:
    """teacache-calib fit in-process: (exit code, stdout, stderr)."""
    from calib.fit import command as fitmod

    rc = fitmod.main([str(a) for a in args])
    captured = capsys.readouterr()
    return rc, captured.out, captured.err
