"""Staging tables of resumable loads in DuckDB (setu_engine/staged/resumable.py).

The operator chain runs in Python, so a staging table holds the chain's
output in the target's landing types (types.py): each part goes in through
Arrow with its marker in one transaction, and the apply is one `INSERT …
SELECT` from it inside the write's own transaction (write.WritePlan).

Staging tables live in the connection's schema, beside the load markers,
whatever schema the target is in, so dropping one needs only its name. As
in SQLite and PostgreSQL, a marker of part `stage` registers each one:
written with it, deleted with it; finding abandoned ones and pruning
markers read the markers table only.

Every function runs in the worker thread on the connector's connection.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from datetime import timedelta

import duckdb

from setu_engine.providers.duckdb import types as duck_types
from setu_engine.providers.duckdb.write import (
    BATCH_VIEW,
    markers_ddl,
    quote,
    rollback,
    set_marker,
    table_exists,
)
from setu_engine.staged.markers import MARKERS, LoadMarker
from setu_engine.values.types import Batch, Column


def _markers(books: str) -> str:
    return f"{quote(books)}.{quote(MARKERS)}"


def marked(conn: duckdb.DuckDBPyConnection, books: str, marker: LoadMarker) -> int | None:
    if not table_exists(conn, books, MARKERS):
        return None
    found = conn.execute(
        f"SELECT rows FROM {_markers(books)} WHERE run_id = ? AND stream = ? AND part = ?",
        [marker.run_id, marker.stream, marker.part],
    ).fetchone()
    return None if found is None else int(found[0])


def _begin(conn: duckdb.DuckDBPyConnection, books: str) -> None:
    conn.execute("BEGIN TRANSACTION")
    conn.execute(f"CREATE SCHEMA IF NOT EXISTS {quote(books)}")
    conn.execute(markers_ddl(books))


def create(
    conn: duckdb.DuckDBPyConnection,
    books: str,
    stage: str,
    columns: Sequence[Column],
    marker: LoadMarker,
) -> None:
    """The staging table, created if missing with its registering marker,
    in one transaction."""
    defs = ", ".join(f"{quote(c.name)} {duck_types.declared(c)}" for c in columns)
    _begin(conn, books)
    try:
        conn.execute(f"CREATE TABLE IF NOT EXISTS {quote(books)}.{quote(stage)} ({defs})")
        conn.execute(
            f"INSERT OR IGNORE INTO {_markers(books)} (run_id, stream, part, loaded_at, rows) "
            "VALUES (?, ?, ?, now(), 0)",
            [marker.run_id, marker.stream, marker.part],
        )
        conn.execute("COMMIT")
    except BaseException:
        rollback(conn)
        raise


def copy(
    conn: duckdb.DuckDBPyConnection,
    books: str,
    stage: str,
    columns: Sequence[Column],
    part: Batch,
    marker: LoadMarker,
) -> bool:
    """One part with its marker, in one transaction; False when an earlier
    attempt copied it."""
    arrow = duck_types.arrow_table(stage, columns, part)
    _begin(conn, books)
    try:
        if marked(conn, books, marker) is not None:
            rollback(conn)
            return False
        names = ", ".join(quote(c.name) for c in columns)
        picks = ", ".join(f"c{i}" for i in range(len(columns)))
        conn.register(BATCH_VIEW, arrow)
        try:
            conn.execute(
                f"INSERT INTO {quote(books)}.{quote(stage)} ({names}) "
                f"SELECT {picks} FROM {BATCH_VIEW}"
            )
        finally:
            with contextlib.suppress(duckdb.Error):
                conn.unregister(BATCH_VIEW)
        conn.execute(set_marker(books), [marker.run_id, marker.stream, marker.part, len(part)])
        conn.execute("COMMIT")
        return True
    except BaseException:
        rollback(conn)
        raise


def insert_staged(
    conn: duckdb.DuckDBPyConnection, books: str, stage: str, into: str, names: str
) -> int:
    """The staging table's rows into `into` (the target, or the write's
    gathered rows), in the order they were staged; then the staging table
    is dropped. The rows staged."""
    source = f"{quote(books)}.{quote(stage)}"
    conn.execute(f"INSERT INTO {into} ({names}) SELECT {names} FROM {source} ORDER BY rowid")
    found = conn.execute(f"SELECT count(*) FROM {source}").fetchone()
    conn.execute(f"DROP TABLE {source}")
    return int(found[0]) if found else 0


def drop(conn: duckdb.DuckDBPyConnection, books: str, stage: str, marker: LoadMarker) -> None:
    """The staging table and its markers (but the whole-stream one), at once."""
    _begin(conn, books)
    try:
        conn.execute(
            f"DELETE FROM {_markers(books)} WHERE run_id = ? AND stream = ? AND part <> ''",
            [marker.run_id, marker.stream],
        )
        conn.execute(f"DROP TABLE IF EXISTS {quote(books)}.{quote(stage)}")
        conn.execute("COMMIT")
    except BaseException:
        rollback(conn)
        raise


def stale(
    conn: duckdb.DuckDBPyConnection, books: str, run_id: str, idle: timedelta
) -> list[LoadMarker]:
    """Other runs' stage markers whose run and stream had no marker written
    for longer than `idle`."""
    if not table_exists(conn, books, MARKERS):
        return []
    markers = _markers(books)
    found = conn.execute(
        f"SELECT s.run_id, s.stream, s.part FROM {markers} s "
        "WHERE s.part = 'stage' AND s.run_id <> ? "
        f"AND (SELECT max(m.loaded_at) FROM {markers} m "
        "     WHERE m.run_id = s.run_id AND m.stream = s.stream) < now() - to_seconds(?) "
        "ORDER BY s.loaded_at",
        [run_id, idle.total_seconds()],
    ).fetchall()
    return [LoadMarker(str(run), str(stream), str(part)) for run, stream, part in found]
