"""An upsert or merge into a file joins the written rows with the old ones
by key (setu_engine/providers/files/merge.py) in every format: old rows
replaced in place and kept ones read back exactly, a key written twice
lands once (the last row, in its first place), a key the file holds twice
is replaced once, new keys come after in the order they were written."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import replace
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

import pytest

from setu_engine.kinds import WriteMode
from setu_engine.movement import transfer
from setu_engine.providers import get_provider
from setu_engine.values.types import Batch, Column, Row

COLUMNS = [
    Column("id", "bigint", nullable=False),
    Column("amount", "numeric", sql_type="numeric(12,2)"),
    Column("ratio", "double"),
    Column("at", "timestamptz"),
    Column("note", "text"),
]
WHEN = datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)
# Old rows 1..6 (key 4 twice); kept ones hold values a float would round.
OLD: list[Row] = [
    (1, Decimal("0.10"), 0.1, WHEN, "one"),
    (2, Decimal("2.00"), None, None, ""),
    (3, Decimal("-3.33"), 1e300, WHEN, 'a "quote", a comma'),
    (4, Decimal("4.00"), 4.0, WHEN, "four"),
    (5, None, -0.5, None, None),
    (4, Decimal("4.40"), 4.4, WHEN, "four again"),
    (6, Decimal("6.00"), 6.0, WHEN, "six"),
]
WRITTEN: list[list[Row]] = [
    [(4, Decimal("40.00"), 40.0, WHEN, "FOUR"), (8, Decimal("8.00"), 8.0, WHEN, "EIGHT")],
    [(2, Decimal("20.00"), 2.5, WHEN, "TWO"), (7, None, None, None, "SEVEN")],
    [(8, Decimal("88.00"), 88.0, None, "EIGHT, last")],
]
UPSERTED: list[Row] = [
    OLD[0],
    WRITTEN[1][0],
    OLD[2],
    WRITTEN[0][0],
    OLD[4],
    OLD[6],
    WRITTEN[2][0],  # key 8: its last row, where it first came
    WRITTEN[1][1],
]
MERGED = [WRITTEN[1][0], WRITTEN[0][0], WRITTEN[2][0], WRITTEN[1][1]]


async def batches(*parts: Batch) -> AsyncIterator[Batch]:
    for part in parts:
        yield part


@pytest.mark.parametrize("fmt", ["jsonl", "parquet", "csv"])
@pytest.mark.parametrize(
    ("mode", "expected"), [(WriteMode.UPSERT, UPSERTED), (WriteMode.MERGE, MERGED)]
)
async def test_the_join_replaces_keeps_and_appends_by_key(
    tmp_path: Path, fmt: str, mode: WriteMode, expected: list[Row]
) -> None:
    files = await get_provider("file").connect({"url": str(tmp_path), "format": fmt})
    try:
        await files.write("t", COLUMNS, batches(OLD[:3], OLD[3:]), WriteMode.OVERWRITE, ["id"])
        written = await files.write("t", COLUMNS, batches(*WRITTEN), mode, ["id"])
        assert int(written) == 5
        stream = transfer.select_streams(await files.discover(), ["t"])[0]
        stream = replace(stream, columns=tuple(COLUMNS))
        back = [row async for batch in files.read(stream, 3) for row in batch]
    finally:
        await files.close()
    if fmt == "csv":  # CSV has no NULL apart from the empty field
        expected = [tuple(None if v == "" else v for v in row) for row in expected]
    assert back == expected
