"""Oracle 1: did a stored artifact move? Hashes of fixtures and pinned model revisions.

A failure here says that an artifact moved, never that the wrapper is wrong.
"""

from __future__ import annotations

import json

import pytest

from teacache.revisions import PINNED_REVISIONS, local_revision
from tests.manifest import FILES, MANIFEST, ROOT, TINY_FLUX1, file_sha256, tiny_flux1_sha256

EXPECTED = json.loads(MANIFEST.read_text())
MOVED = (
    "an artifact moved: {what} has sha256 {actual}, the manifest records {expected}. This is drift, not a "
    "wrapper bug; if the change is intended, run `python -m tests.manifest --update` and re-derive what was "
    "measured on it."
)


def test_manifest_lists_every_fixture():
    assert set(EXPECTED) == {*FILES, TINY_FLUX1}


@pytest.mark.parametrize("name", FILES)
def test_fixture_files_have_not_moved(name):
    actual = file_sha256(ROOT / name)
    assert actual == EXPECTED[name], MOVED.format(what=name, actual=actual, expected=EXPECTED[name])


def test_tiny_flux1_parameters_have_not_moved():
    actual = tiny_flux1_sha256()
    assert actual == EXPECTED[TINY_FLUX1], MOVED.format(what=TINY_FLUX1, actual=actual, expected=EXPECTED[TINY_FLUX1])


@pytest.mark.parametrize("repo", sorted(PINNED_REVISIONS))
def test_local_model_revisions_match_the_pins(repo):
    found = local_revision(repo)
    if found is None:
        pytest.skip(f"{repo} is not in the local Hugging Face cache: nothing to check")
    assert found == PINNED_REVISIONS[repo], (
        f"an artifact moved: the local {repo} is at revision {found}, pinned {PINNED_REVISIONS[repo]}. "
        f"Not a wrapper bug: download the pinned revision (hf download {repo} --revision "
        f"{PINNED_REVISIONS[repo]}) or re-pin and re-calibrate."
    )
