"""Markdown from jinja2 templates (``bench/report/templates/*.md.j2``): the environment, number formats and table rows.

The reports are templates filled from plain data, so their layout reads as Markdown and a number's format
is named once. The environment keeps every newline a template writes (no autoescape, trailing newline kept)
so a rebuild from the same data gives the same bytes.
"""

from __future__ import annotations

import math
from functools import cache

from jinja2 import Environment

from teacache.templating import template_environment

ALIGN = {"l": "---", "r": "---:", "c": ":---:"}


def num(value, digits: int = 3, kind: str = "g") -> str:
    """A number for a table: ``digits`` significant (``g``) or decimals (``f``); NaN/None -> n/a."""
    if value is None:
        return "n/a"
    value = float(value)
    if math.isnan(value):
        return "n/a"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    if kind == "g" and abs(value) >= 1e4:
        return f"{value:.3e}"
    return f"{value:.{digits}{kind}}"


def ratio(value) -> str:
    """A speedup ratio: two decimals and an x."""
    text = num(value, 2, "f")
    return text if text == "n/a" else f"{text}x"


def sig(value, digits: int = 4) -> str:
    """``digits`` significant digits; strings pass through; None, "" and NaN -> n/a."""
    if value is None or value == "":
        return "n/a"
    if isinstance(value, str):
        return value
    value = float(value)
    if math.isnan(value):
        return "n/a"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return f"{value:.{digits}g}"


def pct(value) -> str:
    """A signed fraction as a percentage with one decimal (+4.2%)."""
    return "n/a" if value is None else f"{100 * float(value):+.1f}%"


def share(value) -> str:
    """A fraction as a whole percentage (78%)."""
    return "n/a" if value is None else f"{100 * float(value):.0f}%"


def value(item) -> str:
    """A constant as a table shows it: floats to 6 significant digits, tuples and lists in parentheses."""
    if isinstance(item, float):
        return sig(item, 6)
    if isinstance(item, tuple | list):
        return "(" + ", ".join(value(v) for v in item) + ")"
    return "n/a" if item is None else str(item)


def cell(item) -> str:
    """A provenance field: a list joined with commas, anything else as ``value`` writes it."""
    return ", ".join(map(str, item)) if isinstance(item, list) else value(item)


def spec(item, format_spec: str) -> str:
    """Python's format(): ``{{ t|spec('g') }}`` is ``f"{t:g}"``."""
    return format(item, format_spec)


def capfirst(text: str) -> str:
    """The first letter upper case, the rest untouched (jinja's ``capitalize`` lowers the rest)."""
    return text[:1].upper() + text[1:]


def _flat(items: tuple) -> list:
    """Cells given one by one or as lists (jinja calls take no positional argument after ``*cells``)."""
    return [c for item in items for c in (item if isinstance(item, list | tuple) else (item,))]


def header(*names, align: str | None = None) -> str:
    """A table's header row and its separator; ``align`` is one letter per column (l, r, c), default l."""
    names = _flat(names)
    align = align or "l" * len(names)
    if len(align) != len(names):
        raise ValueError(f"align {align!r} has {len(align)} letters for {len(names)} columns")
    return "| " + " | ".join(names) + " |\n|" + "|".join(ALIGN[a] for a in align) + "|"


def row(*cells) -> str:
    """One table row (cells one by one or as lists); a | inside a cell is escaped so it cannot split the cell."""
    return "| " + " | ".join(str(c).replace("|", "\\|") for c in _flat(cells)) + " |"


FILTERS = {
    "num": num,
    "ratio": ratio,
    "sig": sig,
    "pct": pct,
    "share": share,
    "value": value,
    "cell": cell,
    "spec": spec,
    "capfirst": capfirst,
}


@cache
def environment() -> Environment:
    env = template_environment("bench.report")
    env.filters.update(FILTERS)
    env.globals.update(header=header, row=row)
    return env


def render(template: str, **context) -> str:
    """Fill ``bench/report/templates/<template>`` with ``context``."""
    return environment().get_template(template).render(**context)
