"""What a PostgreSQL destination holds where a stream would land, and the
two changes a load may make ahead of its rows: create the schema, add
columns (setu_engine/planning/destination_plan.py decides; this reads and applies)."""

from __future__ import annotations

from collections.abc import Sequence

import asyncpg

from setu_engine.planning.destination_plan import DestinationColumn, TableShape
from setu_engine.values.types import FROM_PG

SCHEMA_EXISTS = "SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)"

# typname of a domain is its own name: its base type says what it holds.
TABLE_COLUMNS = """
SELECT a.attname,
       coalesce(b.typname, t.typname) AS typname,
       format_type(a.atttypid, a.atttypmod) AS sql_type,
       -- NOT NULL (its own, or its domain's) with nothing to fill it.
       (a.attnotnull OR t.typnotnull) AND NOT a.atthasdef AND t.typdefault IS NULL
           AND a.attidentity = '' AND a.attgenerated = '' AS required
FROM pg_attribute a
JOIN pg_type t ON t.oid = a.atttypid
LEFT JOIN pg_type b ON t.typtype = 'd' AND b.oid = t.typbasetype
WHERE a.attrelid = $1::regclass AND a.attnum > 0 AND NOT a.attisdropped
ORDER BY a.attnum
"""

UNIQUE_KEYS = """
SELECT array_agg(a.attname)::text[] AS columns
FROM pg_index i
JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey)
WHERE i.indrelid = $1::regclass AND i.indisunique AND i.indpred IS NULL
  AND i.indexprs IS NULL AND i.indimmediate
GROUP BY i.indexrelid
"""


def quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


async def inspect(conn: asyncpg.Connection, schema: str, table: str) -> TableShape:
    target = f"{quote(schema)}.{quote(table)}"
    if not await conn.fetchval(SCHEMA_EXISTS, schema):
        return TableShape(target, missing_schema=schema)
    if await conn.fetchval("SELECT to_regclass($1)", target) is None:
        return TableShape(target)
    columns = tuple(
        DestinationColumn(
            r["attname"], r["sql_type"], FROM_PG.get(r["typname"]), bool(r["required"])
        )
        for r in await conn.fetch(TABLE_COLUMNS, target)
    )
    keys = tuple(frozenset(r["columns"]) for r in await conn.fetch(UNIQUE_KEYS, target))
    return TableShape(target, columns=columns, unique_keys=keys)


async def create_schema(conn: asyncpg.Connection, schema: str) -> None:
    # IF NOT EXISTS: two loads into one new schema may both get here.
    await conn.execute(f"CREATE SCHEMA IF NOT EXISTS {quote(schema)}")


async def add_columns(
    conn: asyncpg.Connection, schema: str, table: str, definitions: Sequence[tuple[str, str]]
) -> None:
    """Adds (name, SQL type) columns, nullable, in one statement (so all or
    none), each only if still missing (a concurrent load may add it too)."""
    adds = ", ".join(f"ADD COLUMN IF NOT EXISTS {quote(n)} {t}" for n, t in definitions)
    await conn.execute(f"ALTER TABLE {quote(schema)}.{quote(table)} {adds}")
