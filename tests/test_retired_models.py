"""A retired embedded model's name still answers: refused in one line, before anything loads, saying what
replaces it and which commit holds its weights."""

from __future__ import annotations

import pytest

import teacache
from teacache import variants
from teacache.errors import TeaCacheError
from tests import ROOT
from tests.conftest import refused

RETIRED = "tiny-scenes"
SAYS = ("tiny-scenes was retired", "tiny-open-flux1 replaces it", "git history", "08304d6")


def test_the_retired_model_is_a_refused_spec_and_its_weights_left_the_tree():
    spec = variants.find(RETIRED)
    assert spec is not None and not spec.supported and not spec.embedded
    assert RETIRED not in variants.load_names() and RETIRED not in variants.names()
    assert not (ROOT / "teacache" / "models" / "weights" / RETIRED).exists()


def test_no_tolerance_module_carries_or_borrows_constants_for_it():
    from bench.tolerances.module import generated_modules, prefix

    for module in generated_modules():
        held = [name for name in module.constants if name.startswith(prefix(RETIRED) + "_")]
        named = (*module.variants, *module.kept, *(module.constants.get("PROVISIONAL_FROM") or {}))
        assert not held and RETIRED not in named, (module.path.name, held)


def test_load_model_refuses_it_in_one_line():
    with pytest.raises(TeaCacheError) as caught:
        teacache.load_model(RETIRED)
    message = str(caught.value)
    assert "\n" not in message and all(part in message for part in SAYS), message


@pytest.mark.parametrize(
    ("command", "argv"),
    [
        ("teacache-bench campaign", ["--model", RETIRED, "--out", "campaign"]),
        ("teacache-calib record", ["--model", RETIRED, "--out", "traces"]),
        ("teacache-calib drift", ["--model", RETIRED, "--save", "before"]),
    ],
    ids=["campaign", "record", "drift"],
)
def test_every_command_refuses_it_before_anything_loads(command, argv, tmp_path, monkeypatch, capsys, no_model):
    line = refused(command, argv, tmp_path, monkeypatch, capsys)
    assert all(part in line for part in SAYS), line


def test_generate_refuses_it_before_anything_loads(tmp_path, monkeypatch, capsys, no_model):
    from calib.generate.command import main

    monkeypatch.chdir(tmp_path)
    assert main(["--model", RETIRED, "--prompt", "a red shape", "--output", "x.png"]) == 2
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(lines) == 1 and all(part in lines[0] for part in SAYS), lines
    assert list(tmp_path.iterdir()) == []
