"""Staging tables of resumable loads in SQLite (engine/resumable.py).

SQLite runs the operator chain in Python, so a staging table holds the
chain's output, stored as the target stores it (sqlite_values): applying
it is one INSERT … SELECT inside the write's own transaction."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

from setu_agent.engine.markers import MARKERS, LoadMarker
from setu_agent.engine.providers.sqlite_values import DECLARED, row_writer
from setu_agent.engine.types import Batch, Column


def quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def marked(conn: sqlite3.Connection, marker: LoadMarker, marked_rows: str) -> int | None:
    exists = conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (MARKERS,)
    ).fetchone()
    if exists is None:
        return None
    found = conn.execute(marked_rows, (marker.run_id, marker.stream, marker.part)).fetchone()
    return None if found is None else int(found[0])


def create(conn: sqlite3.Connection, stage: str, columns: Sequence[Column]) -> None:
    defs = ", ".join(f"{quote(c.name)} {DECLARED[c.type]}" for c in columns)
    conn.execute(f"CREATE TABLE IF NOT EXISTS {quote(stage)} ({defs})")


def insert(conn: sqlite3.Connection, stage: str, columns: Sequence[Column], batch: Batch) -> None:
    to_sqlite = row_writer(stage, columns)
    marks = ", ".join("?" for _ in columns)
    names = ", ".join(quote(c.name) for c in columns)
    conn.executemany(
        f"INSERT INTO {quote(stage)} ({names}) VALUES ({marks})",
        [to_sqlite(row) for row in batch],
    )
