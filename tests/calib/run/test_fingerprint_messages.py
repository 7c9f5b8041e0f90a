"""A refusal of another recording's folder shows the difference itself, not the shared start of two lists."""

from __future__ import annotations

import pytest

from calib.run import fingerprint


def _ids(n: int) -> dict[str, str]:
    return {f"shapes-{i:02d}": "a red circle on a blue background" for i in range(n)}


def test_a_longer_prompt_set_names_both_lengths_and_the_first_new_id():
    (line,), _ = fingerprint.compare({"prompts": _ids(8)}, {"prompts": _ids(16)})
    assert line == "prompts: 8 (this run: 16), first different at item 9: none (this run: shapes-08)"


def test_a_replaced_prompt_is_named_where_it_differs():
    stored, current = _ids(12), _ids(12)
    current["other"] = current.pop("shapes-10")
    (line,), _ = fingerprint.compare({"prompts": stored}, {"prompts": current})
    assert "first different at item 11: shapes-10 (this run: shapes-11)" in line


@pytest.mark.parametrize(
    ("stored", "current", "says"),
    [
        ([0], [0, 1], "seeds 0 (this run: 0,1)"),
        (list(range(10)), [*range(9), 42], "seeds: 10 (this run: 10), first different at item 10: 9 (this run: 42)"),
    ],
)
def test_seeds_are_named_short_or_by_their_first_difference(stored, current, says):
    (line,), _ = fingerprint.compare({"seeds": stored}, {"seeds": current})
    assert line == says
