"""Staging tables of resumable loads in SQLite (setu_engine/staged/resumable.py).

SQLite runs the operator chain in Python, so a staging table holds the
chain's output, stored as the target stores it (values.py): applying
it is one INSERT … SELECT inside the write's own transaction.

As in PostgreSQL (setu_engine/providers/postgres/stage.py), a marker
of part `stage` registers each staging table: written with it, deleted
with it; the search for abandoned ones and the pruning of markers read
the markers table only."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from datetime import timedelta

from setu_engine.providers.sqlite.values import DECLARED, row_writer
from setu_engine.staged.markers import MARKERS, LoadMarker
from setu_engine.values.types import Batch, Column


def quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def marked(conn: sqlite3.Connection, marker: LoadMarker, marked_rows: str) -> int | None:
    if not _has_markers(conn):
        return None
    found = conn.execute(marked_rows, (marker.run_id, marker.stream, marker.part)).fetchone()
    return None if found is None else int(found[0])


NOW = "strftime('%Y-%m-%dT%H:%M:%fZ', 'now')"
REGISTER = (
    f"INSERT OR IGNORE INTO {quote(MARKERS)} (run_id, stream, part, loaded_at, rows) "
    f"VALUES (?, ?, ?, {NOW}, 0)"
)
# Other runs' staging tables with no marker of their run and stream written
# for `idle` (a strftime modifier such as '-86400 seconds').
STALE = f"""
SELECT s.run_id, s.stream, s.part FROM {quote(MARKERS)} s
WHERE s.part = 'stage' AND s.run_id <> ?
  AND (SELECT max(m.loaded_at) FROM {quote(MARKERS)} m
       WHERE m.run_id = s.run_id AND m.stream = s.stream)
      < strftime('%Y-%m-%dT%H:%M:%fZ', 'now', ?)
ORDER BY s.loaded_at
"""
FORGET_STAGE = f"DELETE FROM {quote(MARKERS)} WHERE run_id = ? AND stream = ? AND part <> ''"
UNREGISTER = f"DELETE FROM {quote(MARKERS)} WHERE run_id = ? AND stream = ? AND part = 'stage'"
# See postgres_stage.PRUNE. Parameters: stream, run, stream, keep.
PRUNE = f"""
DELETE FROM {quote(MARKERS)} AS m
WHERE m.stream = ? AND m.run_id <> ? AND m.part <> 'stage'
  AND CASE WHEN m.part <> '' THEN NOT EXISTS (
          SELECT 1 FROM {quote(MARKERS)} s
          WHERE s.run_id = m.run_id AND s.stream = m.stream AND s.part = 'stage')
      ELSE m.run_id NOT IN (
          SELECT k.run_id FROM {quote(MARKERS)} k WHERE k.stream = ? AND k.part = ''
          ORDER BY k.loaded_at DESC, k.run_id LIMIT ?)
      END
"""


def create(
    conn: sqlite3.Connection,
    stage: str,
    columns: Sequence[Column],
    marker: LoadMarker,
    markers_ddl: str,
) -> None:
    """The staging table, created if missing with its registering marker,
    in one transaction."""
    defs = ", ".join(f"{quote(c.name)} {DECLARED[c.type]}" for c in columns)
    conn.execute("BEGIN IMMEDIATE")
    try:
        conn.execute(markers_ddl)
        conn.execute(f"CREATE TABLE IF NOT EXISTS {quote(stage)} ({defs})")
        conn.execute(REGISTER, (marker.run_id, marker.stream, marker.part))
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise


def drop(conn: sqlite3.Connection, stage: str, marker: LoadMarker, markers_ddl: str) -> None:
    """The staging table and its markers (but the whole-stream one), at once."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        conn.execute(markers_ddl)
        conn.execute(FORGET_STAGE, (marker.run_id, marker.stream))
        conn.execute(f"DROP TABLE IF EXISTS {quote(stage)}")
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise


def stale(conn: sqlite3.Connection, run_id: str, idle: timedelta) -> list[LoadMarker]:
    if not _has_markers(conn):
        return []
    modifier = f"-{idle.total_seconds():f} seconds"
    found = conn.execute(STALE, (run_id, modifier)).fetchall()
    return [LoadMarker(run, stream, part) for run, stream, part in found]


def applied(conn: sqlite3.Connection, marker: LoadMarker, keep: int) -> None:
    """In a load's transaction, once its marker is written: the run's
    staging table for the stream is gone (if it had one), so is its
    registration; the markers nothing reads any more are pruned."""
    conn.execute(UNREGISTER, (marker.run_id, marker.stream))
    conn.execute(PRUNE, (marker.stream, marker.run_id, marker.stream, keep))


def _has_markers(conn: sqlite3.Connection) -> bool:
    found = conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (MARKERS,)
    ).fetchone()
    return found is not None


def insert(conn: sqlite3.Connection, stage: str, columns: Sequence[Column], batch: Batch) -> None:
    to_sqlite = row_writer(stage, columns)
    marks = ", ".join("?" for _ in columns)
    names = ", ".join(quote(c.name) for c in columns)
    conn.executemany(
        f"INSERT INTO {quote(stage)} ({names}) VALUES ({marks})",
        [to_sqlite(row) for row in batch],
    )
