"""fit.json's typed objects: one reader and one writer that give back every committed file byte for byte, frozen
values, and a selection that returns new results instead of changing the one it is given."""

from __future__ import annotations

import copy
import dataclasses
import json
import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from calib.fit.candidates import candidate_specs
from calib.fit.decision_folds import score_fit, select_by
from calib.fit.errors import FitError
from calib.fit.result import FUNCTION_KEYS, MISSING, Candidate, FitResult, rescale_from_fit
from calib.fit.selection import fit_frame
from teacache.io import FORMAT_VERSION
from teacache.rescale import RescaleFunction
from tests import ROOT, committed
from tests.calib.fit.conftest import make_traces

COMMITTED_FITS = committed("results/**/fit.json")

# ---------------------------------------------------------------------------------------------- strategies

words = st.text(alphabet="abcdefghijklmnopqrstuvwxyz_+-", min_size=1, max_size=12)
numbers = st.floats(allow_nan=False, width=64)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(10**6), 10**6) | numbers | words,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(words, inner, max_size=3),
    max_leaves=8,
)
sections = st.dictionaries(words, json_values, max_size=4)
optional = {
    "degree": st.integers(0, 4),
    "mode": words,
    "time_degree": st.integers(0, 5),
    "interaction_degree": st.integers(0, 2),
    "n_params": st.integers(1, 40),
    "cv_r2_se": numbers,
    "cv_fold_loss": st.lists(numbers, max_size=4),
    "rmse_in_sample": numbers,
    "safety": sections,
    "decision_excess": st.none() | numbers,
    "decision_excess_worst": st.none() | numbers,
}


def _functions() -> list[dict]:
    """One committed candidate's function fields per form and layout (with region, knots, old files' fields)."""
    seen = {}
    for path in COMMITTED_FITS:
        for c in json.loads(path.read_text())["candidates"]:
            function = {k: c[k] for k in FUNCTION_KEYS if k in c}
            seen.setdefault((c["form"], tuple(function)), function)
    return list(seen.values())


FUNCTIONS = _functions()


@st.composite
def candidates(draw) -> dict:
    function = dict(draw(st.sampled_from(FUNCTIONS)))
    for key in ("time_coefficients", "interaction_coefficients"):  # empty ones may be absent (older files)
        if key in function and not function[key] and draw(st.booleans()):
            del function[key]
    entry = {
        "label": draw(words),
        **function,
        **{k: draw(numbers) for k in ("r2", "cv_r2", "rmse")},
        "n_prompts": draw(st.integers(3, 50)),
        "n_pairs": draw(st.integers(1, 10**5)),
        "selected": draw(st.booleans()),
    }
    present = draw(st.sets(st.sampled_from(sorted(optional))))
    return {**entry, **{k: draw(optional[k]) for k in sorted(present)}}


@st.composite
def fit_documents(draw) -> dict:
    doc = {"format_version": FORMAT_VERSION, "selected": draw(candidates())}
    tops = {
        "kind": words,
        "variant": st.none() | words,
        "form": words,
        "fitted_model": words,
        "candidates": st.lists(candidates(), max_size=3),
        "plots": st.lists(words, max_size=3),
        **{k: sections for k in ("selection", "decision", "ceiling", "comparison", "data", "options", "input")},
        "provenance": sections,
    }
    present = draw(st.sets(st.sampled_from(sorted(tops))))
    return {**doc, **{k: draw(tops[k]) for k in sorted(present)}}


# ----------------------------------------------------------------------------------------- read and write


def _tokens(text: str):
    """The JSON as written: keys in their order, numbers as spelled (not as parsed)."""
    return json.loads(text, object_pairs_hook=list, parse_float=str, parse_int=str, parse_constant=str)


@settings(max_examples=60, deadline=None)
@given(fit_documents())
def test_read_of_write_is_the_same_result(doc):
    fit = FitResult.from_json(doc)
    assert fit.to_json() == doc  # absent fields stay absent, nulls stay nulls
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "fit.json"
        fit.write(path)
        again = FitResult.read(path)
        assert again == fit
        again.write(Path(tmp) / "again.json")
        assert (Path(tmp) / "again.json").read_bytes() == path.read_bytes()
        assert _tokens(path.read_text()) == _tokens(json.dumps(fit.to_json(), indent=2, sort_keys=True))


@pytest.mark.parametrize("path", COMMITTED_FITS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_committed_fit_is_written_back_byte_for_byte(path, tmp_path):
    fit = FitResult.read(path)
    fit.write(tmp_path / "fit.json")
    assert (tmp_path / "fit.json").read_bytes() == path.read_bytes()
    assert fit.rescale == RescaleFunction.from_dict({**json.loads(path.read_text())["selected"], "provenance": {}})


def test_the_writer_puts_each_candidate_and_each_list_of_numbers_on_one_line(tmp_path):
    path = ROOT / "results/cpu-amd-epyc-2c/tiny-shapes/0.24.0/fit/fit.json"
    fit = FitResult.read(path)
    fit.write(tmp_path / "fit.json")
    text = (tmp_path / "fit.json").read_text()
    doc = fit.to_json()
    # the same JSON as one value a line would be: keys in the same order, every number spelled alike
    assert json.loads(text) == doc
    assert _tokens(text) == _tokens(json.dumps(doc, indent=2, sort_keys=True))
    lines = text.splitlines()
    for table, rows in (
        ('  "candidates": [', doc["candidates"]),
        ('    "candidates": [', doc["decision"]["candidates"]),
    ):
        start = lines.index(table) + 1
        written = lines[start : start + len(rows)]
        assert [json.loads(line.strip().rstrip(",")) for line in written] == rows
        assert lines[start + len(rows)].strip() in ("]", "],")
    coefficients = json.dumps(doc["selected"]["coefficients"], separators=(",", ":"))
    assert f'    "coefficients": {coefficients},' in lines  # the selected one keeps a line per field
    assert '    "label": ' + json.dumps(doc["selected"]["label"]) + "," in lines
    assert len(lines) < len(doc["candidates"]) + 1000  # not one number a line (one per candidate)


def test_the_committed_fits_are_there():
    assert len(COMMITTED_FITS) >= 30  # the byte-for-byte test above covers every campaign's fit


def test_the_rescale_function_names_the_fit():
    fit = FitResult.read(COMMITTED_FITS[0])
    rescale = fit.rescale
    assert rescale.provenance["fitted_model"] == fit.selected.label
    assert rescale.provenance["date_utc"] == fit.provenance["date_utc"]
    assert rescale.provenance["cv_r2"] == fit.selected.cv_r2
    assert rescale_from_fit(COMMITTED_FITS[0]) == rescale == rescale_from_fit(fit.to_json())
    assert fit.selected.rescale == rescale and fit.selected.rescale.provenance["date_utc"] is None


def test_a_bad_fit_is_one_line_naming_the_file(tmp_path):
    doc = json.loads(COMMITTED_FITS[0].read_text())
    cases = {
        "missing.json": (None, "does not exist"),
        "junk.json": ("{not json", "cannot read"),
        "other.json": ({"candidates": []}, "no 'selected' field"),
        "old.json": ({**doc, "format_version": 99}, "has format_version 99; this toolkit reads 1"),
        "unknown.json": ({**doc, "colour": "red"}, "unknown field 'colour'"),
        "partial.json": ({**doc, "selected": {"label": "poly1-free"}}, "selected: missing field 'form'"),
    }
    for name, (content, message) in cases.items():
        path = tmp_path / name
        if content is not None:
            path.write_text(content if isinstance(content, str) else json.dumps(content))
        with pytest.raises(FitError, match="^FIT: ") as info:
            FitResult.read(path)
        assert message in str(info.value) and str(path) in str(info.value) and "\n" not in str(info.value)
    with pytest.raises(FitError, match="^fit: expected an object, got list$"):
        FitResult.from_json([])  # type: ignore[arg-type]


# ------------------------------------------------------------------------------------ frozen, not mutated


def test_results_cannot_be_changed_in_place():
    fit = FitResult.read(COMMITTED_FITS[0])
    with pytest.raises(dataclasses.FrozenInstanceError):
        fit.selected = fit.candidates[0]  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        fit.selected.cv_r2 = 1.0  # type: ignore[misc]
    with pytest.raises(TypeError):
        fit.selection["criterion"] = "other"  # type: ignore[index]
    with pytest.raises(AttributeError):
        fit.data["warnings"].append("x")  # type: ignore[union-attr]  (a tuple)
    assert isinstance(fit.candidates, tuple) and isinstance(fit.selected["coefficients"], tuple)
    made = dataclasses.replace(fit, options={"min_step": 2})  # frozen however it is made
    with pytest.raises(TypeError):
        made.options["min_step"] = 3  # type: ignore[index]
    assert fit.selected["label"] == fit.selected.label and "region" not in Candidate.from_json(
        {k: v for k, v in fit.selected.items() if k != "region"}
    )
    assert fit.kind is not MISSING and FitResult.from_json({"selected": fit.selected}).kind is MISSING


@pytest.fixture(scope="module")
def small_fit():
    frame = make_traces(n_prompts=4, n_steps=8)
    frame = frame[(frame["branch"] == "cond") & (frame["step"] > 0)].reset_index(drop=True)
    specs = [s for s in candidate_specs(True, False, with_splines=False) if s.time_degree <= 1][:12]
    return frame, specs, fit_frame(frame, specs)


def test_the_selection_leaves_its_input_as_it_was(small_fit):
    frame, specs, fit = small_fit
    before = copy.deepcopy(fit.to_json())
    scored, curves = score_fit(fit, frame, specs, None, 1)
    assert fit.to_json() == before and "decision" not in fit and curves
    assert all(c.decision_excess is not MISSING for c in scored.candidates)
    assert scored.selection["selected_by"]["cv_r2"] == fit.selected.label
    scored_before = copy.deepcopy(scored.to_json())
    chosen = select_by(scored, "decision_excess")
    assert scored.to_json() == scored_before  # the scored fit is unchanged too
    label = scored.selection["selected_by"]["decision_excess"]
    assert chosen.selected.label == chosen.fitted_model == label
    assert [c.label for c in chosen.candidates if c.selected] == [label]
    assert chosen.selection["default"] == "decision_excess" and scored.selection["default"] == "cv_r2"
    assert select_by(scored, "cv_r2") is scored


def test_fit_frame_marks_one_candidate_selected(small_fit):
    _, _, fit = small_fit
    assert [c for c in fit.candidates if c.selected] == [fit.selected]
    assert np.isfinite(fit.selected.cv_r2) and fit.format_version is MISSING  # the command adds the rest
