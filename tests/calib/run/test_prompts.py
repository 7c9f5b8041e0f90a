"""Prompt ids name files (``<id>-s<seed>.parquet``, images): a prompt file's ids are checked where it is read,
so no command writes outside its --out, makes subfolders, or drops a prompt whose id came twice."""

from __future__ import annotations

import json

import pytest

from calib.run.prompts import SETS, check_prompt_id, load_prompts
from teacache.errors import InputTypeError
from tests.conftest import refused


@pytest.mark.parametrize("name", sorted(SETS))
def test_every_built_in_id_is_a_safe_file_name(name):
    for prompt_id in SETS[name]:
        check_prompt_id(prompt_id)
    assert load_prompts(name) == SETS[name]


@pytest.mark.parametrize("bad", ["../../etc/passwd", "a/b", ".hidden", "..", "", "sp ace", "a\\b", "x" * 129, "é"])
def test_a_csv_id_that_is_not_a_safe_file_name_is_refused_naming_file_line_and_id(bad, tmp_path):
    path = tmp_path / "p.csv"
    path.write_text(f'id,text\ncat,a cat\n"{bad}",a lighthouse\n', encoding="utf-8")
    with pytest.raises(ValueError) as caught:
        load_prompts(str(path))
    message = str(caught.value)
    assert message.startswith(f"--prompts: {path} line 3: id {bad!r}"), message
    assert "A-Z a-z 0-9 . _ -" in message and "\n" not in message


def test_json_ids_are_checked_too(tmp_path):
    as_dict = tmp_path / "d.json"
    as_dict.write_text(json.dumps({"ok": "a cat", "../x": "a dog"}))
    with pytest.raises(ValueError, match=r"d\.json entry 2: id '\.\./x'"):
        load_prompts(str(as_dict))
    as_list = tmp_path / "l.json"
    as_list.write_text(json.dumps([{"id": "ok", "text": "a cat"}, {"id": "a/b", "text": "a dog"}]))
    with pytest.raises(ValueError, match=r"l\.json entry 2: id 'a/b'"):
        load_prompts(str(as_list))


def test_duplicate_ids_are_refused_naming_both_rows(tmp_path):
    path = tmp_path / "p.csv"
    path.write_text("id,text\ncat,a cat\ndog,a dog\ncat,a lighthouse\n")
    with pytest.raises(ValueError, match=rf"^--prompts: {path} lines 2 and 4: the id 'cat' comes twice"):
        load_prompts(str(path))
    as_dict = tmp_path / "d.json"
    as_dict.write_text('{"cat": "a cat", "cat": "a dog"}')
    with pytest.raises(ValueError, match=r"d\.json entries 1 and 2: the id 'cat' comes twice"):
        load_prompts(str(as_dict))
    as_list = tmp_path / "l.json"
    as_list.write_text(json.dumps([{"id": "cat", "text": "a cat"}, {"id": "cat", "text": "a dog"}]))
    with pytest.raises(ValueError, match=r"l\.json entries 1 and 2: the id 'cat' comes twice"):
        load_prompts(str(as_list))
    text = tmp_path / "p.txt"
    text.write_text("a cat\na dog\na cat\n")
    with pytest.raises(ValueError, match=r"p\.txt lines 1 and 3: the id 'file-008bd0f0' comes twice"):
        load_prompts(str(text))


def test_ids_differing_only_in_case_are_refused_naming_both_rows(tmp_path):
    """Their files would be one file on a file system that ignores case (macOS's default)."""
    path = tmp_path / "p.csv"
    path.write_text("id,text\nCat,a cat\ndog,a dog\ncat,a lighthouse\n")
    with pytest.raises(ValueError, match=r"lines 2 and 4: the ids 'Cat' and 'cat' differ only in case"):
        load_prompts(str(path))


@pytest.mark.parametrize("text", [None, 7, ["a cat"]], ids=["null", "number", "list"])
def test_a_json_text_that_is_not_a_string_is_refused(text, tmp_path):
    path = tmp_path / "p.json"
    path.write_text(json.dumps({"dog": "a dog", "cat": text}))
    with pytest.raises(ValueError, match=r"p\.json entry 2: the text of 'cat' is .*; expected a string"):
        load_prompts(str(path))


@pytest.mark.parametrize(
    ("command", "extra"),
    [("teacache-calib record", []), ("teacache-bench sweep", ["--thresholds", "0.1"]),
     ("teacache-bench gapcheck", [])],
)  # fmt: skip
@pytest.mark.parametrize("row", ["../../etc/passwd,a lighthouse", "sub/dir,a lighthouse", "cat,a lighthouse"])
def test_commands_refuse_a_prompt_file_with_a_bad_or_duplicate_id(command, extra, row, tmp_path, monkeypatch,
                                                                   capsys):  # fmt: skip
    prompts = tmp_path / "p.csv"
    prompts.write_text(f"id,text\ncat,a lighthouse\n{row}\n")
    out = tmp_path / "W" / "trav-rec"
    argv = [*extra, "--model", "tiny-flux1", "--prompts", str(prompts), "--seeds", "0", "--out", str(out)]
    line = refused(command, argv, tmp_path, monkeypatch, capsys)
    assert f"--prompts: {prompts} line" in line, line
    assert not (tmp_path / "W").exists() and not (tmp_path / "etc").exists()


def test_a_json_file_of_neither_form_is_refused_naming_it(tmp_path):
    path = tmp_path / "p.json"
    path.write_text(json.dumps("a cat"))
    shapes = r"expected \{id: text\} or \[\{id, text\}\], got str$"
    with pytest.raises(InputTypeError, match=r"^--prompts: .*p\.json: " + shapes):
        load_prompts(str(path))
