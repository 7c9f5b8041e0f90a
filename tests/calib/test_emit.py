"""teacache-calib emit: generated coefficient modules, byte-identical, importable, with provenance comments."""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from calib import emit as emitmod
from calib.fit.command import rescale_from_fit
from teacache.coefficients import module_name
from teacache.rescale import RescaleFunction
from tests.calib.conftest import TRACE_PROVENANCE, make_fit, traces


@pytest.fixture(scope="module")
def fit_path(tmp_path_factory) -> Path:
    return make_fit(tmp_path_factory.mktemp("emit"), traces(), "--form", "poly", "--mode", "free")


def import_path(path: Path):
    spec = importlib.util.spec_from_file_location(f"emitted_{abs(hash(str(path)))}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def emit(args, capsys) -> tuple[int, str, str]:
    rc = emitmod.main([str(a) for a in args])
    captured = capsys.readouterr()
    return rc, captured.out, captured.err


def test_emit_is_byte_identical_and_importable(tmp_path, capsys, fit_path):
    a, b = tmp_path / "a" / "tiny_flux1.py", tmp_path / "b" / "tiny_flux1.py"
    rc, out, _ = emit([fit_path, "--variant", "tiny-flux1", "--out", a], capsys)
    assert rc == 0 and "new module" in out
    assert emit([fit_path, "--variant", "tiny-flux1", "--out", b], capsys)[0] == 0
    assert a.read_bytes() == b.read_bytes()
    rc, out, _ = emit([fit_path, "--variant", "tiny-flux1", "--out", a], capsys)
    assert rc == 0 and "unchanged" in out and a.read_bytes() == b.read_bytes()
    fit = json.loads(fit_path.read_text())
    assert a.read_text() == emitmod.emit_module(fit, "tiny-flux1")

    module = import_path(a)
    expected = rescale_from_fit(fit)
    assert isinstance(module.RESCALE, RescaleFunction)
    assert expected == module.RESCALE  # exact: repr round-trips every float
    assert module.RESCALE.coefficients == tuple(fit["selected"]["coefficients"])
    assert module.RESCALE.provenance == expected.provenance
    assert module.RECIPE == {"num_steps": 10, "guidance": 3.5, "resolution": "128x128", "quantization": None}


def test_provenance_comments_sit_next_to_each_constant(tmp_path, capsys, fit_path):
    path = tmp_path / "tiny_flux1.py"
    assert emit([fit_path, "--variant", "tiny-flux1", "--out", path], capsys)[0] == 0
    lines = path.read_text().splitlines()
    for constant in ("RESCALE = ", "RECIPE = "):
        at = next(i for i, line in enumerate(lines) if line.startswith(constant))
        block = []
        for line in reversed(lines[:at]):
            if not line.startswith("#"):
                break
            block.insert(0, line)
        assert block, f"no comment above {constant}"
        text = " ".join(line.lstrip("# ") for line in block)
        assert emitmod.GENERATED in text
        assert TRACE_PROVENANCE["date_utc"] in text
    rescale_notes = " ".join(line.lstrip("# ") for line in lines if line.startswith("#"))
    fit = json.loads(fit_path.read_text())
    for word in (
        "variant: tiny-flux1",
        "model: tiny-flux1",
        "5 prompts x 2 seed(s)",
        "10 steps",
        "mlx 0.32.2",
        "mflux 0.24.0",
        "hardware cpu, Test CPU",
        "git 0123456789ab",
        "teacache-calib record --model tiny-flux1",
        "form: poly",
        f"R^2 {fit['selected']['r2']:.4f}",
        f"cv R^2 {fit['selected']['cv_r2']:.4f}",
        fit["provenance"]["date_utc"],
    ):
        assert word in rescale_notes, word
    assert max(len(line) for line in lines) <= 110
    compile(path.read_text(), str(path), "exec")


def test_time_aware_fit_emits_an_equal_rescale(tmp_path, capsys):
    fit_path = make_fit(tmp_path, traces(shift_per_step=0.2), "--form", "poly+step")
    fit = json.loads(fit_path.read_text())
    assert fit["selected"]["form"] == "poly+step"
    path = tmp_path / "m.py"
    assert emit([fit_path.parent, "--variant", "tiny-flux1", "--out", path], capsys)[0] == 0
    module = import_path(path)
    assert rescale_from_fit(fit) == module.RESCALE and module.RESCALE.is_time_aware
    x = np.linspace(*module.RESCALE.x_range, 7)
    np.testing.assert_array_equal(module.RESCALE(x, 0.5), rescale_from_fit(fit)(x, 0.5))


def test_changes_against_the_previous_module_are_printed(tmp_path, capsys, fit_path):
    previous = tmp_path / "flux1_copy.py"
    shutil.copy(Path(emitmod.COEFFICIENTS_DIR) / "flux1.py", previous)
    old_module = import_path(previous)
    old = old_module.RESCALE
    rc, out, _ = emit([fit_path, "--variant", "tiny-flux1", "--out", previous], capsys)
    assert rc == 0
    assert "coefficients:" in out and repr(list(old.coefficients)) in out
    assert "x range:" in out and "max |new - old| over the new x range" in out
    assert f"recipe: {old_module.RECIPE} -> " in out  # the FLUX.1 recipe replaced by the traces' one
    new = import_path(previous).RESCALE
    lo, hi = new.x_range
    xs = np.linspace(lo, hi, 401)
    worst = float(np.max(np.abs(new(xs) - old(xs))))
    assert f"{worst:.6g}" in out


@pytest.mark.parametrize(
    ("variant", "words"),
    [("no-such-variant", ["no packaged coefficients", "no-such-variant", "known:"]), ("flux1-dev", ["disagrees"])],
)
def test_bad_variant_writes_nothing(tmp_path, capsys, fit_path, variant, words):
    path = tmp_path / "out" / "x.py"
    rc, _, err = emit([fit_path, "--variant", variant, "--out", path], capsys)
    assert rc == 2
    for word in words:
        assert word in err
    assert not path.exists() and not path.parent.exists()


def test_unreadable_fit_is_exit_2(tmp_path, capsys):
    bad = tmp_path / "fit.json"
    bad.write_text("{not json")
    rc, _, err = emit([bad, "--variant", "tiny-flux1", "--out", tmp_path / "m.py"], capsys)
    assert rc == 2 and "cannot read" in err and not (tmp_path / "m.py").exists()
    bad.write_text(json.dumps({"selected": {}, "format_version": 99}))
    rc, _, err = emit([bad, "--variant", "tiny-flux1", "--out", tmp_path / "m.py"], capsys)
    assert rc == 2 and "format_version" in err
    rc, _, err = emit([tmp_path / "missing.json", "--variant", "tiny-flux1"], capsys)
    assert rc == 2 and "does not exist" in err


def test_default_target_is_the_packaged_module():
    path = emitmod.target_path("flux1-krea-dev")
    assert path.name == f"{module_name('flux1-krea-dev')}.py" and path.parent.name == "coefficients"
    assert path.parent == Path(emitmod.COEFFICIENTS_DIR)
