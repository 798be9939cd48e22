"""What PostgreSQL and SQLite destinations say of a target, and the two
changes a load makes ahead of its rows (setu_engine/providers/postgres/shape.py,
setu_engine/providers/sqlite/shape.py), on real databases."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path

import asyncpg
import pytest

from setu_engine.planning.destination_plan import DestinationColumn, InspectableDestination
from setu_engine.providers.postgres import PROVIDER as POSTGRES
from setu_engine.providers.sqlite import PROVIDER as SQLITE
from setu_engine.values.types import Column
from tests.databases import postgres_config, scratch_database


@pytest.fixture
async def url(pg_server_url: str) -> AsyncIterator[str]:
    async with scratch_database(pg_server_url) as scratch:
        yield scratch


async def test_postgres_says_what_a_target_holds_and_adapts_it(url: str) -> None:
    admin = await asyncpg.connect(url)
    try:
        await admin.execute("CREATE DOMAIN code AS varchar(8) NOT NULL")
        await admin.execute(
            "CREATE TABLE t (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, "
            "c code, n numeric(5,2) NOT NULL DEFAULT 0, must text NOT NULL, tags text[], "
            "UNIQUE (c, must))"
        )
        pg = await POSTGRES.connect(postgres_config(url))
        try:
            assert isinstance(pg, InspectableDestination)
            missing = await pg.inspect_table("t", "edge")
            assert (missing.missing_schema, missing.columns) == ("edge", None)
            assert (await pg.inspect_table("nope", None)).columns is None

            shape = await pg.inspect_table("t", None)
            assert shape.target == '"public"."t"'
            assert shape.columns == (
                # An identity or a default fills the column: not required.
                DestinationColumn("id", "bigint", "bigint", False),
                # A domain is judged by its base type.
                DestinationColumn("c", "code", "text", True),
                DestinationColumn("n", "numeric(5,2)", "numeric", False),
                DestinationColumn("must", "text", "text", True),
                DestinationColumn("tags", "text[]", None, False),
            )
            assert set(shape.unique_keys) == {frozenset({"id"}), frozenset({"c", "must"})}

            await pg.create_schema("edge")
            await pg.create_schema("edge")  # a second load into it meets it there
            new = (Column("note", "text", False), Column("at", "timestamptz"))
            await pg.add_columns("t", None, new)
            await pg.add_columns("t", None, new)  # added by a concurrent load: no error
        finally:
            await pg.close()
        columns = await admin.fetch(
            "SELECT column_name, data_type, is_nullable FROM information_schema.columns "
            "WHERE table_name = 't' AND column_name IN ('note', 'at') ORDER BY ordinal_position"
        )
        assert [tuple(r) for r in columns] == [
            ("note", "text", "YES"),  # added nullable: the rows there have no value
            ("at", "timestamp with time zone", "YES"),
        ]
        assert await admin.fetchval("SELECT to_regnamespace('edge') IS NOT NULL")
    finally:
        await admin.close()


async def test_sqlite_says_what_a_target_holds_and_adds_columns(tmp_path: Path) -> None:
    path = tmp_path / "d.db"
    with sqlite3.connect(path) as db:
        db.execute(
            "CREATE TABLE t (id INTEGER PRIMARY KEY, n INT4 NOT NULL, d TEXT NOT NULL DEFAULT '')"
        )
        db.execute("CREATE UNIQUE INDEX t_n ON t (n)")
    connector = await SQLITE.connect({"path": str(path)})
    try:
        assert isinstance(connector, InspectableDestination)
        shape = await connector.inspect_table("t", None)
        assert shape.columns == (
            DestinationColumn("id", "INTEGER", "bigint", False),  # the rowid
            DestinationColumn("n", "INT4", "bigint", True),
            DestinationColumn("d", "TEXT", "text", False),
        )
        assert set(shape.unique_keys) == {frozenset({"id"}), frozenset({"n"})}
        assert (await connector.inspect_table("t", "edge")).columns is None  # "edge.t"
        await connector.add_columns("t", None, (Column("note", "text"),))
        await connector.add_columns("t", None, (Column("note", "text"),))
    finally:
        await connector.close()
    with sqlite3.connect(path) as db:
        added = db.execute("SELECT type FROM pragma_table_info('t') WHERE name = 'note'")
        assert added.fetchall() == [("TEXT",)]
