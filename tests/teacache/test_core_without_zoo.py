"""The core (gate, rescale, adapters, variants, api, loading) imports and runs without the zoo (``teacache.models``),
and ``import teacache`` changes nothing in the process environment. Each check runs in a fresh interpreter, so
what this test session already imported says nothing about it."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from tests import ROOT

CORE_USE = """
import json, math, sys

from teacache import GateConfig, RescaleFunction, apply_teacache, load_model, variants
from teacache import adapters, api, loading
from teacache.gate import replay

for family in variants.families():
    __import__(f"teacache.adapters.{family.adapter}")
rescale = RescaleFunction(coefficients=(1.0, 0.0))
assert float(rescale(0.2)) == 0.2
decisions = replay(GateConfig(rel_l1_thresh=0.3, rescale=rescale), [math.nan, 0.1, 0.1, 0.1, 0.1, 0.1])
spec = variants.get("flux1-dev")
assert spec.rescale().coefficients and not spec.embedded
assert loading.resolve_spec("tiny-shapes").trained and loading.resolve_spec("random-qwen-image").name == "qwen-image"
try:
    apply_teacache(object())
except TypeError as exc:
    refused = str(exc)
try:
    variants.zoo("teacache.gate:replay")
except ValueError as exc:
    outside = str(exc)
zoo = sorted(name for name in sys.modules if name.startswith("teacache.models"))
skipped = sum(not d.compute for d in decisions)
print(json.dumps({"skipped": skipped, "refused": refused, "outside": outside, "zoo": zoo}))
"""

ENVIRONMENT = """
import json, os

before = dict(os.environ)
import teacache  # noqa: F401
after = dict(os.environ)
print(json.dumps({k: [before.get(k), after.get(k)] for k in set(before) | set(after) if before.get(k) != after.get(k)}))
"""


def _run(code: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "TRANSFORMERS_VERBOSITY"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.splitlines()[-1])


def test_the_core_imports_and_runs_without_loading_the_zoo():
    found = _run(CORE_USE)
    assert found["zoo"] == [], f"the core loaded {found['zoo']}"
    assert found["skipped"] > 0
    assert found["refused"].startswith("model: TeaCache does not support object")
    assert found["outside"].startswith("zoo: 'teacache.gate:replay' names no module:function under teacache.models")


def test_building_an_embedded_model_goes_through_the_one_seam():
    code = "import sys\nimport teacache\nteacache.load_model('tiny-flux1')\nimport json\n"
    code += "print(json.dumps(sorted(n for n in sys.modules if n.startswith('teacache.models'))))"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "teacache.models.tiny_flux1" in json.loads(done.stdout.splitlines()[-1])


def test_import_teacache_sets_no_environment_variable():
    assert _run(ENVIRONMENT) == {}
