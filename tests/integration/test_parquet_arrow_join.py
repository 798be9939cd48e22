"""A Parquet upsert or merge keyed on one column joins on Arrow tables
(setu_engine/providers/files/arrow_join.py): no row of either side becomes
Python values, and the file it lands holds what the row join (merge.py)
lands, row for row: old rows replaced in place, a key written twice once
(its last row, where it first came), a key the file holds twice replaced
once, new keys after the old rows in the order they first came."""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import AsyncIterator
from dataclasses import replace
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from setu_engine.kinds import WriteMode
from setu_engine.movement import transfer
from setu_engine.providers import get_provider
from setu_engine.providers.files import arrow_join, merge
from setu_engine.providers.files import connector as files_connector
from setu_engine.providers.files import parquet as files_parquet
from setu_engine.values.types import Batch, Column, Row

KEYS: dict[str, tuple[Column, Any]] = {
    "bigint": (Column("id", "bigint", nullable=False), st.integers(-2, 5)),
    "text": (Column("id", "text", nullable=False), st.sampled_from(["a", "b", "é", "", "日本"])),
    "numeric": (
        Column("id", "numeric", nullable=False, sql_type="numeric(6,2)"),
        st.sampled_from([Decimal("1.00"), Decimal("1.50"), Decimal("-2.25"), Decimal("0.00")]),
    ),
}
VALUE = Column("v", "integer")


def expected(old: list[Row], written: list[Row], keep_old: bool) -> list[Row]:
    """What an upsert (keep_old) or merge lands, by its definition."""
    last: dict[Any, Row] = {}
    for row in written:
        last[row[0]] = row  # a dict keeps the first place of a key
    out: list[Row] = []
    taken: set[Any] = set()
    for row in old:
        if row[0] in last:
            if row[0] not in taken:
                taken.add(row[0])
                out.append(last[row[0]])
        elif keep_old:
            out.append(row)
    return out + [row for key, row in last.items() if key not in taken]


async def batches(parts: list[Batch]) -> AsyncIterator[Batch]:
    for part in parts:
        yield part


async def land(
    folder: Path, columns: list[Column], old: list[Batch], written: list[Batch], mode: WriteMode
) -> list[Row]:
    files = await get_provider("file").connect({"url": str(folder), "format": "parquet"})
    try:
        await files.write("t", columns, batches(old), WriteMode.OVERWRITE, ["id"])
        assert await files.write("t", columns, batches(written), mode, ["id"]) == sum(
            map(len, written)
        )
        stream = transfer.select_streams(await files.discover(), ["t"])[0]
        stream = replace(stream, columns=tuple(columns))
        return [row async for batch in files.read(stream, 7) for row in batch]
    finally:
        await files.close()


def rows_of(key: Any, values: Any) -> Any:
    return st.lists(st.lists(st.tuples(key, values), max_size=6), max_size=4)


@pytest.mark.parametrize("kind", sorted(KEYS))
@pytest.mark.parametrize("path", ["arrow", "rows"])
@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data())
def test_a_keyed_rewrite_lands_what_the_join_defines(
    monkeypatch: pytest.MonkeyPatch, kind: str, path: str, data: st.DataObject
) -> None:
    key, keys = KEYS[kind]
    values = st.none() | st.integers(-(2**31), 2**31 - 1)
    old = data.draw(rows_of(keys, values), "old")
    written = data.draw(rows_of(keys, values), "written")
    mode = data.draw(st.sampled_from([WriteMode.UPSERT, WriteMode.MERGE]), "mode")
    # Old batches of three rows and new keys gathered three at a time: a
    # key met again in a later batch, a take over several batches.
    monkeypatch.setattr(files_parquet, "READ_ROWS", 3)
    monkeypatch.setattr(files_parquet, "JOIN_ROWS", 3)
    monkeypatch.setattr(arrow_join, "REST_ROWS", 3)
    if path == "rows":
        monkeypatch.setattr(files_connector, "_arrow_joinable", lambda *_: False)
    with tempfile.TemporaryDirectory() as folder:
        back = asyncio.run(land(Path(folder), [key, VALUE], old, written, mode))
    flat_old = [row for part in old for row in part]
    flat_written = [row for part in written for row in part]
    assert back == expected(flat_old, flat_written, mode is WriteMode.UPSERT)


async def test_a_one_column_key_joins_without_the_row_join(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refused(*_: Any, **__: Any) -> Any:
        raise AssertionError("the row join ran")

    monkeypatch.setattr(merge, "spill", refused)
    monkeypatch.setattr(files_parquet, "parquet_keyed", refused)
    back = await land(
        tmp_path,
        [KEYS["bigint"][0], VALUE],
        [[(1, 10), (2, 20)], [(3, 30)]],
        [[(2, 200), (4, 400)]],
        WriteMode.UPSERT,
    )
    assert back == [(1, 10), (2, 200), (3, 30), (4, 400)]


async def test_a_key_of_two_columns_keeps_the_row_join(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spilled: list[int] = []
    spill = merge.spill

    async def counted(*args: Any, **kwargs: Any) -> Any:
        spilled.append(1)
        return await spill(*args, **kwargs)

    monkeypatch.setattr(merge, "spill", counted)
    columns = [Column("a", "bigint", nullable=False), Column("b", "text", nullable=False)]
    files = await get_provider("file").connect({"url": str(tmp_path), "format": "parquet"})
    try:
        await files.write("t", columns, batches([[(1, "x"), (1, "y")]]), WriteMode.OVERWRITE, [])
        await files.write("t", columns, batches([[(1, "y")]]), WriteMode.UPSERT, ["a", "b"])
    finally:
        await files.close()
    assert spilled == [1]


async def test_an_old_file_without_a_new_column_reads_it_as_null(tmp_path: Path) -> None:
    key = KEYS["bigint"][0]
    files = await get_provider("file").connect({"url": str(tmp_path), "format": "parquet"})
    try:
        await files.write("t", [key], batches([[(1,), (2,)]]), WriteMode.OVERWRITE, ["id"])
        await files.write("t", [key, VALUE], batches([[(2, 20)]]), WriteMode.UPSERT, ["id"])
        stream = transfer.select_streams(await files.discover(), ["t"])[0]
        back = [row async for batch in files.read(stream, 10) for row in batch]
    finally:
        await files.close()
    assert back == [(1, None), (2, 20)]


async def test_an_old_file_another_writer_typed_otherwise_joins_as_read(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    # int32 and int64 where the stream says bigint and integer: every old
    # batch and the old keys are converted as a read converts them.
    old = pa.table({"id": pa.array([1, 2, 3], pa.int32()), "v": pa.array([10, 20, 30], pa.int64())})
    pq.write_table(old, tmp_path / "t.parquet")
    back = await land_on(tmp_path, [[(3, 300), (2, 200), (9, 900)]], WriteMode.UPSERT)
    assert back == [(1, 10), (2, 200), (3, 300), (9, 900)]


async def land_on(folder: Path, written: list[Batch], mode: WriteMode) -> list[Row]:
    columns = [KEYS["bigint"][0], VALUE]
    files = await get_provider("file").connect({"url": str(folder), "format": "parquet"})
    try:
        await files.write("t", columns, batches(written), mode, ["id"])
        stream = transfer.select_streams(await files.discover(), ["t"])[0]
        stream = replace(stream, columns=tuple(columns))
        return [row async for batch in files.read(stream, 7) for row in batch]
    finally:
        await files.close()
