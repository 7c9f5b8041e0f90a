"""teacache-calib drift, code half: AST fingerprints, the hooked-function list, comparison with the table."""

from __future__ import annotations

from importlib import metadata

import pytest

from calib.drift import code, hooked

PLAIN = '''
class Block:
    def __call__(self, x):
        """Docstring."""
        return x + 1  # a comment
'''
REFORMATTED = '''
class Block:
    def __call__(self,
                 x):
        """Another docstring, longer."""

        return (x + 1)
'''
CHANGED = """
class Block:
    def __call__(self, x):
        return x + 2
"""


def test_fingerprint_ignores_docstrings_comments_and_layout_but_not_code():
    assert code.fingerprint(PLAIN, "Block.__call__") == code.fingerprint(REFORMATTED, "Block.__call__")
    assert code.fingerprint(PLAIN, "Block.__call__") != code.fingerprint(CHANGED, "Block.__call__")


def test_fingerprint_of_what_a_module_does_not_define_is_absent():
    assert code.fingerprint(PLAIN, "Block.other") is code.ABSENT
    assert code.fingerprint(PLAIN, "Other.__call__") is code.ABSENT
    assert code.fingerprint(None, "Block.__call__") is code.ABSENT


def test_adapter_functions_come_from_imports_and_the_attributes_the_adapter_names():
    adapter = (
        "from mflux.fake.blocks import Block\n"
        "def signal(tr):\n"
        "    guarded = getattr(Block, 'maybe', None)  # a guard on what a release has\n"
        "    return Block.helper(tr) + tr._walk()\n"
    )
    mflux_source = (
        "class Block:\n"
        "    def __init__(self): pass\n"
        "    def __call__(self, x): return x\n"
        "    def helper(self): pass\n"
        "    def _walk(self): pass\n"
        "    def maybe(self): pass\n"
        "    def unused(self): pass\n"
    )
    found = hooked.adapter_functions(adapter, lambda module: mflux_source if module == "mflux.fake.blocks" else None)
    assert found == {f"mflux.fake.blocks:Block.{m}" for m in ("__init__", "__call__", "helper", "_walk", "maybe")}


def test_every_hooked_function_exists_in_the_installed_mflux():
    """A stale READ_THROUGH entry (a class mflux renamed or moved) fails here, not silently in the table; what
    the table says this release lacks (``stream_t_emb`` before 0.22, read through a guard) may be absent."""
    read = code.installed_reader()
    by_family = hooked.hooked_functions(read)
    prints = code.fingerprints(code.all_functions(by_family), read)
    pipelines = {f for fam in by_family for f in (hooked.pipeline_functions(fam) if fam != hooked.ALL_FAMILIES else ())}
    version = metadata.version("mflux")
    table = code.load_table()["functions"]
    guarded = {f for f, history in table.items() if version in history and history[version] is code.ABSENT}
    missing = [f for f, value in prints.items() if value is code.ABSENT and f not in pipelines | guarded]
    assert missing == []
    for expected in (
        "mflux.models.flux.model.flux_transformer.transformer:Transformer.compute_text_embeddings",
        "mflux.models.z_image.model.z_image_transformer.transformer:ZImageTransformer.stream_t_emb",
        "mflux.models.flux.model.flux_transformer.ada_layer_norm_continuous:AdaLayerNormContinuous.__init__",
    ):
        assert expected in guarded or any(expected in functions for functions in by_family.values())


def test_the_committed_table_matches_the_installed_release():
    table = code.load_table()
    version = metadata.version("mflux")
    if version not in table["releases"]:
        pytest.skip(f"mflux {version} is not in the table")
    report = code.installed_report(table)
    assert report["verified"] and report["nearest"] == version
    assert report["changed"] == [] and report["untracked"] == []


def test_nearest_release_and_where_a_function_last_changed():
    releases = ["0.21.0", "0.22.0", "0.23.0", "0.24.0"]
    assert code.nearest_release("0.22.0", releases) == "0.22.0"
    assert code.nearest_release("0.25.1", releases) == "0.24.0"
    assert code.nearest_release("0.22.5", releases) == "0.22.0"
    assert code.nearest_release("0.20.0", releases) == "0.21.0"
    history = {"0.21.0": "a", "0.22.0": "b", "0.23.0": "b", "0.24.0": "b"}
    assert code.last_change(history, releases, "0.24.0") == "0.22.0"
    assert code.last_change(history, releases, "0.21.0") is None
    assert code.last_change(dict.fromkeys(releases, "a"), releases, "0.24.0") is None


def test_compare_names_each_function_that_differs_from_the_nearest_release():
    table = {
        "releases": ["0.21.0", "0.22.0"],
        "functions": {
            "m:A.f": {"0.21.0": "old", "0.22.0": "new"},
            "m:B.g": {"0.21.0": "same", "0.22.0": "same"},
            "m:C.h": {"0.21.0": None, "0.22.0": "added"},
        },
    }
    hooked_by_family = {"*": set(), "flux1": {"m:A.f", "m:B.g"}, "zimage": {"m:C.h"}}
    installed = {"m:A.f": "old", "m:B.g": "same", "m:C.h": None}  # a release that went back on two of them
    report = code.compare(installed, table, "0.23.0", hooked_by_family)
    assert report["nearest"] == "0.22.0" and not report["verified"]
    changed = {c["function"]: c for c in report["changed"]}
    assert set(changed) == {"m:A.f", "m:C.h"}
    assert changed["m:A.f"]["same_as"] == ["0.21.0"] and changed["m:A.f"]["last_changed"] == "0.22.0"
    assert report["families"] == {"flux1": ["m:A.f"], "zimage": ["m:C.h"]}
    assert any("absent here" in line for line in report["lines"])
