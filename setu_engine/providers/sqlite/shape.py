"""What a SQLite destination holds where a stream would land, and the
columns a load may add ahead of its rows (setu_engine/planning/destination_plan.py
decides; this reads and applies). SQLite has no schemas: a stream mapped
to `schema.table` lands as that one table name, as a write does."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

from setu_engine.planning.destination_plan import DestinationColumn, TableShape
from setu_engine.providers.sqlite.values import neutral_of

# SQLite stores every integer in up to 8 bytes and every float in 8: a
# declared width is no limit a value could overflow.
_STORED_AS = {"smallint": "bigint", "integer": "bigint", "real": "double"}


def quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def table_name(table: str, schema: str | None) -> str:
    return f"{schema}.{table}" if schema else table


def inspect(conn: sqlite3.Connection, table: str) -> TableShape:
    target = quote(table)
    info = conn.execute(
        'SELECT name, type, "notnull", dflt_value, pk FROM pragma_table_info(?) ORDER BY cid',
        (table,),
    ).fetchall()
    if not info:
        return TableShape(target)
    columns = []
    for name, declared, notnull, default, pk in info:
        neutral = neutral_of(str(declared))
        # An INTEGER PRIMARY KEY is the rowid: SQLite fills it when left out.
        rowid = pk and str(declared).strip().upper() == "INTEGER"
        required = bool(notnull) and default is None and not rowid
        columns.append(
            DestinationColumn(name, str(declared), _STORED_AS.get(neutral, neutral), required)
        )
    return TableShape(target, columns=tuple(columns), unique_keys=_unique_keys(conn, table, info))


def _unique_keys(
    conn: sqlite3.Connection, table: str, info: list[tuple[object, ...]]
) -> tuple[frozenset[str], ...]:
    keys = []
    primary = frozenset(str(r[0]) for r in info if r[4])
    if primary:
        keys.append(primary)
    for _, index, unique, _, partial in conn.execute(f"PRAGMA index_list({quote(table)})"):
        if unique and not partial:
            rows = conn.execute(f"PRAGMA index_info({quote(index)})").fetchall()
            keys.append(frozenset(str(r[2]) for r in rows))
    return tuple(keys)


def add_columns(
    conn: sqlite3.Connection, table: str, definitions: Sequence[tuple[str, str]]
) -> None:
    """Adds (name, declared type) columns in one transaction, each only if
    still missing (SQLite has no ADD COLUMN IF NOT EXISTS)."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        add_missing(conn, table, definitions)
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise


def add_missing(
    conn: sqlite3.Connection, table: str, definitions: Sequence[tuple[str, str]]
) -> None:
    """add_columns inside the caller's transaction (a load's: SQLite's DDL
    is transactional, so a rollback takes the columns back)."""
    present = {r[0] for r in conn.execute("SELECT name FROM pragma_table_info(?)", (table,))}
    for name, declared in definitions:
        if name not in present:
            conn.execute(f"ALTER TABLE {quote(table)} ADD COLUMN {quote(name)} {declared}")
