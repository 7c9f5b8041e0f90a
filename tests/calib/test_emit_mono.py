"""emit with a mono+step selection: the module round-trips it; the mlx-teacache format refuses it, naming the
best safe polynomial it could write, and writes that one with --polynomial."""

from __future__ import annotations

import importlib.util
import json

import pytest

from calib import emit as emitmod
from calib.fit.result import rescale_from_fit
from calib.traces import mlx_teacache_format as fmt
from tests.calib.conftest import make_fit, traces


def emit(args, capsys) -> tuple[int, str, str]:
    rc = emitmod.main([str(a) for a in args])
    captured = capsys.readouterr()
    return rc, captured.out, captured.err


@pytest.fixture(scope="module")
def mono_fit(tmp_path_factory):
    return make_fit(tmp_path_factory.mktemp("mono"), traces(shift_per_step=0.2), "--form", "mono+step")


@pytest.fixture
def forced_mono(tmp_path):
    """A fit of every candidate whose selection is set to its best mono+step one (what emit has to handle)."""
    path = make_fit(tmp_path, traces(shift_per_step=0.2))
    fit = json.loads(path.read_text())
    best = max((c for c in fit["candidates"] if c["form"] == "mono+step"), key=lambda c: c["cv_r2"])
    for c in fit["candidates"]:
        c["selected"] = c is best
    fit["selected"], fit["form"] = dict(best), best["form"]
    path.write_text(json.dumps(fit))
    return path, fit


def test_the_module_holds_the_mono_function_exactly(tmp_path, capsys, mono_fit):
    out = tmp_path / "tiny_flux1.py"
    rc, stdout, _ = emit([mono_fit, "--variant", "tiny-flux1", "--out", out], capsys)
    assert rc == 0 and "new module" in stdout
    spec = importlib.util.spec_from_file_location("generated_mono", out)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    fit = json.loads(mono_fit.read_text())
    assert rescale_from_fit(fit) == module.RESCALE
    assert module.RESCALE.form == "mono+step" and module.RESCALE.knots == tuple(fit["selected"]["knots"])
    assert module.RESCALE.time_knots == tuple(fit["selected"]["time_knots"])
    assert "in the step fraction" in out.read_text()  # the provenance comment says what the form is


def test_mlx_teacache_refuses_in_one_line_and_names_the_best_safe_polynomial(capsys, forced_mono):
    path, fit = forced_mono
    safe_polys = [c for c in fit["candidates"] if c["form"] == "poly" and c["safety"]["safe"]]
    best = max(safe_polys, key=lambda c: c["cv_r2"])
    capsys.readouterr()  # what the fit printed
    rc, stdout, stderr = emit([path, "--format", "mlx-teacache"], capsys)
    assert rc == 2 and stdout == ""
    assert stderr.count("\n") == 1 and best["label"] in stderr and "--polynomial" in stderr
    assert not (path.parent / fmt.default_name("tiny-flux1")).exists()

    rc, stdout, _ = emit([path, "--format", "mlx-teacache", "--polynomial"], capsys)
    assert rc == 0 and best["label"] in stdout
    data = json.loads((path.parent / fmt.default_name("tiny-flux1")).read_text())
    assert data["fitted_model"] == best["label"]
    assert data["coefficients_c4_to_c0"][-len(best["coefficients"]) :] == best["coefficients"]


def test_without_a_safe_polynomial_the_refusal_says_how_to_get_one(capsys, mono_fit):
    rc, _, stderr = emit([mono_fit, "--format", "mlx-teacache", "--polynomial"], capsys)
    assert rc == 2 and "no safe polynomial" in stderr and "--form poly" in stderr


def test_polynomial_is_refused_for_a_module(capsys, mono_fit):
    rc, _, stderr = emit([mono_fit, "--variant", "tiny-flux1", "--polynomial"], capsys)
    assert rc == 2 and "--polynomial: only with --format mlx-teacache" in stderr
