"""PostgreSQL's text form of a one-dimensional array (`{1,2,NULL}`,
`{"a b","c\\"d"}`), to and from a list of neutral values: how an array
column, which travels as that text, becomes a Parquet list and back.

Elements are in PostgreSQL's own text output (booleans `t`/`f`, bytea as
`\\x` hex); a NULL element is an unquoted NULL, and an element is quoted
only where PostgreSQL would quote it.
"""

from __future__ import annotations

import math
import re
from datetime import date, datetime, time
from typing import Any

from setu_engine.providers.files.codec import from_text


def parse(text: str, element: str) -> list[Any]:
    """The elements of an array's text as values of the neutral type
    `element`; raises ValueError."""
    if not (text.startswith("{") and text.endswith("}")):
        raise ValueError("not an array literal (a bounds prefix or a nested array?)")
    return [None if raw is None else _element(raw, element) for raw in _split(text[1:-1])]


def _split(body: str) -> list[str | None]:
    items: list[str | None] = []
    i, n = 0, len(body)
    while i < n:
        if body[i] == '"':
            i, item = _quoted(body, i + 1)
            items.append(item)
        else:
            end = body.find(",", i)
            end = n if end < 0 else end
            raw = body[i:end].strip()
            if raw.startswith("{"):
                raise ValueError("a multi-dimensional array (only one dimension is kept)")
            items.append(None if raw.upper() == "NULL" else raw)
            i = end
        if i < n and body[i] != ",":
            raise ValueError(f"unexpected {body[i]!r} in an array")
        i += 1
    return items


def _quoted(body: str, i: int) -> tuple[int, str]:
    out: list[str] = []
    while i < len(body):
        char = body[i]
        if char == "\\":
            out.append(body[i + 1 : i + 2])
            i += 2
        elif char == '"':
            return i + 1, "".join(out)
        else:
            out.append(char)
            i += 1
    raise ValueError("an unclosed quote in an array")


def _element(raw: str, element: str) -> Any:
    if element == "bytes":
        if not raw.startswith("\\x"):
            raise ValueError("a bytea element not in hex")
        return bytes.fromhex(raw[2:])
    return from_text(raw, element)


def literal(values: list[Any]) -> str:
    """The array text PostgreSQL prints for a list of neutral values."""
    return "{" + ",".join(_quote(v) for v in values) + "}"


def _quote(value: Any) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        text = "t" if value else "f"
    elif isinstance(value, bytes):
        text = "\\x" + value.hex()
    elif isinstance(value, float) and not math.isfinite(value):
        text = "NaN" if value != value else ("Infinity" if value > 0 else "-Infinity")
    elif isinstance(value, date | datetime | time):
        text = value.isoformat()
    else:
        text = str(value)
    if text and text.upper() != "NULL" and not _SPECIAL.search(text):
        return text
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


# What PostgreSQL quotes in an array element.
_SPECIAL = re.compile(r'[{}",\\\s]')
