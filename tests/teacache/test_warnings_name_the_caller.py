"""Every warning of the package names the line that called into it (here: this file), wherever inside teacache,
mflux or MLX it is raised: a warning that names a line of the package tells the user nothing."""

from __future__ import annotations

import importlib
import sys
import warnings

import pytest

import teacache
from teacache import _compat
from teacache.coefficients import _upstream, module_name
from teacache.gate import GateConfig, warn_if_never_skips
from teacache.rescale import RescaleFunction


def caught_of(category: type[Warning], caught) -> list[warnings.WarningMessage]:
    return [w for w in caught if issubclass(w.category, category)]


def test_never_skips_called_directly_names_this_file():
    config = GateConfig(0.01, RescaleFunction((0.5,)))  # adds 0.5 each step: 0.01 is never reached
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert not warn_if_never_skips(config)
    (found,) = caught_of(teacache.NeverSkipsWarning, caught)
    assert found.filename == __file__


def test_never_skips_from_apply_teacache_names_this_file_and_the_coefficients_it_was_given():
    model = teacache.load_model("tiny-shapes")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with teacache.apply_teacache(model, rel_l1_thresh=0.001, coefficients=(1.0, 1.0)):
            pass
    found = caught_of(teacache.NeverSkipsWarning, caught)
    assert found and all(w.filename == __file__ for w in found)
    message = str(found[0].message)
    assert "with the given coefficients" in message and "tiny-shapes" not in message


def test_a_recipe_mismatch_inside_generate_image_names_this_file(tiny_flux1, monkeypatch):
    """Raised in a callback mflux's loop calls: the line that called generate_image is this file's."""
    module = importlib.import_module(f"teacache.coefficients.{module_name('tiny-flux1')}")
    monkeypatch.setattr(module, "RESCALE", _upstream.FLUX1_DEV_RESCALE)
    monkeypatch.setattr(module, "RECIPE", _upstream.FLUX1_DEV_RECIPE)  # 28 steps: this generation makes 4
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with teacache.apply_teacache(tiny_flux1, rel_l1_thresh=0.3):
            tiny_flux1.generate_image(seed=0, prompt="a lighthouse", num_inference_steps=4, height=64, width=64)
    found = caught_of(teacache.RecipeMismatchWarning, caught)
    assert found and all(w.filename == __file__ for w in found), [(w.filename, w.lineno) for w in found]


def test_a_newer_mflux_names_this_file(monkeypatch):
    monkeypatch.setattr(_compat, "_warned_newer", False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _compat.check_mflux_version("99.0.0")
    (found,) = caught_of(UserWarning, caught)
    assert "newer than" in str(found.message) and found.filename == __file__


@pytest.mark.parametrize("loads", ["load_model", "apply_teacache"])
def test_a_newer_mflux_seen_by_the_api_names_this_file(loads, monkeypatch):
    """check_mflux_version runs inside load_model and apply_teacache: the warning names their caller."""
    monkeypatch.setattr(_compat, "_warned_newer", False)
    monkeypatch.setattr(_compat, "installed_mflux", lambda: "99.0.0")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = teacache.load_model("tiny-shapes")
        if loads == "apply_teacache":
            monkeypatch.setattr(_compat, "_warned_newer", False)
            caught.clear()
            teacache.apply_teacache(model, rel_l1_thresh=0.0).restore()
    found = [w for w in caught_of(UserWarning, caught) if "newer than" in str(w.message)]
    assert found and all(w.filename == __file__ for w in found), [(w.filename, w.lineno) for w in found]


def test_a_warning_raised_while_the_package_imports_names_the_import_line(tmp_path, monkeypatch):
    """A module of the package imported by another of its modules warns: the import machinery between them (which
    ``warnings.warn`` does not count as stack levels) must not stop the walk at the package's own import line."""
    from teacache import _warnings

    package = tmp_path / "package"
    package.mkdir()
    (package / "_warns_inner.py").write_text(
        "from teacache._warnings import warn\n\n\ndef helper():\n    warn('said at import', UserWarning)\n\n\n"
        "helper()\n"
    )
    (package / "_warns_outer.py").write_text("import _warns_inner  # noqa: F401\n")
    monkeypatch.setattr(_warnings, "_PACKAGE", str(package))
    monkeypatch.syspath_prepend(str(package))
    for name in ("_warns_inner", "_warns_outer"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        import _warns_outer  # noqa: F401
    (found,) = [w for w in caught if str(w.message) == "said at import"]
    assert found.filename == __file__
