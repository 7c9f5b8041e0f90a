"""The literal writer of generated modules: every value reads back exactly, in the layout ruff format keeps."""

from __future__ import annotations

import ast
import math
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from calib.pyliteral import assignment, evaluate, literal, string

RUFF = shutil.which("ruff", path=str(Path(sys.executable).parent)) or shutil.which("ruff")

scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(10**20), 10**20)
    | st.floats(allow_nan=False)
    | st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=40)
)
values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=5)
        | st.lists(inner, max_size=5).map(tuple)
        | st.dictionaries(st.text(max_size=12), inner, max_size=5)
    ),
    max_leaves=30,
)


def _read_back(text: str):
    return evaluate(ast.parse(text, mode="eval").body)


@settings(max_examples=150, deadline=None)
@given(values)
def test_every_value_reads_back_exactly(value):
    assert _read_back(literal(value)) == value
    assert _read_back(assignment("NAME", value).removeprefix("NAME = ")) == value


def test_non_finite_floats_and_numpy_scalars():
    assert literal(math.inf) == 'float("inf")' and literal(-math.inf) == 'float("-inf")'
    assert literal(1e16) == "1e16" and literal(2.5e-05) == "2.5e-05"
    assert math.isnan(_read_back(literal(math.nan)))
    assert literal(np.float64(0.1)) == "0.1" and literal(np.int64(3)) == "3" and literal(np.bool_(True)) == "True"
    assert literal({"x": [np.float32(0.5), None]}) == '{\n    "x": [\n        0.5,\n        None,\n    ],\n}'


def test_strings_prefer_double_quotes_unless_that_needs_escapes():
    assert string("bit-exact") == '"bit-exact"'
    assert string("it's") == '"it\'s"'
    assert string('say "hi"') == "'say \"hi\"'"
    assert string("both ' and \"") == '"both \' and \\""'
    assert string("é") == '"\\xe9"' and string("\u952e\U0001f600") == '"\\u952e\\U0001f600"'  # ASCII only
    for text in ('it\'s "both"', "tab\there", "é", "\\", "\x00"):
        assert ast.literal_eval(string(text)) == text


def test_evaluate_refuses_anything_but_literals():
    for text in ("__import__('os')", "float(x)", "a.b", "[1, f()]", "{**x}"):
        with pytest.raises(ValueError, match="not a literal"):
            evaluate(ast.parse(text, mode="eval").body)


@pytest.mark.skipif(RUFF is None, reason="ruff is not installed")
def test_a_module_of_assignments_is_already_in_ruff_format(tmp_path):
    cases = tuple((f"shapes-{i:02d}", "a red circle on a blue background at the center", i % 2) for i in range(4))
    module = {
        "SETTINGS": {"steps": 28, "rescale": {"coefficients": [1.0, -2.5e-05], "x_range": [], "extra": {}}},
        "CASES": cases,
        "BAND": (18, 18),
        "ONE": ("a",),
        "FLOOR": 0.9999999973532294,
        "INF": math.inf,
        "NONE": None,
        "STATUS": "bit-exact",
        "LONG_TUPLE": ("x" * 60, "y" * 60),
        "LONG_STRING_THAT_FITS_ON_ITS_OWN_LINE": "z" * 100,
        "LONGER_THAN_ANY_LINE": "w" * 130,
        "QUOTES": ('say "hi"', "it's", "both ' and \""),
        "NESTED": [("p", 1), ("q", (2, 3))],
        "MAPPING": {"tiny-flux2": "cpu-amd-epyc-2c", "tiny-z-image": "cpu-amd-epyc-2c"},
    }
    text = "\n\n".join(assignment(name, value) for name, value in module.items()) + "\n"
    path = tmp_path / "generated.py"
    path.write_text(text)
    result = subprocess.run(
        [RUFF, "format", "--diff", "--line-length", "120", "--isolated", str(path)], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr
    tree = ast.parse(text)
    assert {node.targets[0].id: evaluate(node.value) for node in tree.body} == module


@pytest.mark.skipif(RUFF is None, reason="ruff is not installed")
@settings(max_examples=25, deadline=None)
@given(st.dictionaries(st.from_regex(r"[A-Z][A-Z0-9_]{0,30}", fullmatch=True), values, min_size=1, max_size=4))
# wide (CJK) and astral (emoji) keys: ruff counts each as two columns, so a line that fits by len() did not
@example({"A": {"\u952e" * 12: ("x" * 40, "y" * 40)}})
@example({"A": {"\U0001f600" * 12: ("x" * 40, "y" * 40)}, "B": ("\u952e" * 35, "y" * 40)})
def test_any_generated_module_is_left_unchanged_by_ruff_format(module):
    text = "\n\n".join(assignment(name, value) for name, value in module.items()) + "\n"
    result = subprocess.run(
        [RUFF, "format", "--isolated", "--line-length", "120", "-"], input=text, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == text
