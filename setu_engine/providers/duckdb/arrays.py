"""PostgreSQL's text form of a one-dimensional array (`{1,2,NULL}`,
`{"a b","c\\"d"}`), which is how an array column travels (its neutral type
is text, its sql_type `integer[]`), to and from the Python list a DuckDB
LIST takes and gives.

Elements are in PostgreSQL's text output: booleans `t`/`f`, bytea as `\\x`
hex, NaN and Infinity spelled so; a NULL element is an unquoted NULL.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from datetime import UTC, date, datetime, time
from decimal import Decimal
from typing import Any, Protocol
from uuid import UUID

import pyarrow as pa  # type: ignore[import-untyped]


class _Inner(Protocol):
    @property
    def arrow(self) -> pa.DataType: ...


def split(text: str) -> list[str | None]:
    """The raw elements of an array literal; raises ValueError."""
    if not (text.startswith("{") and text.endswith("}")):
        raise ValueError("not an array literal (a bounds prefix or a nested array?)")
    body, items, i = text[1:-1], list[str | None](), 0
    n = len(body)
    if not body.strip():
        return items
    while i <= n:
        if i < n and body[i] == '"':
            out: list[str] = []
            i += 1
            while i < n and body[i] != '"':
                if body[i] == "\\":
                    i += 1
                out.append(body[i : i + 1])
                i += 1
            if i >= n:
                raise ValueError("an unterminated quoted element")
            items.append("".join(out))
            i += 1
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


def _bool(raw: str) -> bool:
    if raw in ("t", "true"):
        return True
    if raw in ("f", "false"):
        return False
    raise ValueError(f"not a boolean: {raw!r}")


def _bytes(raw: str) -> bytes:
    if not raw.startswith("\\x"):
        raise ValueError("bytea not in hex (\\x...)")
    return bytes.fromhex(raw[2:])


def _timestamptz(raw: str) -> datetime:
    value = datetime.fromisoformat(raw)
    if value.tzinfo is None:
        raise ValueError("a timestamptz without an offset")
    return value.astimezone(UTC)


_ELEMENTS: dict[str, Callable[[str], Any]] = {
    "boolean": _bool,
    "smallint": int,
    "integer": int,
    "bigint": int,
    "real": float,
    "double": float,
    "numeric": Decimal,
    "bytes": _bytes,
    "date": date.fromisoformat,
    "time": time.fromisoformat,
    "timestamp": datetime.fromisoformat,
    "timestamptz": _timestamptz,
}


def parser(neutral: str, inner: _Inner) -> Callable[[Any], list[Any]]:
    """Array text → the list a LIST of `inner`'s Arrow type takes; elements
    of a text-stored type (text, uuid, json, exact numeric text) stay text."""
    element = None if inner.arrow == pa.string() else _ELEMENTS.get(neutral)

    def parse(value: Any) -> list[Any]:
        if not isinstance(value, str):
            raise TypeError("an array travels as its text")
        items = split(value)
        if element is None:
            return items
        return [None if raw is None else element(raw) for raw in items]

    return parse


def _quoted(text: str) -> str:
    if text and text.upper() != "NULL" and not any(c in text for c in '{},"\\ \t\n\r'):
        return text
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _element_text(value: Any) -> str:
    if isinstance(value, bool):
        return "t" if value else "f"
    if isinstance(value, float):
        if math.isnan(value):
            return "NaN"
        if math.isinf(value):
            return "Infinity" if value > 0 else "-Infinity"
        return repr(value)
    if isinstance(value, bytes):
        return _quoted("\\x" + value.hex())
    if isinstance(value, datetime):
        if value.tzinfo is not None:
            value = value.astimezone(UTC)
        return _quoted(value.isoformat(sep=" "))
    if isinstance(value, date | time | Decimal | int | UUID):
        return str(value)
    return _quoted(str(value))


def renderer(neutral: str) -> Callable[[Any], str]:
    """A LIST's Python list → PostgreSQL's array text."""

    def render(value: Any) -> str:
        items = ("NULL" if v is None else _element_text(v) for v in value)
        return "{" + ",".join(items) + "}"

    return render
