"""Files keep their types (issue 26): without a declared column, inference
never turns an exact decimal into a float."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from setu_engine.providers.files import PROVIDER


async def test_jsonl_inference_keeps_a_big_decimal_exact(tmp_path: Path) -> None:
    """A JSON number a double cannot hold infers numeric, read as its exact
    digits; numbers a double holds exactly still infer double."""
    (tmp_path / "money.jsonl").write_text(
        '{"big": 12345678901234567890.123456789, "small": 0.5, "huge": 1e400}\n'
        '{"big": 1.5, "small": 2, "huge": 1}\n'
    )
    connector = await PROVIDER.connect({"url": str(tmp_path), "format": "jsonl"})
    try:
        (stream,) = await connector.discover()
        types = {c.name: c.type for c in stream.columns}
        assert types == {"big": "numeric", "small": "double", "huge": "numeric"}
        rows = [row async for batch in connector.read(stream, 10) for row in batch]
    finally:
        await connector.close()
    assert rows[0][0] == Decimal("12345678901234567890.123456789")
    assert str(rows[0][0]) == "12345678901234567890.123456789"
    assert rows[0][2] == Decimal("1e400")


async def test_csv_inference_keeps_a_big_decimal_exact(tmp_path: Path) -> None:
    """CSV infers a decimal numeric (exact), an integer past bigint numeric."""
    (tmp_path / "money.csv").write_text(
        "big,wide\n12345678901234567890.123456789,99999999999999999999\n1.5,1\n"
    )
    connector = await PROVIDER.connect({"url": str(tmp_path), "format": "csv"})
    try:
        (stream,) = await connector.discover()
        assert [c.type for c in stream.columns] == ["numeric", "numeric"]
        rows = [row async for batch in connector.read(stream, 10) for row in batch]
    finally:
        await connector.close()
    assert str(rows[0][0]) == "12345678901234567890.123456789"
    assert rows[0][1] == Decimal("99999999999999999999")


async def test_parquet_keeps_the_primary_key_in_its_metadata(tmp_path: Path) -> None:
    """A Parquet file written with a key offers it back on discover, with
    its columns' SQL types and nullability."""
    from setu_engine.kinds import WriteMode
    from setu_engine.values.types import Column

    columns = [
        Column("id", "integer", nullable=False),
        Column("name", "text", nullable=False, sql_type="character varying(20)"),
        Column("amount", "numeric", sql_type="numeric(5,2)"),
    ]

    async def batches() -> Any:
        yield [(1, "a", Decimal("1.25"))]

    connector = await PROVIDER.connect({"url": str(tmp_path), "format": "parquet"})
    try:
        await connector.write("t", columns, batches(), WriteMode.OVERWRITE, ["id"])
        (stream,) = await connector.discover()
    finally:
        await connector.close()
    assert stream.primary_key == ("id",)
    assert list(stream.columns) == columns


# -- PostgreSQL → file → PostgreSQL ----------------------------------------------

ROUND_TRIP_DDL = """
CREATE TABLE people (
    id integer PRIMARY KEY,
    name varchar(20) NOT NULL,
    amount numeric(5,2),
    big numeric,
    counts integer[],
    tags text[],
    seen timestamptz,
    born date,
    doc json,
    docb jsonb,
    token uuid,
    raw bytea,
    active boolean
);
INSERT INTO people VALUES
 (1, 'Ada, "the" first', 123.45, 12345678901234567890.123456789, '{1,NULL,3}',
  '{"a b",NULL,"c,d"}', '2024-01-02 03:04:05.000006+05:30', '2024-02-29',
  '{"k": [1, "two", null]}', '{"é": {"x": true}}', '12345678-1234-5678-1234-567812345678',
  '\\x00ff10', true),
 (2, 'नमस्ते 🚀', -999.99, -0.000000001, '{}', '{}', '-infinity', 'infinity', 'null', '[]',
  NULL, '\\x', false),
 (3, 'line
break', NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL);
"""
# What a format cannot keep (docs/data-types.md, "Known limitations") is left
# out of its round trip: Parquet has no infinite dates, CSV no empty bytes.
LIMITS = {
    "parquet": "UPDATE people SET seen = '1999-12-31 23:59:59-08', born = '0001-01-01' "
    "WHERE id = 2",
    "csv": "UPDATE people SET raw = '\\x01' WHERE id = 2",
}

# The table's shape as PostgreSQL declares it: column, type, NOT NULL; and its key.
SHAPE = """
SELECT a.attname, format_type(a.atttypid, a.atttypmod), a.attnotnull
FROM pg_attribute a WHERE a.attrelid = 'people'::regclass AND a.attnum > 0
  AND NOT a.attisdropped ORDER BY a.attnum
"""
KEY = """
SELECT array_agg(a.attname ORDER BY k.n) FROM pg_index i
CROSS JOIN unnest(i.indkey) WITH ORDINALITY AS k(attnum, n)
JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
WHERE i.indrelid = 'people'::regclass AND i.indisprimary
"""
# json compares as its value (a file carries the value, not its spacing).
VALUES = "SELECT *, doc::jsonb AS doc FROM people ORDER BY id"


class _Quiet:
    async def extracted(self, stream: str, rows: int) -> None:
        return None

    async def loaded(self, stream: str, rows: int) -> None:
        return None


async def _move(source: Any, destination: Any, path: str, blob: Path) -> None:
    import uuid

    from setu_engine.kinds import WriteMode
    from setu_engine.movement import transfer
    from setu_engine.operators.chain import parse_spec
    from setu_engine.staged.blob import LocalBlobStore
    from setu_engine.staged.markers import LoadIdentity

    streams = transfer.select_streams(await source.discover(), ["people"])
    spec = parse_spec(None)
    identity = LoadIdentity(str(uuid.uuid4()))
    if path == "direct":
        await transfer.direct(
            source, destination, streams, spec, WriteMode.OVERWRITE, _Quiet(), identity=identity
        )
        return
    store = LocalBlobStore(blob)
    manifest = await transfer.stage(source, streams, store, "run/", _Quiet())
    await transfer.load(
        destination, manifest, store, "run/", spec, WriteMode.OVERWRITE, _Quiet(), identity=identity
    )


async def _shape(url: str) -> tuple[list[Any], Any, list[Any]]:
    import asyncpg

    conn = await asyncpg.connect(url)
    try:
        shape = [tuple(r) for r in await conn.fetch(SHAPE)]
        key = await conn.fetchval(KEY)
        rows = [tuple(r) for r in await conn.fetch(VALUES)]
    finally:
        await conn.close()
    return shape, key, rows


@pytest.mark.parametrize("path", ["direct", "staged"])
@pytest.mark.parametrize("fmt", ["jsonl", "csv", "parquet"])
async def test_postgres_through_a_file_to_postgres_keeps_types_and_values(
    pg_server_url: str, tmp_path: Path, fmt: str, path: str
) -> None:
    """The round trip of issue 26, with no declared columns: the landed
    table's column types, NOT NULL and primary key are the source's, and
    every value compares equal (12345678901234567890.123456789 included)."""
    import asyncpg

    from setu_engine.providers import get_provider
    from tests.databases import postgres_config, scratch_database

    postgres, files = get_provider("postgres"), get_provider("file")
    folder = tmp_path / "files"
    folder.mkdir()
    async with (
        scratch_database(pg_server_url, "setu_src") as source_url,
        scratch_database(pg_server_url, "setu_dst") as target_url,
    ):
        conn = await asyncpg.connect(source_url)
        try:
            await conn.execute(ROUND_TRIP_DDL)
            if fmt in LIMITS:
                await conn.execute(LIMITS[fmt])
        finally:
            await conn.close()
        file_config = {"url": str(folder), "format": fmt}
        legs = (
            (postgres, postgres_config(source_url), files, file_config),
            (files, file_config, postgres, postgres_config(target_url)),
        )
        for leg, (from_, from_config, to, to_config) in enumerate(legs):
            source = await from_.connect(from_config)
            destination = await to.connect(to_config)
            try:
                await _move(source, destination, path, tmp_path / f"blob-{leg}")
            finally:
                await source.close()
                await destination.close()
        expected, landed = await _shape(source_url), await _shape(target_url)
    assert landed[0] == expected[0]  # types and NOT NULL
    assert landed[1] == expected[1] == ["id"]
    assert landed[2] == expected[2]
    big = next(row[3] for row in landed[2] if row[0] == 1)
    assert str(big) == "12345678901234567890.123456789"
