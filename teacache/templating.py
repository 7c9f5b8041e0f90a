"""Markdown from jinja2 templates kept beside the code that fills them (``<package>/templates/*.md.j2``)."""

from __future__ import annotations

from jinja2 import Environment, PackageLoader, StrictUndefined


def template_environment(package: str) -> Environment:
    """The templates of ``package``: a missing value is an error, block tags leave no blank lines, no escaping."""
    return Environment(
        loader=PackageLoader(package, "templates"),
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        autoescape=False,
    )
