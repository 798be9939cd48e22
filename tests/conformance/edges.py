"""The edge values of every neutral type, each named as a provider's
capabilities declare what they cannot keep ("<type>:<edge>",
setu_engine/capabilities.py EDGES), and the table the round trip writes:
one column per type, row k holding each type's k-th edge value."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import UTC, date, datetime, time, timedelta, timezone
from decimal import Decimal
from typing import Any

from setu_engine.capabilities import Values
from setu_engine.values.special import INFINITY, JSON_NULL, MINUS_INFINITY
from setu_engine.values.types import Column, Row

UNICODE = (
    "Latin é ñ ß, Ελληνικά, Кириллица, العربية, עברית, हिन्दी, 日本語, 한국어, "
    "emoji 🚀👩‍👩‍👧, e\u0301 combining"
)
LONG = ("lorem ipsum dolor sit amet " * 40_000)[: 1 << 20]  # 1 MB
IST = timezone(timedelta(hours=5, minutes=30))

# type -> [(edge, value)]; an edge named "" is no edge a provider may declare.
EDGES: dict[str, list[tuple[str, Any]]] = {
    "boolean": [("", True), ("", False)],
    "smallint": [("min", -(2**15)), ("max", 2**15 - 1), ("", 0)],
    "integer": [("min", -(2**31)), ("max", 2**31 - 1), ("", 0)],
    "bigint": [("min", -(2**63)), ("max", 2**63 - 1), ("", 0)],
    "real": [
        ("nan", float("nan")),
        ("infinity", float("inf")),
        ("infinity", float("-inf")),
        ("-0", -0.0),
        ("max", 3.4028235e38),  # a real travels as its shortest digits (docs/data-types.md)
        ("min", 1e-45),
        ("", 0.5),
    ],
    "double": [
        ("nan", float("nan")),
        ("infinity", float("inf")),
        ("infinity", float("-inf")),
        ("-0", -0.0),
        ("max", 1.7976931348623157e308),
        ("min", 5e-324),
        ("", 0.1),
    ],
    "numeric": [
        ("nan", Decimal("NaN")),
        ("infinity", Decimal("Infinity")),
        ("infinity", Decimal("-Infinity")),
        ("big", Decimal("123456789012345678901234567890.0123456789")),
        ("big", Decimal("-0.0000000001")),
        ("scale", Decimal("1.10")),
        ("", Decimal("-42")),
    ],
    "text": [
        ("empty", ""),
        ("", UNICODE),
        ("", LONG),
        ("", ' leading and trailing spaces, comma, "quote"\nnewline\ttab '),
        ("", "NULL"),
    ],
    "bytes": [("empty", b""), ("", b"\x00\xff\x00"), ("", bytes(range(256)))],
    "date": [
        ("infinity", INFINITY),
        ("infinity", MINUS_INFINITY),
        ("min", date(1, 1, 1)),
        ("max", date(9999, 12, 31)),
        ("", date(2024, 2, 29)),
    ],
    "time": [("min", time(0, 0)), ("max", time(23, 59, 59, 999999)), ("", time(12, 30, 0, 5))],
    "timestamp": [
        ("infinity", INFINITY),
        ("infinity", MINUS_INFINITY),
        ("min", datetime(1, 1, 1)),
        ("max", datetime(9999, 12, 31, 23, 59, 59, 999999)),
        ("", datetime(2024, 1, 2, 3, 4, 5, 6)),
    ],
    "timestamptz": [
        ("infinity", INFINITY),
        ("infinity", MINUS_INFINITY),
        ("min", datetime(1, 1, 1, tzinfo=UTC)),
        ("max", datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC)),
        ("", datetime(2024, 1, 2, 3, 4, 5, 6, tzinfo=IST)),
    ],
    "uuid": [("", uuid.UUID("12345678-1234-5678-1234-567812345678")), ("", uuid.UUID(int=0))],
    "json": [
        ("", {"a": [1, "two", None], "é": {"x": True}}),
        ("", JSON_NULL),
        ("", []),
        ("", "a string"),
        ("", 0),
        ("", {"nested": {"deep": [[], {}, ""]}}),
    ],
}

COLUMNS = [Column("id", "bigint", nullable=False)] + [Column(f"c_{t}", t) for t in EDGES]


def name(type_: str, edge: str) -> str:
    return f"{type_}:{edge}"


# What a value reads back as where a provider declares the edge lost.
LOSSES: dict[str, Callable[[Any], Any]] = {
    "-0": lambda value: 0.0,
    "empty": lambda value: None,
    # The same number, without the scale it was written with.
    "scale": lambda value: value.normalize(),
}


def table(values: Values) -> tuple[list[Row], dict[tuple[int, str], Any]]:
    """The edge table without what `values` refuses (row 1 all NULL), and
    what each cell must read back as: (id, column) -> value."""
    kept = {
        t: [(e, v) for e, v in edges if not e or name(t, e) not in values.refuses]
        for t, edges in EDGES.items()
    }
    height = max(len(v) for v in kept.values()) + 1
    rows: list[Row] = []
    expected: dict[tuple[int, str], Any] = {}
    for index in range(height):
        row: list[Any] = [index + 1]
        for type_, cells in kept.items():
            edge, value = cells[index - 1] if 0 < index <= len(cells) else ("", None)
            row.append(value)
            lost = edge and name(type_, edge) in values.loses
            expected[(index + 1, f"c_{type_}")] = LOSSES[edge](value) if lost else value
        rows.append(tuple(row))
    return rows, expected


def refused(values: Values) -> list[tuple[str, Any]]:
    """(type, value) of every edge value `values` refuses."""
    return [
        (t, v) for t, edges in EDGES.items() for e, v in edges if e and name(t, e) in values.refuses
    ]
