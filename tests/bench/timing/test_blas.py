"""teacache-bench blas refuses bad input like every other command: one line, exit 2, before any probe runs."""

from __future__ import annotations

from tests.conftest import refused


def test_a_bad_blas_argument_is_one_line(tmp_path, monkeypatch, capsys):
    from bench.timing import blas

    def probe(*_args, **_kwargs):
        raise AssertionError("a probe ran before the arguments were checked")

    monkeypatch.setattr(blas, "measure", probe)
    line = refused("teacache-bench blas", ["--steps", "x"], tmp_path, monkeypatch, capsys)
    assert line.startswith("teacache-bench blas: ") and "--steps" in line and "usage:" not in line
