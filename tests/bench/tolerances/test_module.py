"""teacache-bench tolerances writes a complete module: measured variants, kept ones, provisional ones read at import."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from bench.campaign import campaign_models
from bench.sweep.records import NOOP, RUNS, write_table
from bench.tolerances import derive as tolerances_cmd
from bench.tolerances.module import (
    KEPT_NOTE,
    TOLERANCES_DIR,
    provisional_constants,
    provisional_sources,
    read_module,
)
from teacache.io import FORMAT_VERSION, write_json
from tests import ROOT, doc_pages
from tests.tolerances import describe, measured_case, measured_cases

HARDWARE = {"backend": "cpu", "device_name": "Test Chip", "cpu_count": 3}  # slug cpu-test-chip-3c
PROMPTS = ({"id": "p0", "text": "a red fox"}, {"id": "p1", "text": "a lighthouse"}, {"id": "p2", "text": "a cat"})
SEEDS = (4, 7, 9)
# every embedded model has a committed campaign and tolerances; a retired one (tiny-scenes) has none: no module
# carries or borrows constants for a variant that can no longer run
COMMITTED_VARIANTS = set(campaign_models())


def make_sweep(folder: Path, variant: str) -> Path:
    """A sweep folder in the sweep's schema with what derive() reads: 3 prompts x 3 seeds, thresholds 0 and 0.3."""
    nan = float("nan")
    runs, noop = [], []
    for i, prompt in enumerate(PROMPTS):
        for j, seed in enumerate(SEEDS):
            pid = f"{prompt['id']}-s{seed}"
            pair = {"format_version": FORMAT_VERSION, "pair_id": pid, "variant": variant, "model": variant,
                    "prompt_id": prompt["id"], "prompt": prompt["text"], "seed": seed, "num_steps": 10}  # fmt: skip
            timing = {"computed": 10, "skipped_steps": "[]", "longest_skip_streak": 0, "wall_s": [1.0],
                      "wall_s_median": 1.0, "speedup": 1.0, "ideal_speedup": 1.0, "mean_abs": 0.0, "max_rel": 0.0,
                      "cosine": 1.0, "adherence": nan, "image_path": None, "predicted_skipped": nan}  # fmt: skip
            runs.append({**pair, **timing, "run_id": f"{pid}-vanilla", "kind": "vanilla", "threshold": nan,
                         "max_abs": 0.0, "ssim": 1.0, "psnr": float("inf"), "skipped": 0})  # fmt: skip
            runs.append({**pair, **timing, "run_id": f"{pid}-t0", "kind": "teacache", "threshold": 0.0,
                         "max_abs": 0.0, "ssim": 1.0, "psnr": float("inf"), "skipped": 0})  # fmt: skip
            ssim = 0.99 - 0.001 * (3 * i + j)
            runs.append({**pair, **timing, "run_id": f"{pid}-t0.3", "kind": "teacache", "threshold": 0.3,
                         "max_abs": 0.1, "ssim": ssim, "psnr": 40.0 - i - j, "skipped": 5 + j % 2,
                         "computed": 5 - j % 2, "ideal_speedup": 10 / (5 - j % 2)})  # fmt: skip
            noop.append({**pair, "run_id": f"{pid}-proxy-noop", "kind": "proxy-noop", "bit_exact": False,
                         "wall_s_median": 1.0, "cosine": 1.0 - 1e-9 * (1 + i + j), "max_abs": 1e-6 * (1 + i),
                         "mean_abs": 0.0, "max_rel": 0.0, "ssim": 1.0, "psnr": float("inf"),
                         "vanilla_repeats_equal": True})  # fmt: skip
    folder.mkdir(parents=True)
    write_table(folder / RUNS.file, RUNS, runs)
    write_table(folder / NOOP.file, NOOP, noop)
    write_json(folder / "provenance.json", {
        "format_version": FORMAT_VERSION, "variant": variant, "default_threshold": 0.3,
        "date_utc": "2026-01-02T03:04:05Z",
        **HARDWARE, "os": "Test OS", "versions": {"mlx": "0.32.2", "mflux": "0.24.0"}, "steps": 10,
        "resolution": "64x64", "guidance": 3.5, "prompts": list(PROMPTS), "seeds": list(SEEDS),
        "git": {"commit": "abc"}, "skip_first_n_steps": 1,
        "rescale": {"coefficients": [1.0, 0.0], "form": "poly", "x_range": [0.0, 1.0]},
    })  # fmt: skip
    return folder


def _import(path: Path):
    return tolerances_cmd.load_module(path)


@pytest.fixture
def sweeps(tmp_path):
    return {v: make_sweep(tmp_path / v, v) for v in ("tiny-flux1", "tiny-shapes")}


def test_unmeasured_variants_read_the_measured_modules_at_import_labelled_provisional(sweeps, tmp_path, capsys):
    out = tmp_path / "cpu_test_chip_3c.py"
    assert tolerances_cmd.main([str(sweeps["tiny-flux1"]), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    module = _import(out)
    assert module.VARIANTS == ("tiny-flux1",) and module.STATUS == "calibrated"
    assert set(module.PROVISIONAL_FROM) == COMMITTED_VARIANTS - {"tiny-flux1"}
    assert "tiny-z-image: provisional, read at import" in printed
    for variant, hardware in module.PROVISIONAL_FROM.items():
        source = read_module(TOLERANCES_DIR / f"{hardware.replace('-', '_')}.py").of_variant(variant)
        assert source and all(getattr(module, name) == value for name, value in source.items())
    # every constant the tests read exists for every variant (no AttributeError on a partial module)
    assert module.TINY_Z_IMAGE_SETTINGS["steps"] and module.TINY_SHAPES_SKIP_BAND
    assert "provisional (measured on cpu-amd-epyc-2c)" in describe(module)
    text = out.read_text()
    assert text.count("\nglobals().update(provisional_constants(PROVISIONAL_FROM))\n") == 1
    lines = text.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("PROVISIONAL_FROM = "))
    comment = lines[next(i for i in range(at - 1, -1, -1) if not lines[i].startswith("#")) + 1 : at]
    assert lines[at - 1] == "# provisional" and "not measured on cpu-test-chip-3c" in "\n".join(comment)


def test_a_variant_left_out_of_a_rerun_keeps_this_hardwares_values_relabelled_provisional(sweeps, tmp_path):
    out = tmp_path / "cpu_test_chip_3c.py"
    both = [str(sweeps["tiny-flux1"]), str(sweeps["tiny-shapes"]), "--out", str(out)]
    assert tolerances_cmd.main(both) == 0
    measured = _import(out)
    assert tolerances_cmd.main([str(sweeps["tiny-flux1"]), "--out", str(out)]) == 0
    rerun = _import(out)
    assert rerun.VARIANTS == ("tiny-flux1",) and rerun.KEPT == ("tiny-shapes",)
    assert "tiny-shapes" not in rerun.PROVISIONAL_FROM  # this hardware's own values win over another's
    kept = read_module(out).of_variant("tiny-shapes")
    assert kept == {name: getattr(measured, name) for name in kept}
    assert kept["TINY_SHAPES_SSIM_FLOOR"] == measured.TINY_SHAPES_SSIM_FLOOR
    lines = out.read_text().splitlines()
    for node in ast.parse(out.read_text()).body:
        if isinstance(node, ast.Assign) and node.targets[0].id.startswith("TINY_SHAPES_"):
            assert lines[node.lineno - 2] == "# provisional" and lines[node.lineno - 3] == f"# {KEPT_NOTE}"
    first = out.read_bytes()
    assert tolerances_cmd.main([str(sweeps["tiny-flux1"]), "--out", str(out)]) == 0
    assert out.read_bytes() == first  # same input, same file: keeping is idempotent
    assert tolerances_cmd.main(both) == 0
    again = _import(out)
    assert not hasattr(again, "KEPT") and again.TINY_SHAPES_SSIM_FLOOR == measured.TINY_SHAPES_SSIM_FLOOR


def test_each_variant_carries_the_pairs_it_was_measured_on(sweeps, tmp_path):
    out = tmp_path / "t.py"
    assert tolerances_cmd.main([str(sweeps["tiny-flux1"]), "--out", str(out)]) == 0
    module = _import(out)
    expected = tuple((p["id"], p["text"], s) for p in PROMPTS for s in SEEDS)
    assert measured_cases(module, "tiny-flux1") == expected
    assert measured_case(module, "tiny-flux1", 1) == ("a red fox", 7)
    assert measured_case(module, "tiny-flux1", len(expected)) == ("a red fox", 4)  # wraps around
    floor = module.TINY_FLUX1_SSIM_FLOOR
    worst = 0.99 - 0.001 * 8
    assert floor < worst  # the bound covers every measured pair, the worst one included


def test_committed_modules_are_complete_and_provisional_has_no_numbers_of_its_own():
    from tests.tolerances import load_tolerances
    from tests.tolerances import provisional as provisional_module

    sources = provisional_sources()
    assert set(sources) == COMMITTED_VARIANTS
    for slug in ("cpu-amd-epyc-2c", "cpu-intel-xeon-2c", "cuda-nvidia-h200"):
        module = load_tolerances(slug)
        for variant in COMMITTED_VARIANTS:
            assert measured_cases(module, variant), (slug, variant)
    assert provisional_module.STATUS == "provisional" and sources == provisional_module.PROVISIONAL_FROM
    for name, value in provisional_constants(sources).items():
        assert getattr(provisional_module, name) == value
    tree = ast.parse((TOLERANCES_DIR / "provisional.py").read_text())
    assert not [n for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, float)]


def test_a_missing_source_module_is_named_at_import(tmp_path):
    with pytest.raises(ImportError, match="no module .*cpu_nowhere_1c.py"):
        provisional_constants({"tiny-flux1": "cpu-nowhere-1c"})


RUFF = shutil.which("ruff", path=str(Path(sys.executable).parent)) or shutil.which("ruff")


@pytest.mark.skipif(RUFF is None, reason="ruff is not installed")
def test_written_modules_pass_ruff(sweeps, tmp_path):
    out = tmp_path / "cpu_test_chip_3c.py"
    assert tolerances_cmd.main([str(sweeps["tiny-flux1"]), str(sweeps["tiny-shapes"]), "--out", str(out)]) == 0
    assert tolerances_cmd.main([str(sweeps["tiny-flux1"]), "--out", str(out)]) == 0  # kept and read-at-import parts
    for command in (["format", "--check"], ["check", "--select", "E,F,I,B,UP,SIM", "--ignore", "E402"]):
        result = subprocess.run(
            [RUFF, *command, "--isolated", "--line-length", "120", str(out)], capture_output=True, text=True
        )
        assert result.returncode == 0, result.stdout + result.stderr


INTEL_PAGE = ("docs/tolerances.md", "The Intel module: tiny-shapes from a study's sweep", 0)


def test_the_pages_command_regenerates_the_committed_intel_module(tmp_path):
    """docs/tolerances.md's command for the Intel module, run as written on any machine from a folder whose
    results/ is the project's: the hardware comes from the sweep's provenance, and the module is the committed one."""
    (tmp_path / "results").symlink_to(ROOT / "results")
    (tmp_path / "tests" / "tolerances").mkdir(parents=True)
    done = doc_pages.run(doc_pages.block(*INTEL_PAGE), tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    written = (tmp_path / "tests/tolerances/cpu_intel_xeon_2c.py").read_text()
    assert written == (TOLERANCES_DIR / "cpu_intel_xeon_2c.py").read_text()
    assert 'VARIANTS = ("tiny-shapes",)' in written and "Intel(R) Xeon(R)" in written
