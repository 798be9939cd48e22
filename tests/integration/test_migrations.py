"""Migrations on a real, empty PostgreSQL; every named query prepares."""

from __future__ import annotations

import asyncio

import asyncpg

from setu_server.store import db
from setu_server.store.migrate import migrate, migrations
from setu_server.store.queries import QUERIES

TABLES = {
    "workspace",
    "api_key",
    "agent",
    "connection",
    "pipeline",
    "job",
    "task",
    "job_event",
    "artifact",
    "job_output",
    "catalog_stream",
    "schema_migration",
}


async def test_migrations_apply_to_an_empty_database_and_every_query_prepares(
    empty_database_url: str,
) -> None:
    conn = await db.connect(empty_database_url)
    try:
        applied = await migrate(conn)
        assert applied == [v for v, _, _ in migrations()]
        tables = {
            r["tablename"]
            for r in await conn.fetch("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")
        }
        assert tables >= TABLES
        for name, sql in QUERIES.items():
            try:
                await conn.prepare(sql)
            except asyncpg.PostgresError as exc:
                raise AssertionError(f"query {name} does not prepare: {exc}") from exc
        assert await migrate(conn) == [], "a second run applies nothing"
    finally:
        await conn.close()


async def test_concurrent_migrators_apply_each_migration_once(empty_database_url: str) -> None:
    conns = [await db.connect(empty_database_url) for _ in range(3)]
    try:
        results = await asyncio.gather(*(migrate(c) for c in conns))
        assert sorted(len(r) for r in results) == [0, 0, len(migrations())]
        count = await conns[0].fetchval("SELECT count(*) FROM schema_migration")
        assert count == len(migrations())
    finally:
        for c in conns:
            await c.close()
