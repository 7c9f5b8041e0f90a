"""fine_tune: an embedded model with changed weights saved as an mflux folder loads back with --base-model, and a
run folder never takes it for the model it came from."""

from __future__ import annotations

import mlx.core as mx
import pytest
from mlx.utils import tree_flatten

from calib.run import fingerprint
from teacache import load_model, variants
from teacache.models import fine_tune

BASE = "tiny-open-flux1"


def _parameters(pipeline) -> dict:
    return dict(tree_flatten(pipeline.transformer.parameters()))


def test_a_saved_fine_tune_loads_back_with_its_weights_and_is_not_the_base(tmp_path):
    assert fine_tune.main(["--model", BASE, "--noise", "0.05", "--seed", "0", "--out", str(tmp_path / "a")]) == 0
    assert fine_tune.main(["--model", BASE, "--noise", "0.05", "--seed", "0", "--out", str(tmp_path / "b")]) == 0
    shards = sorted((tmp_path / "a" / "transformer").glob("*.safetensors"))
    assert shards and all(
        s.read_bytes() == (tmp_path / "b" / s.relative_to(tmp_path / "a")).read_bytes() for s in shards
    )  # fmt: skip  (the same command, the same weights)
    loaded, base = load_model(str(tmp_path / "a"), base_model=BASE), load_model(BASE)
    assert variants.variant_of(loaded) == BASE
    moved, kept = _parameters(loaded), _parameters(base)
    assert set(moved) == set(kept)
    assert not all(mx.array_equal(moved[k], kept[k]).item() for k in kept)
    rebuilt = fine_tune.build(BASE, 0.05, 0, tmp_path / "c")  # what was saved is what loads
    assert all(mx.array_equal(v, moved[k]).item() for k, v in _parameters(rebuilt).items())
    # its identity is a folder's, not the embedded weights': a run folder of the base never resumes with it
    folder, embedded = fingerprint.environment(str(tmp_path / "a"), BASE), fingerprint.environment(BASE)
    differences, _ = fingerprint.compare(embedded, folder)
    assert folder["weights"] != embedded["weights"] and any("weights" in d for d in differences)


def test_a_folder_that_is_not_empty_is_refused(tmp_path, capsys):
    (tmp_path / "x.txt").write_text("mine", encoding="utf-8")
    assert fine_tune.main(["--out", str(tmp_path)]) == 2
    assert "is not empty" in capsys.readouterr().err


@pytest.mark.parametrize("noise", ["-0.1", "nan", "inf"])
def test_a_noise_that_is_not_finite_and_non_negative_is_refused_before_anything_loads(tmp_path, capsys, noise):
    assert fine_tune.main(["--noise", noise, "--out", str(tmp_path / "out")]) == 2
    assert "--noise" in capsys.readouterr().err and not (tmp_path / "out").exists()
