"""Re-sync does less work (docs/flows.md): an upsert or merge into PostgreSQL or
SQLite updates only the rows whose values differ, and says per stream how
many rows it inserted, updated and left unchanged."""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path

import asyncpg
import pytest

from setu_engine.kinds import RowChanges, WriteMode
from setu_engine.providers.postgres import PROVIDER as POSTGRES
from setu_engine.providers.sqlite import PROVIDER as SQLITE
from tests.databases import postgres_config, scratch_database
from tests.integration.test_type_fidelity import PATHS, move, opened

ROWS = 50
# json has no equality operator: it is compared as text.
SOURCE_DDL = f"""
CREATE TABLE items (
    id int PRIMARY KEY, name varchar(20), price numeric(6,2), doc json, tags text[],
    seen timestamptz
);
INSERT INTO items
SELECT i, 'item ' || i, i * 1.5, json_build_object('n', i), ARRAY['a', NULL],
       CASE WHEN i % 2 = 0 THEN '2024-01-01 00:00:00+00'::timestamptz END
FROM generate_series(1, {ROWS}) AS i;
"""

KEYED = [WriteMode.UPSERT, WriteMode.MERGE]


@pytest.fixture
async def source_url(pg_server_url: str) -> AsyncIterator[str]:
    async with scratch_database(pg_server_url, "setu_src") as url:
        yield url


@pytest.fixture
async def target_url(pg_server_url: str) -> AsyncIterator[str]:
    async with scratch_database(pg_server_url, "setu_dst") as url:
        yield url


@pytest.fixture
async def source(source_url: str) -> AsyncIterator[asyncpg.Connection]:
    conn = await asyncpg.connect(source_url)
    try:
        await conn.execute(SOURCE_DDL)
        yield conn
    finally:
        await conn.close()


async def sync(
    source_url: str,
    destination: dict[str, object],
    how: str,
    mode: WriteMode,
    tmp_path: Path,
    stream: str = "items",
) -> RowChanges | None:
    provider = POSTGRES if "database" in destination else SQLITE
    async with (
        opened(POSTGRES, postgres_config(source_url)) as src,
        opened(provider, destination) as dst,
    ):
        (totals,) = await move(src, dst, how, tmp_path, mode=mode, streams=[stream])
    return totals.changes


async def versions(url: str) -> dict[int, str]:
    """Each row's xmin: it moves only when the row is written."""
    conn = await asyncpg.connect(url)
    try:
        return {r[0]: r[1] for r in await conn.fetch("SELECT id, xmin::text FROM items")}
    finally:
        await conn.close()


@pytest.mark.parametrize("how", PATHS)
@pytest.mark.parametrize("mode", KEYED)
async def test_a_second_sync_of_an_unchanged_table_updates_no_row_in_postgres(
    source: asyncpg.Connection,
    source_url: str,
    target_url: str,
    tmp_path: Path,
    how: str,
    mode: WriteMode,
) -> None:
    config = postgres_config(target_url)
    assert await sync(source_url, config, how, mode, tmp_path) == RowChanges(ROWS, 0, 0)
    before = await versions(target_url)
    assert await sync(source_url, config, how, mode, tmp_path) == RowChanges(0, 0, ROWS)
    assert await versions(target_url) == before

    await source.execute("UPDATE items SET price = price + 1 WHERE id = 7")
    await source.execute("UPDATE items SET seen = now() WHERE id = 8")
    await source.execute('UPDATE items SET doc = \'{"n": 9, "x": null}\' WHERE id = 9')
    await source.execute("INSERT INTO items (id) VALUES (1000)")
    changes = await sync(source_url, config, how, mode, tmp_path)
    assert changes == RowChanges(1, 3, ROWS - 3)
    after = await versions(target_url)
    moved = {i for i in before if after[i] != before[i]}
    assert moved == {7, 8, 9}


@pytest.mark.parametrize("how", PATHS)
async def test_append_and_overwrite_report_every_row_inserted(
    source: asyncpg.Connection, source_url: str, target_url: str, tmp_path: Path, how: str
) -> None:
    config = postgres_config(target_url)
    # Types binary COPY loads straight into, and types that take a cast.
    await source.execute("CREATE TABLE plain AS SELECT id, name, price FROM items")
    for stream in ("plain", "items"):
        for mode in (WriteMode.APPEND, WriteMode.OVERWRITE, WriteMode.OVERWRITE):
            changes = await sync(source_url, config, how, mode, tmp_path, stream)
            assert changes == RowChanges(ROWS), (stream, mode)


def sqlite_updates(path: Path) -> int:
    with contextlib.closing(sqlite3.connect(path)) as conn:
        return int(conn.execute("SELECT n FROM updates").fetchone()[0])


@pytest.mark.parametrize("how", PATHS)
@pytest.mark.parametrize("mode", KEYED)
async def test_a_second_sync_of_an_unchanged_table_updates_no_row_in_sqlite(
    source: asyncpg.Connection,
    source_url: str,
    tmp_path: Path,
    how: str,
    mode: WriteMode,
) -> None:
    path = tmp_path / "dest.db"
    config = {"path": str(path), "create": True}
    assert await sync(source_url, config, how, mode, tmp_path) == RowChanges(ROWS, 0, 0)
    with contextlib.closing(sqlite3.connect(path)) as conn:
        # Counts the rows SQLite really rewrites.
        conn.executescript(
            "CREATE TABLE updates (n INTEGER); INSERT INTO updates VALUES (0);"
            "CREATE TRIGGER counted AFTER UPDATE ON items "
            "BEGIN UPDATE updates SET n = n + 1; END;"
        )
    assert await sync(source_url, config, how, mode, tmp_path) == RowChanges(0, 0, ROWS)
    assert sqlite_updates(path) == 0

    await source.execute("UPDATE items SET name = NULL WHERE id IN (3, 4)")
    await source.execute("INSERT INTO items (id, name) VALUES (1000, 'new')")
    assert await sync(source_url, config, how, mode, tmp_path) == RowChanges(1, 2, ROWS - 2)
    assert sqlite_updates(path) == 2


@pytest.mark.parametrize("mode", KEYED)
async def test_a_partitioned_destination_counts_its_changes_too(
    source: asyncpg.Connection, source_url: str, target_url: str, tmp_path: Path, mode: WriteMode
) -> None:
    conn = await asyncpg.connect(target_url)
    try:
        await conn.execute(
            "CREATE TABLE items (id int PRIMARY KEY, name varchar(20), price numeric(6,2), "
            "doc json, tags text[], seen timestamptz) PARTITION BY RANGE (id);"
            "CREATE TABLE items_low PARTITION OF items FOR VALUES FROM (0) TO (25);"
            "CREATE TABLE items_high PARTITION OF items FOR VALUES FROM (25) TO (MAXVALUE)"
        )
    finally:
        await conn.close()
    config = postgres_config(target_url)
    assert await sync(source_url, config, "direct", mode, tmp_path) == RowChanges(ROWS, 0, 0)
    await source.execute("UPDATE items SET name = 'renamed' WHERE id IN (1, 30)")
    changes = await sync(source_url, config, "staged", mode, tmp_path)
    assert changes == RowChanges(0, 2, ROWS - 2)
