"""The incremental read of a PostgreSQL source: one COPY in cursor order,
cut into batches, bounded by literals a hostile cursor value cannot escape
(setu_engine/providers/postgres/connector.py, setu_engine/staged/pgcopy_split.py)."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator

import asyncpg
import pytest

from setu_engine.values.types import Row, Stream
from setu_engine.values.window import Since
from tests.databases import postgres_config, scratch_database
from tests.integration.test_postgres_provider import collect, connected, decoded, stream_named

ROWS = 1000


@pytest.fixture
async def url(pg_server_url: str) -> AsyncIterator[str]:
    async with scratch_database(pg_server_url) as scratch:
        yield scratch


async def setup(url: str, ddl: str) -> None:
    conn = await asyncpg.connect(url)
    try:
        await conn.execute(ddl)
    finally:
        await conn.close()


def window(stream: Stream, since: Since) -> Stream:
    return dataclasses.replace(stream, since=since)


async def test_an_incremental_read_is_whole_batches_in_cursor_order(url: str) -> None:
    # Inserted out of cursor order, with ties: the read follows the cursor.
    await setup(
        url,
        "CREATE TABLE orders (id int PRIMARY KEY, seq bigint NOT NULL, note text);"
        f"INSERT INTO orders SELECT g, ({ROWS} - g) / 3, md5(g::text) "
        f"FROM generate_series(1, {ROWS}) g",
    )
    async with connected(url) as pg:
        stream = window(await stream_named(pg, "orders"), Since("seq", "bigint", "100", "250"))
        batches = await collect(pg, stream, 64)
        rows = decoded(stream, batches)
        read: list[Row] = [row async for batch in pg.read(stream, 64) for row in batch]
    expected = sorted((i, (ROWS - i) // 3) for i in range(1, ROWS) if 100 <= (ROWS - i) // 3 <= 250)
    assert sorted((r[0], r[1]) for r in rows) == expected
    assert [r[1] for r in rows] == sorted(r[1] for r in rows)  # cursor order
    assert len(batches) > 2 and [b.rows for b in batches[:-1]] == [64] * (len(batches) - 1)
    assert sorted(rows) == sorted(read)  # the same rows as the row-by-row read


@pytest.mark.parametrize("conforming", ["on", "off"])
async def test_a_hostile_cursor_value_stays_one_literal(url: str, conforming: str) -> None:
    await setup(
        url,
        "CREATE TABLE notes (id int PRIMARY KEY, tag text NOT NULL);"
        "INSERT INTO notes VALUES (1, 'a'), (2, 'b\\'), (3, 'c''d'), (4, 'z');"
        f'ALTER DATABASE "{postgres_config(url)["database"]}" '
        f"SET standard_conforming_strings = {conforming}",
    )
    hostile = ["b\\' OR true --", "c' OR true --", "c'') OR (true", "y\\"]
    async with connected(url) as pg:
        stream = await stream_named(pg, "notes")
        for low in hostile:
            since = Since("tag", "text", low, "zz")
            rows = decoded(stream, await collect(pg, window(stream, since), 10))
            assert sorted(r[1] for r in rows) == sorted(
                tag for tag in ("a", "b\\", "c'd", "z") if tag >= low
            ), low
            assert await pg.cursor_high(window(stream, since)) == ("z", len(rows)), low


async def test_an_empty_window_reads_nothing(url: str) -> None:
    await setup(url, "CREATE TABLE t (id int PRIMARY KEY); INSERT INTO t VALUES (1), (2)")
    async with connected(url) as pg:
        stream = await stream_named(pg, "t")
        assert await collect(pg, window(stream, Since("id", "integer", "1", empty=True)), 5) == []
