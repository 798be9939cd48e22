"""PostgreSQL → a Parquet file direct goes by CSV that PostgreSQL renders
and Arrow's C++ reader parses into the file's columns (capabilities
csv_out / csv_in; setu_engine/providers/files/parquet_csv.py): the path is
taken for the columns it reads exactly, every edge value of those types
lands as the rows path lands it, a value that does not fit is the
ValueFault naming column and row, a stream with another column takes the
rows path, and an upsert from CSV matches by key."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Sequence
from decimal import Decimal
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from setu_engine.errors import ValueFault
from setu_engine.kinds import CopyBatch, WriteMode
from setu_engine.movement import transfer
from setu_engine.operators.chain import parse_spec
from setu_engine.providers import get_provider
from setu_engine.providers.files.connector import CAPABILITIES
from setu_engine.providers.postgres import PROVIDER as POSTGRES
from setu_engine.staged.markers import LoadIdentity
from setu_engine.values.types import Column, Row, Stream
from tests.conformance import edges
from tests.conformance.support import same
from tests.databases import postgres_config, scratch_database

# The edge columns whose types the CSV path takes (bare numeric, real,
# bytes, time, uuid and json take the rows path: parquet_csv.py).
CSV_TYPES = (
    "boolean",
    "smallint",
    "integer",
    "bigint",
    "double",
    "text",
    "date",
    "timestamp",
    "timestamptz",
)
COLUMNS = [c for c in edges.COLUMNS if c.name == "id" or c.type in CSV_TYPES]
PARQUET = dict(CAPABILITIES.values_by_format)["parquet"]


class Quiet:
    async def extracted(self, stream: str, rows: int) -> None:
        return None

    async def loaded(self, stream: str, rows: int) -> None:
        return None


@pytest.fixture
async def source_url(pg_server_url: str) -> AsyncIterator[str]:
    async with scratch_database(pg_server_url, "setu_pq_csv") as url:
        yield url


async def _edge_table(url: str) -> tuple[list[Row], dict[tuple[int, str], Any]]:
    """The edge table of the CSV path's types, without what Parquet refuses."""
    rows, expected = edges.table(PARQUET)
    keep = [i for i, c in enumerate(edges.COLUMNS) if c in COLUMNS]
    rows = [tuple(row[i] for i in keep) for row in rows]
    source = await POSTGRES.connect(postgres_config(url))
    try:

        async def one() -> AsyncIterator[list[Row]]:
            yield rows

        await source.write("edges", COLUMNS, one(), WriteMode.OVERWRITE, ("id",))
    finally:
        await source.close()
    return rows, expected


async def _copy(
    url: str, folder: Path, streams: Sequence[str], mode: WriteMode = WriteMode.OVERWRITE
) -> tuple[list[CopyBatch], list[transfer.StreamTotals]]:
    source = await POSTGRES.connect(postgres_config(url))
    destination = await get_provider("file").connect({"url": str(folder), "format": "parquet"})
    seen: list[CopyBatch] = []
    csv = source.csv_batches

    async def watched(stream: Stream, batch_rows: int) -> AsyncIterator[CopyBatch]:
        async for batch in csv(stream, batch_rows):
            seen.append(batch)
            yield batch

    source.csv_batches = watched  # type: ignore[method-assign]
    try:
        chosen = transfer.select_streams(await source.discover(), streams)
        totals = await transfer.direct(
            source,
            destination,
            chosen,
            parse_spec(None),
            mode,
            Quiet(),
            identity=LoadIdentity(str(uuid.uuid4())),
        )
        return seen, totals
    finally:
        await source.close()
        await destination.close()


async def _read(folder: Path, stream: str) -> list[Row]:
    files = await get_provider("file").connect({"url": str(folder), "format": "parquet"})
    try:
        found = transfer.select_streams(await files.discover(), [stream])[0]
        return [r async for b in files.read(found, 1000) for r in b]
    finally:
        await files.close()


async def test_every_edge_value_of_its_types_lands_exactly_through_the_csv_path(
    source_url: str, tmp_path: Path
) -> None:
    rows, expected = await _edge_table(source_url)
    seen, totals = await _copy(source_url, tmp_path, ["edges"])
    assert seen, "the CSV path was not taken"
    assert totals[0].loaded == len(rows)
    back = sorted(await _read(tmp_path, "edges"), key=lambda r: r[0])
    assert [r[0] for r in back] == [r[0] for r in rows]
    wrong = [
        f"row {row[0]} {c.name}: read {value!r}, want {expected[(row[0], c.name)]!r}"
        for row in back
        for c, value in zip(COLUMNS[1:], row[1:], strict=True)
        if not same(expected[(row[0], c.name)], value, c.type)
    ]
    assert wrong == []


async def test_a_declared_numeric_lands_exactly_and_a_nan_names_its_row(
    source_url: str, tmp_path: Path
) -> None:
    conn = await asyncpg.connect(source_url)
    try:
        await conn.execute(
            "CREATE TABLE amounts (id bigint PRIMARY KEY, amount numeric(12,2) NOT NULL);"
            "INSERT INTO amounts VALUES (1, 1.5), (2, -9999999999.99), (3, 0);"
            "CREATE TABLE bad (id bigint PRIMARY KEY, amount numeric(5,2));"
            "INSERT INTO bad VALUES (1, 1.5), (2, NULL), (3, 'NaN'), (4, 2)"
        )
    finally:
        await conn.close()
    seen, _ = await _copy(source_url, tmp_path, ["amounts"])
    assert seen
    assert sorted(await _read(tmp_path, "amounts")) == [
        (1, Decimal("1.50")),
        (2, Decimal("-9999999999.99")),
        (3, Decimal("0.00")),
    ]
    with pytest.raises(ValueFault) as caught:
        await _copy(source_url, tmp_path, ["bad"])
    assert caught.value.column == "amount"
    assert caught.value.row == 3
    assert not (tmp_path / "bad.parquet").exists()


@pytest.mark.parametrize(
    ("declared", "literal", "value"),
    [("numeric", "1.25", Decimal("1.25")), ("text[]", "'{a,b}'", "{a,b}"), ("uuid", "NULL", None)],
)
async def test_another_column_type_takes_the_rows_path(
    source_url: str, tmp_path: Path, declared: str, literal: str, value: Any
) -> None:
    conn = await asyncpg.connect(source_url)
    try:
        await conn.execute(
            f"CREATE TABLE other (id bigint PRIMARY KEY, v {declared});"
            f"INSERT INTO other VALUES (1, {literal})"
        )
    finally:
        await conn.close()
    seen, totals = await _copy(source_url, tmp_path, ["other"])
    assert not seen
    assert totals[0].loaded == 1
    assert await _read(tmp_path, "other") == [(1, value)]


async def test_an_upsert_from_csv_replaces_by_key_and_appends_new_keys(
    source_url: str, tmp_path: Path
) -> None:
    conn = await asyncpg.connect(source_url)
    try:
        await conn.execute(
            "CREATE TABLE people (id bigint PRIMARY KEY, name text);"
            "INSERT INTO people VALUES (1, 'a'), (2, 'b')"
        )
        await _copy(source_url, tmp_path, ["people"])
        await conn.execute(
            "UPDATE people SET name = 'B' WHERE id = 2; INSERT INTO people VALUES (3, 'c')"
        )
        seen, totals = await _copy(source_url, tmp_path, ["people"], WriteMode.UPSERT)
    finally:
        await conn.close()
    assert seen
    assert totals[0].loaded == 3
    assert await _read(tmp_path, "people") == [(1, "a"), (2, "B"), (3, "c")]


async def test_the_csv_path_is_offered_for_parquet_only(tmp_path: Path) -> None:
    columns = [Column("id", "bigint"), Column("name", "text")]
    for fmt, takes in (("parquet", True), ("jsonl", False), ("csv", False)):
        files = await get_provider("file").connect({"url": str(tmp_path), "format": fmt})
        try:
            assert files.takes_csv(columns) is takes, fmt  # type: ignore[attr-defined]
            assert not files.takes_csv([*columns, Column("raw", "bytes")])  # type: ignore[attr-defined]
        finally:
            await files.close()
