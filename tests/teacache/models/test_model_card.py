"""tiny-shapes' model card: written whole from its manifest through the template."""

from __future__ import annotations

import json
import shutil

from teacache.models.train_shapes import CARD_NAME, MANIFEST_NAME, write_model_card
from tests import ROOT

WEIGHTS = ROOT / "teacache" / "models" / "weights"


def test_the_committed_card_rebuilds_byte_identically_from_its_manifest(tmp_path):
    shutil.copy(WEIGHTS / MANIFEST_NAME, tmp_path / MANIFEST_NAME)
    assert write_model_card(tmp_path).read_bytes() == (WEIGHTS / CARD_NAME).read_bytes()


def _card_with(tmp_path, change) -> str:
    manifest = json.loads((WEIGHTS / MANIFEST_NAME).read_text())
    change(manifest)
    (tmp_path / MANIFEST_NAME).write_text(json.dumps(manifest))
    return write_model_card(tmp_path).read_text()


def test_a_model_not_yet_evaluated_says_how_to_evaluate_it(tmp_path):
    card = _card_with(tmp_path, lambda m: m.pop("evaluation"))
    assert "## Prompt adherence\n\nNot evaluated yet: `teacache-bench adherence --model-dir " in card
    assert "`.\n\n![samples](samples.png)" in card  # the folder as write_text records it
    assert "Misses" not in card and "| shape colour |" not in card


def test_the_training_line_follows_what_the_manifest_recorded(tmp_path):
    def change(m):
        m["training"].pop("first_step_s")
        m["training"]["provenance"]["git"] = {"commit": "abc123", "dirty": True}
        m["evaluation"]["misses"] = []

    card = _card_with(tmp_path, change)
    assert "compiled step)" in card or "uncompiled step)" in card
    assert "the first step, with compilation" not in card
    assert "commit abc123 (uncommitted changes)\n\n![training loss]" in card
    assert "Misses" not in card and "| shape colour |" in card
