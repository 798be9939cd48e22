"""What a DuckDB file offers as streams, and the SQL of reading them: its
tables and views with their columns in neutral types (types.found) and
primary keys, a destination table's shape, the SELECT of a read and an
incremental read's window.

Every function but `select` and `window` runs in the worker thread on the
connector's connection.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import duckdb

from setu_engine.errors import PermanentError
from setu_engine.planning.destination_plan import DestinationColumn, TableShape
from setu_engine.providers.duckdb import types as duck_types
from setu_engine.providers.duckdb.write import quote
from setu_engine.staged.markers import MARKERS
from setu_engine.staged.resumable import STAGE_PREFIX
from setu_engine.values.types import Stream

if TYPE_CHECKING:
    from setu_engine.values.window import Since


def select(schema: str, table: str, found: Sequence[duck_types.Found]) -> str:
    picks: list[str] = []
    for f in found:
        picks.append(f.select)
        if f.infinite:
            picks.append(duck_types.infinity_flag(quote(f.column.name)))
    return f"SELECT {', '.join(picks)} FROM {quote(schema)}.{quote(table)}"


COLUMNS = (
    "SELECT column_name, data_type, is_nullable, comment FROM duckdb_columns() "
    "WHERE database_name = current_database() AND schema_name = ? AND table_name = ? "
    "ORDER BY column_index"
)


def columns(conn: duckdb.DuckDBPyConnection, schema: str, table: str) -> list[duck_types.Found]:
    rows = conn.execute(COLUMNS, [schema, table]).fetchall()
    return [
        duck_types.found(str(name), str(kind), bool(nullable), note, quote(str(name)))
        for name, kind, nullable, note in rows
    ]


def found(
    conn: duckdb.DuckDBPyConnection, schema: str, table: str, names: Sequence[str]
) -> list[duck_types.Found]:
    """The stream's columns as the table has them now, in the stream's order."""
    by_name = {f.column.name: f for f in columns(conn, schema, table)}
    if not by_name:
        raise PermanentError(
            f"duckdb: no table {schema}.{table} in the file (run discover to see what it offers)"
        )
    missing = [n for n in names if n not in by_name]
    if missing:
        raise PermanentError(
            f"duckdb: table {table!r} has no column(s) {', '.join(map(repr, missing))} "
            "(run discover again)"
        )
    return [by_name[n] for n in names]


def primary_key(conn: duckdb.DuckDBPyConnection, schema: str, table: str) -> list[str]:
    found = conn.execute(
        "SELECT constraint_column_names FROM duckdb_constraints() "
        "WHERE database_name = current_database() AND schema_name = ? AND table_name = ? "
        "AND constraint_type = 'PRIMARY KEY'",
        [schema, table],
    ).fetchone()
    return [str(n) for n in found[0]] if found else []


def discover(conn: duckdb.DuckDBPyConnection, schema: str) -> list[Stream]:
    objects = conn.execute(
        "SELECT table_name, estimated_size FROM duckdb_tables() "
        "WHERE database_name = current_database() AND schema_name = ? "
        "UNION ALL SELECT view_name, 0 FROM duckdb_views() "
        "WHERE database_name = current_database() AND schema_name = ? AND NOT internal "
        "ORDER BY 1",
        [schema, schema],
    ).fetchall()
    streams = []
    for name, estimate in objects:
        # The load markers and staging tables are the runtime's books.
        if name == MARKERS or str(name).startswith(STAGE_PREFIX):
            continue
        found = columns(conn, schema, name)
        streams.append(
            Stream(
                name=str(name),
                columns=tuple(f.column for f in found),
                primary_key=tuple(primary_key(conn, schema, name)),
                row_estimate=int(estimate or 0),
                locator={"schema": schema, "table": str(name)},
            )
        )
    return streams


def inspect(conn: duckdb.DuckDBPyConnection, schema: str, table: str) -> TableShape:
    target = f"{quote(schema)}.{quote(table)}"
    known = conn.execute(
        "SELECT 1 FROM duckdb_schemas() WHERE database_name = current_database() "
        "AND schema_name = ?",
        [schema],
    ).fetchone()
    if known is None:
        return TableShape(target, missing_schema=schema)
    rows = conn.execute(
        "SELECT column_name, data_type, is_nullable, comment, column_default IS NOT NULL "
        "FROM duckdb_columns() WHERE database_name = current_database() AND schema_name = ? "
        "AND table_name = ? ORDER BY column_index",
        [schema, table],
    ).fetchall()
    if not rows:
        return TableShape(target)
    columns = []
    for name, kind, nullable, note, has_default in rows:
        neutral = duck_types.found(str(name), str(kind), bool(nullable), note, "").column.type
        required = not nullable and not has_default
        columns.append(DestinationColumn(str(name), str(kind), neutral, required))
    keys = conn.execute(
        "SELECT constraint_column_names FROM duckdb_constraints() "
        "WHERE database_name = current_database() AND schema_name = ? AND table_name = ? "
        "AND constraint_type IN ('PRIMARY KEY', 'UNIQUE')",
        [schema, table],
    ).fetchall()
    unique = tuple(frozenset(str(n) for n in names) for (names,) in keys)
    return TableShape(target, columns=tuple(columns), unique_keys=unique)


# Cursor types whose DuckDB name may be spelled in a CAST (a fixed list: a
# file's catalog is no input to splice into SQL).
CASTABLE = frozenset(
    {
        "TINYINT",
        "SMALLINT",
        "INTEGER",
        "BIGINT",
        "UTINYINT",
        "USMALLINT",
        "UINTEGER",
        "UBIGINT",
        "HUGEINT",
        "FLOAT",
        "DOUBLE",
        "VARCHAR",
        "DATE",
        "TIMESTAMP",
        "TIMESTAMP WITH TIME ZONE",
    }
)


def cursor_cast(conn: duckdb.DuckDBPyConnection, schema: str, table: str, since: Since) -> str:
    """`CAST(? AS <the cursor column's type>)`, so the saved text compares
    as the column does."""
    found = conn.execute(
        "SELECT data_type, comment FROM duckdb_columns() WHERE database_name = "
        "current_database() AND schema_name = ? AND table_name = ? AND column_name = ?",
        [schema, table, since.cursor],
    ).fetchone()
    if found is None:
        raise PermanentError(f"duckdb: table {table!r} has no cursor column {since.cursor!r}")
    kind = str(found[0]).upper()
    if kind in CASTABLE:
        return f"CAST(? AS {kind})"
    if kind.startswith("DECIMAL(") and all(p.strip().isdigit() for p in kind[8:-1].split(",")):
        return f"CAST(? AS {kind})"
    return "?"


def window(since: Since, cast: str, *, upper: bool = True) -> tuple[str, list[Any]]:
    col = quote(since.cursor)
    parts, args = ["false" if since.empty else "true"], list[Any]()
    if since.low is not None:
        parts.append(f"{col} {'>=' if since.inclusive else '>'} {cast}")
        args.append(since.low)
    if upper and since.high is not None:
        parts.append(f"{col} <= {cast}")
        args.append(since.high)
    return " AND ".join(parts), args
