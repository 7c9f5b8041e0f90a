"""teacache-calib emit: generated coefficient modules, byte-identical, importable, with provenance comments."""

from __future__ import annotations

import importlib
import importlib.util
import json
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

import teacache.coefficients
from calib import emit as emitmod
from calib.fit.result import rescale_from_fit
from teacache.coefficients import PACKAGED_MODULES, load_packaged, module_name
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


def test_a_fit_and_its_module_name_the_lora_the_traces_were_recorded_with(tmp_path, capsys, fit_path):
    lora = {"path": "/loras/style.safetensors", "sha256": "0123456789abcdef" * 4, "scale": 0.5}
    with_lora = make_fit(tmp_path, traces(), "--form", "poly", "--mode", "free",
                         provenance={**TRACE_PROVENANCE, "loras": [lora]})  # fmt: skip
    said = "recorded with LoRA style.safetensors (sha256 0123456789ab, scale 0.5)"
    assert f"traces: {said}" in capsys.readouterr().out  # the fit's summary
    fit = json.loads(with_lora.read_text())
    assert fit["input"]["loras"] == [{"file": "traces.parquet", "loras": [lora]}]
    notes = " ".join(line.lstrip("# ") for line in emitmod.emit_module(fit, "tiny-flux1").splitlines())
    assert f"LoRA: the traces were {said}" in notes
    without = emitmod.emit_module(json.loads(fit_path.read_text()), "tiny-flux1")
    assert "LoRA" not in without and "loras" not in json.loads(fit_path.read_text())["input"]


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
    previous = tmp_path / "flux1_copy.py"  # flux1.py as committed: the published FLUX.1-dev tuple and recipe
    previous.write_text(
        "from teacache.coefficients._upstream import FLUX1_DEV_RECIPE as RECIPE\n"
        "from teacache.coefficients._upstream import FLUX1_DEV_RESCALE as RESCALE\n"
    )
    old_module = import_path(previous)
    old = old_module.RESCALE
    rc, out, _ = emit([fit_path, "--variant", "tiny-flux1", "--out", previous, "--force"], capsys)  # not emit's own
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


def _edited(fit_path: Path, folder: Path, change, drop_candidates: bool = False) -> Path:
    """A copy of the fit whose selected coefficients were changed by hand (its scores left as they were)."""
    fit = json.loads(fit_path.read_text())
    fit["selected"]["coefficients"] = [change(c) for c in fit["selected"]["coefficients"]]
    if drop_candidates:  # nothing left to compare with: only the safety check can tell
        fit.pop("candidates")
        fit["selected"].pop("safety", None)
    path = folder / "fit.json"
    path.write_text(json.dumps(fit))
    return path


@pytest.mark.parametrize("fmt", ["module", "mlx-teacache"])
@pytest.mark.parametrize("change", [lambda c: -c, lambda c: 0.0], ids=["negated", "zeroed"])
def test_a_fit_edited_by_hand_is_refused_and_writes_nothing(tmp_path, capsys, fit_path, change, fmt):
    edited = _edited(fit_path, tmp_path, change)
    out = tmp_path / "out" / ("m.py" if fmt == "module" else "c.json")
    rc, _, err = emit([edited, "--variant", "tiny-flux1", "--format", fmt, "--out", out], capsys)
    assert rc == 2 and len(err.strip().splitlines()) == 1
    assert "the file was edited; refit" in err and "R^2" in err  # the R^2 named is not of these numbers
    assert not out.parent.exists()


def test_a_fit_positive_nowhere_needs_allow_unsafe_and_then_warns(tmp_path, capsys, fit_path):
    edited = _edited(fit_path, tmp_path, lambda c: -abs(c), drop_candidates=True)
    out = tmp_path / "m.py"
    rc, _, err = emit([edited, "--variant", "tiny-flux1", "--out", out], capsys)
    assert rc == 2 and "<= 0 everywhere" in err and "--allow-unsafe" in err and not out.exists()
    rc, _, err = emit([edited, "--variant", "tiny-flux1", "--out", out, "--allow-unsafe"], capsys)
    assert rc == 0 and "warning:" in err and "<= 0 everywhere" in err
    assert "UNSAFE_X" in out.read_text()


def test_default_target_is_the_packaged_module():
    path = emitmod.target_path("flux1-krea-dev")
    assert path.name == f"{module_name('flux1-krea-dev')}.py" and path.parent.name == "coefficients"
    assert path.parent == Path(emitmod.COEFFICIENTS_DIR)


# ------------------------------------------------------------------ emitting into the package itself


@pytest.fixture
def package_copy(tmp_path, monkeypatch):
    """teacache/coefficients copied to a folder that emit writes into and imports come from, as a user's checkout
    would after ``emit`` without --out; the real package and its loaded modules come back afterwards."""
    copy = tmp_path / "coefficients"
    shutil.copytree(emitmod.COEFFICIENTS_DIR, copy, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(emitmod, "COEFFICIENTS_DIR", copy)
    package = teacache.coefficients
    monkeypatch.setattr(package, "__path__", [str(copy)])
    prefix = package.__name__ + "."
    for name in [n for n in sys.modules if n.startswith(prefix)]:
        monkeypatch.setattr(package, name.removeprefix(prefix), sys.modules[name])
        monkeypatch.delitem(sys.modules, name)
    yield copy
    for name in [n for n in sys.modules if n.startswith(prefix)]:
        del sys.modules[name]  # the copy's; monkeypatch puts the package's own back


def _fit_for(fit_path: Path, variant: str, folder: Path) -> Path:
    fit = json.loads(fit_path.read_text())
    fit["input"]["variants"] = [variant]
    path = folder / f"fit-{variant}.json"
    path.write_text(json.dumps(fit))
    return path


@pytest.mark.parametrize("variant", ["flux1-dev", "tiny-flux1"])
def test_emitting_a_module_in_place_keeps_every_coefficient_module_importable(variant, package_copy, fit_path,
                                                                             tmp_path, capsys):  # fmt: skip
    """The refit journey (fit, then emit without --out) rewrites one module; every other still imports, and every
    variant still loads its packaged function (a safe fit defines no UNSAFE_X, which no other module may need)."""
    path = _fit_for(fit_path, variant, tmp_path)
    rc, out, err = emit([path, "--variant", variant], capsys)
    assert rc == 0, err
    written = package_copy / f"{module_name(variant)}.py"
    assert written.read_text() == emitmod.emit_module(json.loads(path.read_text()), variant)
    assert "UNSAFE_X" not in written.read_text()
    for module in sorted(p.stem for p in package_copy.glob("*.py") if p.stem != "__init__"):
        importlib.import_module(f"teacache.coefficients.{module}")
    for name in PACKAGED_MODULES:
        assert isinstance(load_packaged(name), RescaleFunction), name
    assert load_packaged(variant) == rescale_from_fit(path)


def test_emit_names_every_variant_a_module_serves_and_keeps_what_others_import(package_copy, fit_path, tmp_path,
                                                                                capsys):  # fmt: skip
    """A module another imports from serves that one's variants too: emit names them, and refuses (exit 2,
    nothing written) a module that lacks a name the other imports."""
    (package_copy / "tiny_flux1.py").write_text("from teacache.coefficients.flux1 import FITTED_ON, RECIPE, RESCALE\n")
    path = _fit_for(fit_path, "flux1-dev", tmp_path)
    rc, out, err = emit([path, "--variant", "flux1-dev"], capsys)
    assert rc == 0, err
    assert "note: module flux1 serves flux1-dev, flux1-schnell, tiny-flux1" in out
    assert "used by flux1-dev, flux1-schnell, tiny-flux1" in (package_copy / "flux1.py").read_text()
    before = (package_copy / "flux1.py").read_bytes()
    (package_copy / "tiny_flux1.py").write_text("from teacache.coefficients.flux1 import RESCALE, UNSAFE_X\n")
    rc, out, err = emit([path, "--variant", "flux1-dev"], capsys)
    assert rc == 2 and len(err.strip().splitlines()) == 1, err
    assert "--variant: tiny_flux1.py imports UNSAFE_X from module flux1" in err
    assert (package_copy / "flux1.py").read_bytes() == before


@pytest.mark.parametrize("target", ["teacache/api.py", "README.md", "docs/api.md"])
@pytest.mark.parametrize("fmt", ["module", "mlx-teacache"])
def test_a_tracked_file_of_the_project_is_never_overwritten(target, fmt, capsys, fit_path):
    from tests import ROOT

    path = ROOT / target
    before = path.read_bytes()
    rc, _, err = emit([fit_path, "--variant", "tiny-flux1", "--format", fmt, "--out", path], capsys)
    assert rc == 2 and "git tracks" in err and len(err.strip().splitlines()) == 1
    assert path.read_bytes() == before


def test_someone_elses_file_needs_force_and_an_emitted_module_does_not(tmp_path, capsys, fit_path):
    theirs = tmp_path / "notes.py"
    theirs.write_text("print('mine')\n")
    rc, _, err = emit([fit_path, "--variant", "tiny-flux1", "--out", theirs], capsys)
    assert rc == 2 and "--force" in err and theirs.read_text() == "print('mine')\n"
    assert emit([fit_path, "--variant", "tiny-flux1", "--out", theirs, "--force"], capsys)[0] == 0
    assert emitmod.GENERATED in theirs.read_text()
    other = make_fit(tmp_path / "other", traces(), "--form", "poly", "--mode", "free", "--degree", "2")
    rc, out, _ = emit([other, "--variant", "tiny-flux1", "--out", theirs], capsys)  # its own module: rewritten
    assert rc == 0 and "wrote" in out
    calibration = tmp_path / "theirs.json"
    calibration.write_text('{"a": 1}')
    rc, _, err = emit([fit_path, "--format", "mlx-teacache", "--out", calibration], capsys)
    assert rc == 2 and "--force" in err and calibration.read_text() == '{"a": 1}'
