"""The supported mflux range, its refusals, and the numeric changes between releases that packaged fits predate."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import warnings
from importlib import metadata

import pytest

import bench.cli
import calib.cli
from bench import demo
from calib import emit
from calib.fit import command as fitmod
from calib.fit.coefficient_sources import packaged_numeric_change
from calib.fit.result import FitResult
from teacache import _compat, coefficients, variants
from teacache.coefficients import FittedOn, fitted_on, numeric_change_note, packaged_numeric_changes
from teacache.variants import numeric_changes_since
from tests import ROOT
from tests.calib.fit.conftest import make_traces, write

TOO_OLD = "0.20.0"
INSTALLED = metadata.version("mflux")


# ------------------------------------------------------------------------------------- the range


def test_releases_parse_to_comparable_triples():
    assert _compat.parse_release("0.24.0") == (0, 24, 0)
    assert _compat.parse_release("0.25.0rc1") == (0, 25, 0)
    assert _compat.parse_release("1.0") == (1, 0, 0)
    assert _compat.parse_release("0.9.6") < _compat.parse_release("0.21.0") < _compat.parse_release("0.21.1")


@pytest.mark.parametrize("release", _compat.VERIFIED_RELEASES)
def test_every_verified_release_runs_silently(release):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert _compat.check_mflux_version(release) == release


@pytest.mark.parametrize(
    ("release", "reasons"),
    [
        ("0.20.0", ["imports torch"]),
        ("0.19.2", ["imports torch"]),
        ("0.18.1", ["imports torch", "FLUX.2's transformer call differs before 0.19"]),
        ("0.17.5", ["imports torch", "before 0.19", "no kv_cache argument before 0.18"]),
    ],
)
def test_an_older_release_is_refused_with_every_true_reason_in_one_line(release, reasons):
    with pytest.raises(_compat.MfluxVersionError) as caught:
        _compat.check_mflux_version(release)
    message = str(caught.value)
    assert "\n" not in message and f"mflux {release} is older than {_compat.OLDEST_MFLUX}" in message
    for reason in reasons:
        assert reason in message
    assert f"mflux>={_compat.OLDEST_MFLUX}" in message


def test_a_newer_release_warns_once_and_names_the_drift_command(monkeypatch):
    monkeypatch.setattr(_compat, "_warned_newer", False)
    with pytest.warns(UserWarning, match="teacache-calib drift") as caught:
        _compat.check_mflux_version("0.25.0")
    assert f"newer than {_compat.NEWEST_MFLUX}" in str(caught[0].message)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _compat.check_mflux_version("0.26.1")  # said once per process


def test_a_missing_mflux_is_one_line(monkeypatch):
    def missing(name):
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(_compat.metadata, "version", missing)
    with pytest.raises(_compat.MfluxVersionError, match="mflux is not installed"):
        _compat.check_mflux_version()


def _every_command():
    yield from ((calib.cli.main, name) for name in calib.cli.SUBCOMMANDS)
    yield from ((bench.cli.main, name) for name in bench.cli.SUBCOMMANDS)


@pytest.mark.parametrize(("main", "command"), list(_every_command()), ids=lambda v: v if isinstance(v, str) else "")
def test_every_command_refuses_an_older_mflux_in_one_line(monkeypatch, capsys, tmp_path, main, command):
    monkeypatch.setattr(_compat, "installed_mflux", lambda: TOO_OLD)
    monkeypatch.chdir(tmp_path)
    assert main([command, "--out", str(tmp_path / "out")]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and f"{command}: mflux {TOO_OLD} is older than" in lines[0], captured.err
    assert list(tmp_path.iterdir()) == []


def test_the_demo_refuses_an_older_mflux_in_one_line(monkeypatch, capsys):
    monkeypatch.setattr(_compat, "installed_mflux", lambda: TOO_OLD)
    assert demo.main([]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("teacache-demo: mflux 0.20.0 is older than")


def test_the_console_script_refuses_before_importing_mflux(tmp_path):
    """A real process whose mflux metadata says 0.20.0: exit 2, one line, no folder, mflux never imported."""
    dist = tmp_path / "fake" / f"mflux-{TOO_OLD}.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: mflux\nVersion: {TOO_OLD}\n")
    out = tmp_path / "traces"
    code = (
        "import sys\nfrom calib.cli import main\n"
        f"rc = main(['record', '--model', 'tiny-flux1', '--out', {str(out)!r}])\n"
        "print('mflux imported' if 'mflux' in sys.modules else 'mflux not imported')\nsys.exit(rc)\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path / "fake"), str(ROOT)])}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 2, done.stderr
    assert done.stdout.strip() == "mflux not imported"
    assert len(done.stderr.strip().splitlines()) == 1 and "imports torch at import time" in done.stderr
    assert not out.exists()


# --------------------------------------------------------------------- guards on what a release has


def test_the_builders_guard_on_what_the_installed_release_has():
    from teacache.models._releases import no_compute_precision

    has_module = _compat.parse_release(INSTALLED) >= (0, 22, 0)  # mflux.models.common.compute_precision: 0.22+
    assert (no_compute_precision() is not None) == has_module
    from mflux.models.z_image.model.z_image_transformer.transformer import ZImageTransformer

    assert hasattr(ZImageTransformer, "stream_t_emb") == has_module == hasattr(ZImageTransformer, "set_float32")


# ------------------------------------------------------------------------- numeric changes per family


def test_the_0_22_changes_move_flux1_and_qwen_in_every_dtype_z_image_below_float32_and_flux2_never():
    for fam in ("flux1", "qwen"):
        for dtype in variants.ALL_DTYPES:
            assert [c.release for c in numeric_changes_since(fam, "0.21.0", "0.22.0", dtype)] == ["0.22.0"]
    assert numeric_changes_since("zimage", "0.21.0", "0.22.0", "bfloat16")
    assert numeric_changes_since("zimage", "0.21.0", "0.22.0", "mlx.core.float32") == ()
    assert numeric_changes_since("flux2", "0.16.0", "0.24.0") == ()


def test_numeric_changes_lie_strictly_after_one_release_and_up_to_the_other_in_either_order():
    assert numeric_changes_since("qwen", "0.22.0", "0.24.0") == ()
    assert numeric_changes_since("qwen", "0.21.0", "0.21.0") == ()
    assert numeric_changes_since("qwen", "0.24.0", "0.21.0") == numeric_changes_since("qwen", "0.21.0", "0.24.0")
    assert numeric_changes_since("qwen-image-2512", "0.23.0", "0.21.0") == numeric_changes_since("qwen", "0.21", "0.23")


def test_every_family_change_is_a_release_of_the_verified_range_or_older_with_a_reason():
    for fam in variants.families():
        for change in fam.numeric_changes:
            assert _compat.parse_release(change.release) <= _compat.parse_release(_compat.NEWEST_MFLUX)
            assert change.what and set(change.dtypes) <= set(variants.ALL_DTYPES)


# --------------------------------------------------------------------- where packaged fits came from


def test_every_packaged_module_names_where_it_was_fitted():
    for variant in variants.packaged_variants():
        fit = fitted_on(variant)
        assert isinstance(fit, FittedOn) and fit.evidence, variant
        if fit.framework == coefficients.MFLUX and fit.mflux is not None:
            _compat.parse_release(fit.mflux)
        assert coefficients.numeric_path(variant), variant


@pytest.mark.parametrize(
    ("variant", "moved_at_newest_bf16", "moved_at_newest_f32", "moved_at_oldest"),
    [
        ("flux1-krea-dev", True, True, False),  # fitted on 0.19.1 or older: the norm_out bias came in 0.22
        ("qwen-image", True, True, False),  # 0.18.0 or older
        ("z-image", True, False, False),  # 0.17.5 or older: the bfloat16 stream came in 0.22
        ("qwen-image-2512", False, False, True),  # 0.23.0: 0.21 lacks the bias it was fitted with
        ("flux2-klein-4b", False, False, False),  # FLUX.2's numbers never changed
        ("flux1-dev", False, False, False),  # PyTorch diffusers: no mflux release to place it by
        ("tiny-z-image", False, False, False),  # provisional: fitted on nothing
        ("tiny-shapes", False, False, False),  # emitted from traces recorded on 0.24.0
    ],
)
def test_packaged_fits_are_told_apart_from_the_installed_numeric_path(
    variant, moved_at_newest_bf16, moved_at_newest_f32, moved_at_oldest
):
    newest, oldest = _compat.NEWEST_MFLUX, _compat.OLDEST_MFLUX
    assert bool(packaged_numeric_changes(variant, newest, "bfloat16")) == moved_at_newest_bf16
    assert bool(packaged_numeric_changes(variant, newest, "float32")) == moved_at_newest_f32
    assert bool(packaged_numeric_changes(variant, oldest, "bfloat16")) == moved_at_oldest


def test_an_upper_bound_says_nothing_about_releases_at_or_below_it():
    assert fitted_on("qwen-image") == FittedOn(mflux="0.18.0", exact=False, evidence=fitted_on("qwen-image").evidence)
    assert packaged_numeric_changes("qwen-image", "0.17.5") == ()
    assert packaged_numeric_changes("qwen-image", "0.18.0") == ()


def test_the_note_names_the_fit_the_release_the_change_and_the_drift_command():
    note = numeric_change_note("qwen-image", "0.24.0", "mlx.core.bfloat16")
    assert "fitted on mflux 0.18.0 or older" in note and "mflux 0.24.0 in bfloat16" in note
    assert "Qwen-Image's numbers (0.22.0: " in note and "norm_out bias" in note and "teacache-calib drift" in note
    assert numeric_change_note("z-image", "0.24.0", "float32") is None
    assert numeric_change_note("qwen-image-2512", "0.24.0") is None


def test_emit_writes_the_traces_release_and_dtype_and_reproduces_the_committed_module():
    # the campaign's fit the module (and its sweep) came from; ../fit is the safe refit of the same traces
    fit_dir = ROOT / "results" / "cpu-amd-epyc-2c" / "tiny-shapes" / "0.24.0" / "packaged"
    text = emit.emit_module(FitResult.read(fit_dir), "tiny-shapes")
    assert text == (ROOT / "teacache" / "coefficients" / "tiny_shapes.py").read_text(encoding="utf-8")
    assert fitted_on("tiny-shapes") == FittedOn(mflux="0.24.0", dtype="float32", evidence="the traces' provenance.json")
    assert 'FittedOn(evidence="no provenance.json' in emit.fitted_on_from_fit({"input": {}})


# ------------------------------------------------------------ fit --compare packaged and apply_teacache


@pytest.mark.parametrize(("release", "moved"), [("0.24.0", True), ("0.21.0", False)])
def test_fit_compare_packaged_says_when_the_traces_ran_past_a_numeric_change(tmp_path, capsys, release, moved):
    prov = {"variant": "qwen-image", "versions": {"mflux": release}, "dtype": "mlx.core.bfloat16"}
    traces = write(make_traces(variant="qwen-image"), tmp_path / "rec" / "traces.parquet", prov)
    args = [traces, "--out", tmp_path / "o", "--compare", "packaged", "--form", "poly", "--degree", "2"]
    assert fitmod.main([str(a) for a in [*args, "--mode", "free", "--no-plots"]]) == 0
    out = capsys.readouterr().out.replace("\n", " ")
    note = json.loads((tmp_path / "o" / "fit.json").read_text())["comparison"]["numeric_change"]
    assert (note is not None) == moved
    if moved:
        assert f"mflux {release} in bfloat16" in note and "teacache-calib drift" in out


def test_traces_without_a_release_are_compared_with_the_installed_one():
    note = packaged_numeric_change("qwen-image", {"variant": "qwen-image"})
    moved = bool(packaged_numeric_changes("qwen-image", INSTALLED))
    assert (note is not None) == moved
    if moved:
        assert note.endswith("[the traces name no mflux release: this compares with the installed one]")
    assert packaged_numeric_change(None, None) is None


def test_apply_teacache_warns_when_packaged_coefficients_predate_a_numeric_change(monkeypatch):
    import teacache
    from teacache.core import RecipeMismatchWarning

    model = teacache.load_model("tiny-qwen-image")
    model.teacache_variant = "qwen-image"  # the real variant's packaged fit, on the tiny architecture
    monkeypatch.setattr(_compat, "installed_mflux", lambda: "0.24.0")
    with pytest.warns(RecipeMismatchWarning, match=r"fitted on mflux 0\.18\.0 or older.*0\.22\.0"):
        teacache.apply_teacache(model).restore()
    monkeypatch.setattr(_compat, "installed_mflux", lambda: "0.21.0")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        teacache.apply_teacache(model).restore()
        teacache.apply_teacache(model, coefficients=(1.0, 0.0)).restore()  # the caller's coefficients: no claim


# ------------------------------------------------------------------- installing another release


def test_each_verified_release_but_the_pinned_one_has_its_plain_pins():
    lock = (ROOT / "requirements" / "cpu.txt").read_text(encoding="utf-8")
    assert f"\nmflux=={_compat.NEWEST_MFLUX}\n" in lock
    for release in _compat.VERIFIED_RELEASES[:-1]:
        lines = (ROOT / "requirements" / f"mflux-{release}.txt").read_text(encoding="utf-8").splitlines()
        assert lines[0] == f"mflux=={release}"
        for line in lines:
            name, _, version = line.partition("==")
            assert name and version and name.replace("-", "").replace("_", "").isalnum(), line
            assert f"\n{name}==" in lock, f"{name} is not a package of the lock"


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_make_test_also_runs_the_oldest_release_in_its_own_virtualenv():
    dry = subprocess.run(["make", "-n", "-B", "--no-print-directory", "test"], cwd=ROOT, capture_output=True, text=True)
    assert dry.returncode == 0, dry.stderr
    oldest = f".venv-mflux-{_compat.OLDEST_MFLUX}"
    assert f"{oldest}/bin/pytest tests/teacache/adapters/test_flux1.py" in dry.stdout
    assert f"requirements/mflux-{_compat.OLDEST_MFLUX}.txt" in dry.stdout
