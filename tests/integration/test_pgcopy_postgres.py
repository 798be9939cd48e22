"""The binary COPY codec against a real PostgreSQL: streams it encodes load
with COPY FROM, and streams PostgreSQL's COPY TO produces decode to the values
asyncpg reads for the same rows."""

from __future__ import annotations

import contextlib
import io
import json
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, date, datetime, time, timedelta, timezone
from decimal import Decimal
from typing import Any

import asyncpg
import pytest

from setu_engine.staged import pgcopy
from setu_engine.values.special import INFINITY, MINUS_INFINITY
from setu_engine.values.types import PG_TYPES, TYPES, Column, Row

# One column per neutral type (json is jsonb, as Setu creates it).
COLUMNS = [Column(f"c_{t}", t) for t in TYPES]
DDL_TYPES = [PG_TYPES[c.type] for c in COLUMNS]
NAMES = [c.name for c in COLUMNS]
JSON_AT = NAMES.index("c_json")
UUID_AT = NAMES.index("c_uuid")

ROWS: list[Row] = [
    (
        True,
        -32768,
        2**31 - 1,
        -(2**63),
        1.5,
        -2.25e-300,
        Decimal("-123456789012345678901234567890.123"),
        "héllo ✓ 🚀",
        b"\x00\xff",
        date(1969, 7, 20),
        time(23, 59, 59, 999999),
        datetime(1899, 12, 31, 23, 59, 59, 1),
        datetime(2024, 2, 29, 21, 0, tzinfo=timezone(timedelta(hours=9))),
        uuid.UUID("12345678-1234-5678-1234-567812345678"),
        {"a": [1, 2.5, None, True], "é": "x"},
    ),
    (
        False,
        0,
        0,
        2**63 - 1,
        float("-inf"),
        0.0,
        Decimal("1e-20"),
        "",
        b"",
        # Not date.max / datetime.max: asyncpg sends those as 'infinity'.
        date(9999, 12, 30),
        time(0, 0),
        datetime(9999, 12, 31, 23, 59, 59, 999998),
        datetime(1970, 1, 1, tzinfo=UTC),
        uuid.UUID(int=0),
        "just a string",
    ),
    tuple(None for _ in COLUMNS),
]

NUMERICS = [
    "0",
    "0.000",
    "-1",
    "1.10",
    "0.0001",
    "9999.9999",
    "10000",
    "1e-20",
    "123.4500",
    "123456789012345678901234567890.123",
    "-0.000000000000000000000000000000000001",
    "1E+40",
    "NaN",
    "Infinity",
    "-Infinity",
]


@contextlib.asynccontextmanager
async def plain_connection(url: str) -> AsyncIterator[asyncpg.Connection]:
    """asyncpg without the server's json codecs: json and jsonb come out as text."""
    conn = await asyncpg.connect(url)
    try:
        yield conn
    finally:
        await conn.close()


async def make_table(conn: asyncpg.Connection) -> None:
    columns = ", ".join(f"{n} {t}" for n, t in zip(NAMES, DDL_TYPES, strict=True))
    await conn.execute(f"CREATE TABLE codec_sample (id serial PRIMARY KEY, {columns})")


def normalise(record: asyncpg.Record) -> Row:
    """asyncpg's values as neutral ones: it hands json and jsonb out as text."""
    values: list[Any] = [record[n] for n in NAMES]
    if values[JSON_AT] is not None:
        values[JSON_AT] = json.loads(values[JSON_AT])
    if values[UUID_AT] is not None:  # asyncpg's own UUID subclass
        values[UUID_AT] = uuid.UUID(bytes=values[UUID_AT].bytes)
    return tuple(values)


async def fetch_all(conn: asyncpg.Connection) -> list[Row]:
    records = await conn.fetch(f"SELECT {', '.join(NAMES)} FROM codec_sample ORDER BY id")
    return [normalise(r) for r in records]


async def copy_out(conn: asyncpg.Connection, query: str) -> bytes:
    chunks: list[bytes] = []

    async def collect(chunk: bytes) -> None:
        chunks.append(bytes(chunk))

    await conn.copy_from_query(query, output=collect, format="binary")
    return b"".join(chunks)


async def test_encoded_rows_load_with_copy_from(database_url: str) -> None:
    async with plain_connection(database_url) as conn:
        await make_table(conn)
        data = pgcopy.encode(COLUMNS, ROWS)
        await conn.copy_to_table(
            "codec_sample", source=io.BytesIO(data), format="binary", columns=NAMES
        )
        assert await fetch_all(conn) == ROWS


async def test_a_stream_sent_in_chunks_loads(database_url: str) -> None:
    async def chunks() -> AsyncIterator[bytes]:
        yield pgcopy.HEADER
        for row in ROWS:
            yield pgcopy.encode_rows(COLUMNS, [row])
        yield pgcopy.TRAILER

    async with plain_connection(database_url) as conn:
        await make_table(conn)
        await conn.copy_to_table("codec_sample", source=chunks(), format="binary", columns=NAMES)
        assert await fetch_all(conn) == ROWS


async def test_copy_to_output_decodes_to_what_asyncpg_reads(database_url: str) -> None:
    async with plain_connection(database_url) as conn:
        await make_table(conn)
        placeholders = ", ".join(f"${i}::{t}" for i, t in enumerate(DDL_TYPES, start=1))
        insert = f"INSERT INTO codec_sample ({', '.join(NAMES)}) VALUES ({placeholders})"
        for row in ROWS:
            params = list(row)
            params[JSON_AT] = None if row[JSON_AT] is None else json.dumps(row[JSON_AT])
            await conn.execute(insert, *params)
        data = await copy_out(conn, f"SELECT {', '.join(NAMES)} FROM codec_sample ORDER BY id")
        decoded = pgcopy.decode(COLUMNS, data)
        assert decoded == await fetch_all(conn)
        assert decoded == ROWS
        batches = list(pgcopy.iter_decode(COLUMNS, data, 2))
        assert [len(b) for b in batches] == [2, 1]


async def test_numeric_scales_survive_both_directions(database_url: str) -> None:
    columns = [Column("n", "numeric")]
    values = [Decimal(v) for v in NUMERICS]
    async with plain_connection(database_url) as conn:
        await conn.execute("CREATE TABLE numbers (id serial PRIMARY KEY, n numeric)")
        data = pgcopy.encode(columns, [(v,) for v in values])
        await conn.copy_to_table("numbers", source=io.BytesIO(data), format="binary", columns=["n"])
        texts = [r["n"] for r in await conn.fetch("SELECT n::text AS n FROM numbers ORDER BY id")]
        # PostgreSQL's own rendering: the value and its scale as we sent them.
        expected = [
            "NaN" if v.is_nan() else str(v) if not v.is_finite() else f"{v:f}" for v in values
        ]
        assert texts == expected

        out = await copy_out(conn, "SELECT n FROM numbers ORDER BY id")
        decoded = [row[0] for row in pgcopy.decode(columns, out)]
        fetched = [r["n"] for r in await conn.fetch("SELECT n FROM numbers ORDER BY id")]
        assert [d for d in decoded if not d.is_nan()] == [f for f in fetched if not f.is_nan()]
        assert [d.is_nan() for d in decoded] == [f.is_nan() for f in fetched]
        # asyncpg drops the zeros of 10000 (1E+4); PostgreSQL's text keeps them, as we do.
        assert [f"{d:f}" for d in decoded] == expected


async def test_json_and_jsonb_columns_both_decode(database_url: str) -> None:
    documents = [{"a": [1, "é"]}, [], "s", 3.5, None]
    async with plain_connection(database_url) as conn:
        await conn.execute("CREATE TABLE docs (id serial PRIMARY KEY, j json, b jsonb)")
        for doc in documents:
            text = None if doc is None else json.dumps(doc, indent=2)
            await conn.execute("INSERT INTO docs (j, b) VALUES ($1::json, $1::jsonb)", text)
        data = await copy_out(conn, "SELECT j, b FROM docs ORDER BY id")
    decoded = pgcopy.decode([Column("j", "json"), Column("b", "json")], data)
    assert decoded == [(doc, doc) for doc in documents]


@pytest.mark.parametrize(
    ("sql_type", "literal", "value"),
    [
        ("date", "infinity", INFINITY),
        ("timestamp", "-infinity", MINUS_INFINITY),
        ("timestamptz", "infinity", INFINITY),
    ],
)
async def test_infinite_values_from_postgres_stay_infinite(
    database_url: str, sql_type: str, literal: str, value: Any
) -> None:
    async with plain_connection(database_url) as conn:
        data = await copy_out(
            conn, f"SELECT 1::bigint AS id, '{literal}'::{sql_type} AS created_at"
        )
    columns = [Column("id", "bigint"), Column("created_at", sql_type)]
    assert pgcopy.decode(columns, data) == [(1, value)]
    # And PostgreSQL reads the encoded value back as the same infinity.
    async with plain_connection(database_url) as conn:
        await conn.execute(f"CREATE TEMP TABLE inf (id bigint, created_at {sql_type})")
        await conn.copy_to_table(
            "inf", source=io.BytesIO(pgcopy.encode(columns, [(1, value)])), format="binary"
        )
        assert await conn.fetchval("SELECT created_at::text FROM inf") == literal
