"""Builders the calib tests share: a small synthetic trace table and a fit made from it by the fit command."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from calib.fit import command as fitmod

TRACE_PROVENANCE = {
    "format_version": 1,
    "date_utc": "2026-01-02T03:04:05Z",
    "command": "teacache-calib record --model tiny-flux1 --out rec",
    "git": {"commit": "0123456789abcdef0123456789abcdef01234567", "dirty": False},
    "versions": {"mlx": "0.32.2", "mflux": "0.24.0", "numpy": "2.4.6", "python": "3.11.7"},
    "backend": "cpu",
    "device_name": "Test CPU",
    "os": "Linux test",
    "model": "tiny-flux1",
    "variant": "tiny-flux1",
    "quantization": None,
    "resolution": "128x128",
    "steps": 10,
    "guidance": 3.5,
    "seeds": [0, 1],
}


def traces(shift_per_step: float = 0.0, n_prompts: int = 5, n_steps: int = 10) -> pd.DataFrame:
    rng = np.random.default_rng(7)
    rows = []
    for p in range(n_prompts):
        for seed in (0, 1):
            for step in range(1, n_steps):
                u = step / (n_steps - 1)
                x = rng.uniform(0.03, 0.3)
                y = 0.02 + 0.7 * x + 2.0 * x**2 + shift_per_step * u + rng.normal(0, 0.002)
                rows.append(dict(run_id=f"p{p}-s{seed}", variant="tiny-flux1", prompt_id=f"p{p}", seed=seed,
                                 step=step, num_steps=n_steps, x_rel_l1=x, y_rel_l1=y))  # fmt: skip
    return pd.DataFrame(rows)


def make_fit(root: Path, frame: pd.DataFrame, *extra: str, provenance: dict | None = None) -> Path:
    rec = root / "rec"
    rec.mkdir(parents=True, exist_ok=True)
    frame.to_parquet(rec / "traces.parquet", index=False)
    (rec / "provenance.json").write_text(json.dumps(TRACE_PROVENANCE if provenance is None else provenance))
    out = root / "fit"
    assert fitmod.main([str(rec / "traces.parquet"), "--out", str(out), "--no-plots", *extra]) == 0
    return out / "fit.json"
