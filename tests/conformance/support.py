"""What the conformance checks share: rows as batches, writing and reading a
stream through a place's connector, and a value comparison that is exact
(Decimal digits, the sign of -0.0, NaN as NaN, aware datetimes, the types
of JSON's values)."""

from __future__ import annotations

import math
import struct
import uuid
from collections.abc import AsyncIterator, Sequence
from datetime import date, datetime, time
from decimal import Decimal
from typing import Any

from setu_engine.kinds import WriteMode
from setu_engine.staged.markers import LoadMarker
from setu_engine.support.closing import closing
from setu_engine.values.types import Batch, Column, Row, Stream, find_stream
from tests.conformance.harness import Place

PEOPLE = [Column("id", "bigint", nullable=False), Column("name", "text")]


async def batches(*items: Batch) -> AsyncIterator[Batch]:
    for batch in items:
        yield batch


async def write(
    place: Place,
    stream: str,
    columns: Sequence[Column],
    rows: Batch,
    mode: WriteMode,
    key: Sequence[str] = ("id",),
    marker: LoadMarker | None = None,
) -> int:
    connector = await place.connect()
    try:
        return await connector.write(stream, columns, batches(rows), mode, list(key), marker=marker)
    finally:
        await connector.close()


async def discovered(place: Place, stream: str) -> Stream:
    connector = await place.connect()
    try:
        return find_stream(await connector.discover(), stream)
    finally:
        await connector.close()


async def read_back(place: Place, stream: str, batch_rows: int = 1000) -> list[Row]:
    """The stream's rows as the provider reads them, sorted by their first column."""
    connector = await place.connect()
    try:
        found = find_stream(await connector.discover(), stream)
        async with closing(connector.read(found, batch_rows)) as reading:
            rows = [row async for batch in reading for row in batch]
    finally:
        await connector.close()
    return sorted(rows, key=lambda row: row[0])


def marker(stream: str) -> LoadMarker:
    return LoadMarker(str(uuid.uuid4()), stream)


def same(a: Any, b: Any, type_: str = "") -> bool:
    """Whether b is exactly a: same type, same digits, same sign of zero; a
    real the same float4 (docs/data-types.md: the double of the float4, or
    of its shortest digits)."""
    if a is None or b is None:
        return a is b
    if type_ == "real" and isinstance(a, float) and isinstance(b, float):
        if math.isnan(a) or math.isnan(b):
            return math.isnan(a) and math.isnan(b)
        return struct.pack("<f", a) == struct.pack("<f", b)
    if isinstance(a, uuid.UUID):
        return isinstance(b, uuid.UUID) and a == b  # asyncpg's UUID is a subclass
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        if math.isnan(a) or math.isnan(b):
            return math.isnan(a) and math.isnan(b)
        return a == b and math.copysign(1, a) == math.copysign(1, b)
    if isinstance(a, Decimal):
        return bool(a.as_tuple() == b.as_tuple())
    if isinstance(a, datetime):
        return bool(a == b) and (a.utcoffset() is None) == (b.utcoffset() is None)
    if isinstance(a, dict):
        return bool(a.keys() == b.keys()) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, bool | int | str | bytes | date | time | uuid.UUID):
        return bool(a == b)
    return a is b or bool(a == b)  # the markers (INFINITY, JSON_NULL) are singletons


def same_rows(a: Sequence[Row], b: Sequence[Row]) -> bool:
    """Row by row, value by value (NaN is NaN)."""
    return len(a) == len(b) and all(
        len(x) == len(y) and all(same(u, v) for u, v in zip(x, y, strict=True))
        for x, y in zip(a, b, strict=True)
    )


def show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else f"{text[:60]}… ({len(text)} characters)"
