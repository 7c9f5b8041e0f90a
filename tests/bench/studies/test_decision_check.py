"""bench.studies.decision_check: fronts of swept rescale functions compared prompt by prompt at equal computed steps."""

from __future__ import annotations

import json

import pandas as pd

from bench.studies import decision_check


def sweep(folder, label: str, quality_gap: float, n_prompts: int = 8) -> None:
    """A sweep folder: per prompt a vanilla run and 4 thresholds; SSIM = 1 - k/computed^2 - gap, speedup (derived)
    20/computed."""
    rows = []
    for p in range(n_prompts):
        pair = f"shapes-{p:02d}-s1"
        rows.append({"pair_id": pair, "kind": "vanilla", "threshold": float("nan"), "num_steps": 20, "computed": 20,
                     "ssim": 1.0, "wall_s": [2.0]})  # fmt: skip
        for t, computed in zip((0.01, 0.02, 0.04, 0.08), (16, 11, 8, 6), strict=True):
            ssim = 1.0 - (1 + 0.1 * p) / computed**2 - quality_gap * (1 + 0.05 * p)
            rows.append({"pair_id": pair, "kind": "teacache", "threshold": t, "num_steps": 20, "computed": computed,
                         "ssim": ssim, "wall_s": [computed / 10]})  # fmt: skip
    folder.mkdir(parents=True)
    pd.DataFrame(rows).to_parquet(folder / "runs.parquet")
    (folder / "provenance.json").write_text(json.dumps({"command": f"sweep {label}"}))
    (folder / "fit.json").write_text(json.dumps(fit_document([candidate(label, 0.5, 0.2)])))


def candidate(label: str, cv_r2: float, decision_excess: float) -> dict:
    """A fit.json candidate with the fields every fit writes."""
    return {"label": label, "form": "poly", "coefficients": [1.0, 0.0], "x_range": [0.01, 0.3], "r2": cv_r2,
            "cv_r2": cv_r2, "rmse": 0.01, "n_prompts": 3, "n_pairs": 30, "selected": False,
            "decision_excess": decision_excess}  # fmt: skip


def fit_document(candidates: list[dict]) -> dict:
    return {"format_version": 1, "selected": {**candidates[0], "selected": True}, "candidates": candidates}


def test_the_better_front_is_found_and_credited_to_the_criterion_that_picked_it(tmp_path, capsys):
    sweep(tmp_path / "a", "poly1-origin", 0.0)
    sweep(tmp_path / "b", "poly4+step2", 0.004)
    scores = fit_document([candidate("poly1-origin", 0.4, 0.2), candidate("poly4+step2", 0.9, 0.3)])
    (tmp_path / "full.json").write_text(json.dumps(scores))
    argv = ["--scores", str(tmp_path / "full.json"), "--out", str(tmp_path / "out")]
    for label, d in (("line", "a"), ("quartic", "b")):
        argv += ["--candidate", f"{label}={tmp_path / d}={tmp_path / d / 'fit.json'}"]
    assert decision_check.main(argv) == 0
    paired = pd.read_csv(tmp_path / "out" / "paired.csv")
    compared = paired[paired["n_prompts"] > 0]
    assert len(compared) == 5 and (compared["outcome"] == "line better").all()  # 4 levels and the mean
    assert paired.loc[paired["measure"] == "at 17 computed", "outcome"].tolist() == ["not compared"]  # past 16
    mean = paired[paired["measure"].str.startswith("mean over")].iloc[0]
    assert 0.004 <= mean["median_difference"] <= 0.004 * 1.35 and mean["ci_low"] > 0
    text = (tmp_path / "out" / "comparison.md").read_text()
    assert "- decision_excess: line: better than every other candidate" in text
    assert "- cv_r2: quartic: worse than 1 of 1 other candidates" in text
    assert "sweep poly1-origin" in text and (tmp_path / "out" / "fronts.png").read_bytes()[:4] == b"\x89PNG"


def test_a_folder_without_runs_is_refused_in_one_line(tmp_path, capsys):
    argv = ["--scores", str(tmp_path / "x.json"), "--out", str(tmp_path / "o"), "--candidate", f"a={tmp_path}=f.json"]
    assert decision_check.main(argv) == 2
    err = capsys.readouterr().err
    assert "--candidate a:" in err and "runs.parquet" in err and not (tmp_path / "o").exists()
