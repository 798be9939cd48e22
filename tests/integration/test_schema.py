"""setu_server/store/schema.sql is the schema the migrations build.

schema.sql is applied to one empty database and the migrations to another;
the two catalogs (tables, columns in order with types, nullability and
defaults, constraints, indexes, functions) must be the same."""

from __future__ import annotations

import re
import uuid
from collections.abc import AsyncIterator
from importlib import resources
from typing import Any

import asyncpg
import pytest

from setu_server.store import db
from setu_server.store.migrate import migrate
from tests.conftest import with_database

SCHEMA_SQL = (resources.files("setu_server.store") / "schema.sql").read_text()

# The migrator's own bookkeeping, which schema.sql leaves out.
MIGRATOR = "schema_migration"

CATALOG = {
    "tables": """
        SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE n.nspname = 'public' AND c.relkind IN ('r', 'p', 'v', 'm', 'S')
          AND c.relname NOT LIKE 'schema_migration%'
        ORDER BY 1""",
    "columns": """
        SELECT c.relname, a.attname, format_type(a.atttypid, a.atttypmod), a.attnotnull,
               pg_get_expr(d.adbin, d.adrelid),
               row_number() OVER (PARTITION BY c.oid ORDER BY a.attnum)
        FROM pg_attribute a
        JOIN pg_class c ON c.oid = a.attrelid
        JOIN pg_namespace n ON n.oid = c.relnamespace
        LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
        WHERE n.nspname = 'public' AND c.relkind = 'r' AND a.attnum > 0
          AND NOT a.attisdropped AND c.relname <> 'schema_migration'
        ORDER BY 1, 6""",
    "constraints": """
        SELECT c.conrelid::regclass::text, c.conname, c.contype, pg_get_constraintdef(c.oid)
        FROM pg_constraint c JOIN pg_namespace n ON n.oid = c.connamespace
        WHERE n.nspname = 'public' AND c.conrelid::regclass::text <> 'schema_migration'
        ORDER BY 1, 2""",
    "indexes": """
        SELECT tablename, indexname, indexdef FROM pg_indexes
        WHERE schemaname = 'public' AND tablename <> 'schema_migration'
        ORDER BY 1, 2""",
    "functions": """
        SELECT p.proname, pg_get_function_identity_arguments(p.oid),
               pg_get_function_result(p.oid), l.lanname, p.provolatile, p.prosrc
        FROM pg_proc p
        JOIN pg_namespace n ON n.oid = p.pronamespace
        JOIN pg_language l ON l.oid = p.prolang
        WHERE n.nspname = 'public'
        ORDER BY 1, 2""",
    "triggers": """
        SELECT tgrelid::regclass::text, tgname, pg_get_triggerdef(oid) FROM pg_trigger
        WHERE NOT tgisinternal ORDER BY 1, 2""",
}


def _body(source: str) -> str:
    """A function body without its comments and layout."""
    return " ".join(re.sub(r"--[^\n]*", "", source).split())


async def catalog(conn: asyncpg.Connection) -> dict[str, list[tuple[Any, ...]]]:
    found: dict[str, list[tuple[Any, ...]]] = {}
    for part, query in CATALOG.items():
        rows = [tuple(r) for r in await conn.fetch(query)]
        if part == "functions":
            rows = [(*r[:-1], _body(r[-1])) for r in rows]
        found[part] = rows
    return found


@pytest.fixture
async def two_empty_databases(pg_server_url: str) -> AsyncIterator[tuple[str, str]]:
    names = [f"setu_schema_{uuid.uuid4().hex[:12]}" for _ in range(2)]
    admin = await asyncpg.connect(pg_server_url)
    try:
        for name in names:
            await admin.execute(f"CREATE DATABASE {name}")
        yield with_database(pg_server_url, names[0]), with_database(pg_server_url, names[1])
    finally:
        for name in names:
            await admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        await admin.close()


async def test_schema_sql_is_what_the_migrations_build(
    two_empty_databases: tuple[str, str],
) -> None:
    from_schema = await db.connect(two_empty_databases[0])
    from_migrations = await db.connect(two_empty_databases[1])
    try:
        await from_schema.execute(SCHEMA_SQL)
        await migrate(from_migrations)
        written, migrated = await catalog(from_schema), await catalog(from_migrations)
    finally:
        await from_schema.close()
        await from_migrations.close()

    assert migrated["tables"], "the migrations built nothing"
    for part in CATALOG:
        only_schema = sorted(set(written[part]) - set(migrated[part]), key=repr)
        only_migrations = sorted(set(migrated[part]) - set(written[part]), key=repr)
        assert (only_schema, only_migrations) == ([], []), (
            f"{part} differ between store/schema.sql (first) and the migrations (second)"
        )
        assert written[part] == migrated[part], f"{part} are in another order"
