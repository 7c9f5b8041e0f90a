"""Python source for plain values, laid out the way ``ruff format`` leaves it (line length 120).

Generated modules (the coefficient modules ``teacache-calib emit`` writes, the test tolerances) are committed
and linted like hand-written code, so their literals must already be in the formatter's layout: dicts and
lists one item per line with a trailing comma (the "magic" comma keeps them expanded), tuples on one line
when they fit and one item per line otherwise, strings in double quotes unless that needs more escapes, and
non-finite floats as ``float("inf")``. The coefficient modules lay out their own blocks and take their
scalars and strings from here.
Every output evaluates back to the value it was made from (``evaluate``). Every output is ASCII (other
characters as ``\xe9``, ``\u4e2d``, ``\U0001f600`` escapes): ruff measures a line in display columns from
its own Unicode tables (a wide character counts two, a combining one none, and the tables move with Unicode
versions), while an ASCII line's width is its length, so whether a line fits is decided the same way here.
"""

from __future__ import annotations

import ast
import math
import numbers

from teacache.errors import InputError

LINE_LENGTH = 120
INDENT = "    "
SAFE_CALLS = {"float": float}  # the one call a literal may hold: float("inf"), float("-inf"), float("nan")


def string(text: str) -> str:
    """A str literal as ruff format writes it: double quotes unless the text holds more of them than single;
    ASCII only (see the module docstring)."""
    quote = "'" if text.count('"') > text.count("'") else '"'
    out = []
    for ch in text:
        if ch == "\\" or ch == quote:
            out.append("\\" + ch)
        elif ch in "'\"":
            out.append(ch)
        else:
            out.append(ascii(ch)[1:-1])  # Python's own escapes: newlines, tabs, unprintable and non-ASCII
    return quote + "".join(out) + quote


def scalar(value) -> str:
    """A literal for None, a bool, an int, a float or a str (numpy scalars included)."""
    if value is None or isinstance(value, bool):
        return repr(value)
    if isinstance(value, numbers.Integral):
        return repr(int(value))
    if isinstance(value, numbers.Real):
        value = float(value)
        if math.isnan(value):
            return 'float("nan")'
        if math.isinf(value):
            return 'float("inf")' if value > 0 else 'float("-inf")'
        return repr(value).replace("e+", "e")  # 1e+16 -> 1e16, as the formatter writes exponents
    if isinstance(value, str):
        return string(value)
    raise TypeError(f"no literal for {type(value).__name__} {value!r}")


def _flat(value) -> str | None:
    """The one-line form of a scalar or of a tuple of flat items; None for anything that is always expanded."""
    if isinstance(value, tuple):
        items = [_flat(v) for v in value]
        if any(item is None for item in items):
            return None
        return "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"
    if isinstance(value, dict | list):
        return "{}" if value == {} else "[]" if value == [] else None
    if hasattr(value, "item") and not isinstance(value, str | bytes):  # a numpy scalar
        value = value.item()
    return scalar(value)


def literal(value, indent: int = 0, prefix: int = 0, suffix: int = 0) -> str:
    """Source for ``value`` starting at column ``prefix`` of a line indented ``indent`` levels, followed by
    ``suffix`` characters (a trailing comma): one line when that fits (tuples and scalars), else expanded."""
    flat = _flat(value)
    if flat is not None and (prefix + len(flat) + suffix <= LINE_LENGTH or not isinstance(value, tuple)):
        return flat
    inner = INDENT * (indent + 1)
    if isinstance(value, dict):
        lines = []
        for key, item in value.items():
            head = f"{inner}{scalar(key)}: "
            lines.append(head + literal(item, indent + 1, len(head), 1) + ",")
        return "{\n" + "\n".join(lines) + "\n" + INDENT * indent + "}"
    open_, close = ("(", ")") if isinstance(value, tuple) else ("[", "]")
    lines = [inner + literal(item, indent + 1, len(inner), 1) + "," for item in value]
    return open_ + "\n" + "\n".join(lines) + "\n" + INDENT * indent + close


def assignment(name: str, value) -> str:
    """``NAME = <literal>`` as the formatter lays it out."""
    head = f"{name} = "
    text = literal(value, 0, len(head), 0)
    if "\n" not in text and len(head) + len(text) > LINE_LENGTH and len(INDENT) + len(text) <= LINE_LENGTH:
        return f"{head}(\n{INDENT}{text}\n)"  # an atom too long for the line but not for its own: parenthesized
    return head + text


def evaluate(node: ast.expr):
    """The value of a literal this module writes: containers, scalars, signed numbers and float("inf")."""
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Tuple | ast.List):
        items = [evaluate(item) for item in node.elts]
        return tuple(items) if isinstance(node, ast.Tuple) else items
    if isinstance(node, ast.Dict) and None not in node.keys:
        return {evaluate(k): evaluate(v) for k, v in zip(node.keys, node.values, strict=True)}
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
        number = evaluate(node.operand)
        if isinstance(number, int | float) and not isinstance(number, bool):
            return -number if isinstance(node.op, ast.USub) else number
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in SAFE_CALLS
        and len(node.args) == 1
        and not node.keywords
        and isinstance(node.args[0], ast.Constant)
        and isinstance(node.args[0].value, str)
    ):
        return SAFE_CALLS[node.func.id](node.args[0].value)
    raise InputError(f"not a literal: {ast.unparse(node)[:80]}")
