"""``teacache-bench tolerances --quantized-noop``: measure.py's files read whole, the bounds derived per bit width, a
bad file refused in one line before anything is written, and the bounds kept as written by a derivation without
their files."""

from __future__ import annotations

import json
import subprocess
import tempfile
from pathlib import Path

import numpy as np
import pytest

from bench.tolerances import derive as tolerances_cmd
from bench.tolerances import quantized_noop
from bench.tolerances.module import TOLERANCES_DIR, read_module
from tests import ROOT, doc_pages
from tests.conftest import refused
from tests.gpu.conftest import gpu_skip_reason
from tests.tolerances import load_tolerances, quantized_noop_bounds

H200 = ROOT / "results/cuda-nvidia-h200"
SWEEPS = [str(H200 / f"{variant}/0.24.0/sweep") for variant in ("tiny-shapes", "tiny-flux1")]
FILES = ROOT / "results/cuda-nvidia-h200/quantized-noop/x_embedder-bf16"
COMMITTED = sorted(FILES.glob("q*-session*.json"))
CPU_SWEEP = str(ROOT / "results/cpu-amd-epyc-2c/tiny-shapes/0.24.0/sweep")
PAGE = ("docs/tolerances.md", "The quantized no-op at full size", 0)
SAYS = ("x_embedder kept in bfloat16", "K = 64 reads output memory it never wrote", "mlx 0.32.2", "margin:",
        "vanilla differs from vanilla in", "results/cuda-nvidia-h200/quantized-noop/RUN.md")  # fmt: skip


def _arms(pair: dict) -> tuple[str, str]:
    return tuple(sorted(name.rsplit("-", 1)[0] for name in (pair["a"], pair["b"])))


def test_the_bounds_of_each_bit_width_come_from_its_proxy_vanilla_pairs_by_the_margin_rule():
    measurements = quantized_noop.read_measurements(COMMITTED, "cuda")
    constants = quantized_noop.derive(measurements, "cuda-nvidia-h200")
    for bits in (8, 4):
        raw = [json.loads(path.read_text()) for path in COMMITTED if path.name.startswith(f"q{bits}-")]
        pairs = [p for data in raw for p in data["pairs"] if _arms(p) == ("proxy-all", "vanilla")]
        for key, kind in (("max_abs", "MAX_ABS"), ("rel_rms", "REL_RMS")):
            values = np.array([p[key] for p in pairs])
            value, notes = constants[quantized_noop.constant_name(bits, kind)]
            assert value == values.max() + (values.max() - np.median(values))
            assert f"proxy/vanilla n {len(pairs)}: min" in "\n".join(notes)
            vanilla = [p for data in raw for p in data["pairs"] if _arms(p) == ("vanilla", "vanilla")]
            assert f"vanilla/vanilla in the same files n {len(vanilla)}: min" in "\n".join(notes)
        settings, _ = constants[quantized_noop.constant_name(bits, "SETTINGS")]
        meta = raw[0]["_meta"]
        assert settings == {"group_size": meta["group_size"], "guidance": 3.5, "kept_bfloat16": ("x_embedder",),
                            "model": "random-flux1-dev", "model_seed": 0, "quantize": bits, "size": meta["size"],
                            "steps": meta["steps"]}  # fmt: skip
        inputs, _ = constants[quantized_noop.constant_name(bits, "INPUTS")]
        assert inputs == tuple(str(p.relative_to(ROOT)) for p in COMMITTED if p.name.startswith(f"q{bits}-"))


def test_the_committed_module_holds_them_and_the_gpu_test_reads_them():
    module = load_tolerances("cuda-nvidia-h200")
    for bits in (8, 4):
        bounds = quantized_noop_bounds(module, bits)
        assert bounds["settings"]["quantize"] == bits and bounds["max_abs"] > 0 and bounds["rel_rms"] > 0
    with pytest.raises(LookupError, match=r"has no FULLSIZE_FLUX1_DEV_Q3_NOOP_SETTINGS.*--quantized-noop"):
        quantized_noop_bounds(module, 3)
    lines = (TOLERANCES_DIR / "cuda_nvidia_h200.py").read_text().splitlines()
    at = lines.index("FULLSIZE_FLUX1_DEV_Q8_NOOP_MAX_ABS = " + repr(module.FULLSIZE_FLUX1_DEV_Q8_NOOP_MAX_ABS))
    comment = " ".join(line[2:].strip() for line in lines[at - 20 : at] if line.startswith("#"))
    for says in SAYS:
        assert says in comment, says


def test_the_gpu_test_says_why_it_is_skipped_on_a_cpu():
    import mlx.core as mx

    if mx.default_device().type == mx.gpu:
        pytest.skip("MLX's default device is a GPU here")
    assert "MLX's default device is Device(cpu, 0)" in gpu_skip_reason()


def _bad_copy(tmp_path: Path, name: str, change) -> str:
    data = json.loads(COMMITTED[-1].read_text())  # q8-session2.json
    change(data)
    path = tmp_path / name
    path.write_text(json.dumps(data))  # NaN and Infinity as Python's json writes them
    return str(path)


def _set(path: tuple, value):
    def change(data):
        target = data
        for key in path[:-1]:
            target = target[key]
        if value is KeyError:
            del target[path[-1]]
        else:
            target[path[-1]] = value

    return change


BAD = {
    "missing-key": (_set(("_meta", "steps"), KeyError), "_meta has no 'steps'"),
    "missing-pairs": (_set(("pairs",), KeyError), "no _meta and pairs at its top"),
    "nan": (_set(("pairs", 3, "max_abs"), float("nan")), "pairs[3].max_abs: expected a finite number >= 0, got nan"),
    "infinite": (_set(("pairs", 0, "rel_rms"), float("inf")), "pairs[0].rel_rms: expected a finite number >= 0"),
    "negative": (_set(("pairs", 1, "max_abs"), -1.0), "pairs[1].max_abs: expected a finite number >= 0, got -1.0"),
    "text": (_set(("pairs", 2, "max_abs"), "0.1"), "pairs[2].max_abs: expected a finite number >= 0, got '0.1'"),
    "run-name": (_set(("pairs", 0, "a"), "teacache-0"), "pairs[0].a: expected a run vanilla-N or proxy-all-N"),
    "equal": (_set(("pairs", 0, "equal"), 1), "pairs[0].equal: expected true or false, got 1"),
    "steps": (_set(("_meta", "steps"), 0), "_meta.steps: expected a whole number >= 1, got 0"),
    "blocks": (_set(("_meta", "blocks"), 1), "_meta.blocks 1: a smoke test of a cut-down model, not full size"),
    "kept": (_set(("_meta", "kept_bfloat16"), "x_embedder"), "_meta.kept_bfloat16: expected a list of layer names"),
    "no-pairs": (_set(("pairs",), []), "no proxy/vanilla pair"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_file_that_is_not_such_a_measurement_is_one_line_naming_it(case, tmp_path, monkeypatch, capsys):
    change, expected = BAD[case]
    bad = _bad_copy(tmp_path, f"{case}.json", change)
    argv = [*SWEEPS, "--quantized-noop", str(COMMITTED[0]), bad, "--out", str(tmp_path / "t.py")]
    line = refused("teacache-bench tolerances", argv, tmp_path, monkeypatch, capsys)
    assert line.startswith(f"teacache-bench tolerances: --quantized-noop: {bad}: {expected}"), line
    assert "expected a file that results/cuda-nvidia-h200/quantized-noop/measure.py wrote" in line


def test_other_files_are_refused_naming_them(tmp_path, monkeypatch, capsys):
    not_json = tmp_path / "notes.json"
    not_json.write_text("steps: 6\n")
    a_sweep = str(H200 / "tiny-shapes/0.24.0/sweep/provenance.json")
    for path, expected in ((str(not_json), f"{not_json}: not JSON"), (a_sweep, f"{a_sweep}: no _meta and pairs"),
                           (str(tmp_path / "none.json"), "does not exist")):  # fmt: skip
        argv = [*SWEEPS, "--quantized-noop", path, "--out", str(tmp_path / "t.py")]
        assert expected in refused("teacache-bench tolerances", argv, tmp_path, monkeypatch, capsys)


def test_files_of_one_bit_width_must_share_their_settings(tmp_path, monkeypatch, capsys):
    other = _bad_copy(tmp_path, "q8-10-steps.json", _set(("_meta", "steps"), 10))
    argv = [*SWEEPS, "--quantized-noop", str(COMMITTED[2]), other, "--out", str(tmp_path / "t.py")]
    line = refused("teacache-bench tolerances", argv, tmp_path, monkeypatch, capsys)
    assert f"--quantized-noop: {other} has steps 10, " in line and "q8-session1.json 6: the 8-bit files" in line
    kept = _bad_copy(tmp_path, "q8-kept.json", _set(("_meta", "kept_bfloat16"), []))
    argv = [*SWEEPS, "--quantized-noop", str(COMMITTED[2]), kept, "--out", str(tmp_path / "t.py")]
    assert "has kept_bfloat16 (), " in refused("teacache-bench tolerances", argv, tmp_path, monkeypatch, capsys)


def test_a_file_given_twice_or_from_another_kind_of_device_is_refused(tmp_path, monkeypatch, capsys):
    argv = [*SWEEPS, "--quantized-noop", str(COMMITTED[0]), str(COMMITTED[0]), "--out", str(tmp_path / "t.py")]
    assert "is given twice" in refused("teacache-bench tolerances", argv, tmp_path, monkeypatch, capsys)
    argv = [CPU_SWEEP, "--quantized-noop", str(COMMITTED[0]), "--out", str(tmp_path / "t.py")]
    line = refused("teacache-bench tolerances", argv, tmp_path, monkeypatch, capsys)
    assert "ran on Device(gpu, 0), the sweeps (RUNS) on cpu: one module per hardware" in line


def test_a_derivation_without_the_files_keeps_the_bounds_as_written(tmp_path, capsys):
    out = tmp_path / "cuda_nvidia_h200.py"
    assert tolerances_cmd.main([*SWEEPS, "--quantized-noop", *map(str, COMMITTED), "--out", str(out)]) == 0
    first = out.read_text()
    assert tolerances_cmd.main([*SWEEPS, "--out", str(out)]) == 0
    assert out.read_text() == first
    assert "quantized no-op, 4 bits: kept from the previous module as written" in capsys.readouterr().out
    q8 = [str(p) for p in COMMITTED if p.name.startswith("q8-")]
    assert tolerances_cmd.main([*SWEEPS, "--quantized-noop", *q8, "--out", str(out)]) == 0
    assert out.read_text() == first  # the 8-bit bounds derived again, the 4-bit ones kept: the same file
    wider = _bad_copy(tmp_path, "q8-wider.json", _set(("pairs", 4, "max_abs"), 0.01))  # a proxy/vanilla pair
    assert tolerances_cmd.main([*SWEEPS, "--quantized-noop", q8[0], wider, "--out", str(out)]) == 0
    (tmp_path / "first.py").write_text(first)
    before, after = read_module(tmp_path / "first.py"), read_module(out)
    assert (
        after.constants["FULLSIZE_FLUX1_DEV_Q8_NOOP_MAX_ABS"] > before.constants["FULLSIZE_FLUX1_DEV_Q8_NOOP_MAX_ABS"]
    )
    for name in ("SETTINGS", "MAX_ABS", "REL_RMS", "INPUTS"):
        q4 = quantized_noop.constant_name(4, name)
        assert after.texts[q4] == before.texts[q4]  # byte for byte, comments and all
    recorded = after.constants["FULLSIZE_FLUX1_DEV_Q8_NOOP_INPUTS"]
    assert sorted(Path(path).name for path in recorded) == ["q8-session1.json", "q8-wider.json"]
    assert "results/cuda-nvidia-h200/quantized-noop/x_embedder-bf16/q8-session1.json" in recorded
    assert f"$TMPDIR/{Path(wider).relative_to(tempfile.gettempdir())}" in recorded  # no path of this machine


def test_the_pages_command_regenerates_the_committed_module(tmp_path):
    """docs/tolerances.md's command, run as written from a folder whose results/ is the project's: the module it
    writes is the committed one, byte for byte."""
    (tmp_path / "results").symlink_to(ROOT / "results")
    (tmp_path / "tests" / "tolerances").mkdir(parents=True)
    done = doc_pages.run(doc_pages.block(*PAGE), tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    written = tmp_path / "tests/tolerances/cuda_nvidia_h200.py"
    assert written.read_text() == (TOLERANCES_DIR / "cuda_nvidia_h200.py").read_text()


def _origin(paths) -> str:
    constants = quantized_noop.derive(quantized_noop.read_measurements(paths, "cuda"), "cuda-nvidia-h200")
    _value, notes = constants[quantized_noop.constant_name(8, "MAX_ABS")]
    return " ".join(n for n in notes if n.startswith("measured on"))


def test_the_constants_are_dated_by_their_files_else_by_the_commit_that_added_them(tmp_path):
    committed = [p for p in COMMITTED if p.name.startswith("q8-")]
    added = subprocess.run(["git", "log", "--diff-filter=A", "--format=%cI", "--", str(committed[0])], cwd=ROOT,
                           capture_output=True, text=True, check=True).stdout.split()[-1]  # fmt: skip
    assert f"measured no later than {added.replace('+00:00', 'Z')} (the files record no date" in _origin(committed)
    dated = []
    for i, path in enumerate(committed):
        data = json.loads(path.read_text())
        data["_meta"] |= {"measured_at": f"2027-01-0{i + 1}T00:00:00Z", "mflux": "0.24.0"}
        dated.append(tmp_path / path.name)
        dated[-1].write_text(json.dumps(data))
    origin = _origin(dated)
    assert "mflux 0.24.0 in the files; measured 2027-01-01T00:00:00Z, 2027-01-02T00:00:00Z;" in origin, origin
    for path in dated:  # neither dated nor committed: said so, never a date made up
        data = json.loads(path.read_text())
        del data["_meta"]["measured_at"]
        path.write_text(json.dumps(data))
    assert "the date unknown" in _origin(dated)
