"""One write into a DuckDB table, all in one DuckDB transaction: the
statements of each write mode, the load marker, the columns a load adds.

Rows arrive as Arrow tables (types.arrow_table) and go in by `INSERT …
SELECT` from the registered table: DuckDB's own bulk path, no row inserts.
Append and overwrite insert into the target as batches come; upsert and
merge gather the batches in a temporary table of the target's own types,
then apply it with set statements, so each changed row is counted once:
new keys inserted, rows whose values differ (IS DISTINCT FROM) updated,
the rest unchanged, and under merge the target rows whose key is not
written deleted.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Sequence
from typing import Any

import duckdb

from setu_engine.errors import ConfigError, PermanentError, ValueFault
from setu_engine.kinds import CopyBatch, RowChanges, WriteMode
from setu_engine.planning.destination_plan import SchemaChanges
from setu_engine.providers.duckdb import csv as duck_csv
from setu_engine.providers.duckdb import types as duck_types
from setu_engine.staged.markers import KEEP_MARKERS, MARKERS, LoadMarker
from setu_engine.values.types import Batch, Column

# The registered Arrow batch, and the write's gathered rows (upsert, merge).
BATCH_VIEW = "_setu_batch"
GATHERED = "_setu_write_rows"
LATEST = "_setu_write_latest"


def quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def markers_ddl(schema: str) -> str:
    return (
        f"CREATE TABLE IF NOT EXISTS {quote(schema)}.{quote(MARKERS)} ("
        "run_id VARCHAR NOT NULL, stream VARCHAR NOT NULL, part VARCHAR NOT NULL DEFAULT '', "
        "loaded_at TIMESTAMPTZ NOT NULL, rows BIGINT NOT NULL, "
        "PRIMARY KEY (run_id, stream, part))"
    )


def marked_rows(schema: str) -> str:
    return (
        f"SELECT rows FROM {quote(schema)}.{quote(MARKERS)} "
        "WHERE run_id = ? AND stream = ? AND part = ?"
    )


def set_marker(schema: str) -> str:
    return (
        f"INSERT INTO {quote(schema)}.{quote(MARKERS)} (run_id, stream, part, loaded_at, rows) "
        "VALUES (?, ?, ?, now(), ?)"
    )


def applied(conn: duckdb.DuckDBPyConnection, books: str, marker: LoadMarker, keep: int) -> None:
    """In a load's transaction, once its marker is written: the run's
    staging table for the stream is gone (if it had one: stage.py), so is
    its registration; the markers nothing reads any more are pruned: other
    runs' part markers whose staging table is gone, and whole-stream markers
    past the newest `keep`."""
    markers = f"{quote(books)}.{quote(MARKERS)}"
    conn.execute(
        f"DELETE FROM {markers} WHERE run_id = ? AND stream = ? AND part = 'stage'",
        [marker.run_id, marker.stream],
    )
    conn.execute(
        f"DELETE FROM {markers} AS m WHERE m.stream = ? AND m.run_id <> ? AND m.part <> 'stage' "
        "AND CASE WHEN m.part <> '' THEN NOT EXISTS ("
        f"SELECT 1 FROM {markers} s WHERE s.run_id = m.run_id AND s.stream = m.stream "
        "AND s.part = 'stage') "
        "ELSE m.run_id NOT IN ("
        f"SELECT k.run_id FROM {markers} k WHERE k.stream = ? AND k.part = '' "
        "ORDER BY k.loaded_at DESC, k.run_id LIMIT ?) END",
        [marker.stream, marker.run_id, marker.stream, keep],
    )


def table_exists(conn: duckdb.DuckDBPyConnection, schema: str, table: str) -> bool:
    found = conn.execute(
        "SELECT 1 FROM duckdb_tables() WHERE database_name = current_database() "
        "AND schema_name = ? AND table_name = ?",
        [schema, table],
    ).fetchone()
    return found is not None


def existing_columns(conn: duckdb.DuckDBPyConnection, schema: str, table: str) -> list[str]:
    rows = conn.execute(
        "SELECT column_name FROM duckdb_columns() WHERE database_name = current_database() "
        "AND schema_name = ? AND table_name = ? ORDER BY column_index",
        [schema, table],
    ).fetchall()
    return [str(r[0]) for r in rows]


def add_missing(
    conn: duckdb.DuckDBPyConnection, schema: str, table: str, columns: Sequence[Column]
) -> None:
    """Adds each column still missing, in the caller's transaction (DuckDB's
    DDL is transactional: a rollback takes them back)."""
    present = set(existing_columns(conn, schema, table))
    target = f"{quote(schema)}.{quote(table)}"
    for column in columns:
        if column.name not in present:
            conn.execute(
                f"ALTER TABLE {target} ADD COLUMN {quote(column.name)} "
                f"{duck_types.declared(column)}"
            )
            comment(conn, target, column)


def comment(conn: duckdb.DuckDBPyConnection, target: str, column: Column) -> None:
    if duck_types.is_exact_text(column):
        text = duck_types.NUMERIC_COMMENT.replace("'", "''")
        conn.execute(f"COMMENT ON COLUMN {target}.{quote(column.name)} IS '{text}'")


_SOURCE_COLUMN = re.compile(r"source column c(\d+)")


class WritePlan:
    """The statements of one write; each method runs in the worker thread,
    inside the transaction `begin` opens."""

    def __init__(
        self,
        schema: str,
        table: str,
        columns: Sequence[Column],
        mode: WriteMode,
        key: Sequence[str],
        marker: LoadMarker | None,
        changes: SchemaChanges | None,
        books: str,
    ) -> None:
        names = [c.name for c in columns]
        if mode.needs_key:
            if not key:
                raise ConfigError(f"write mode {mode.value} needs a key")
            missing = [k for k in key if k not in names]
            if missing:
                raise ConfigError(f"key column(s) {', '.join(missing)} are not written")
        if len(set(names)) != len(names):
            raise ConfigError(f"stream {table!r}: a column name repeats")
        self.schema, self.table, self.columns = schema, table, list(columns)
        self.mode, self.key, self.marker, self.changes = mode, list(key), marker, changes
        # Where the load markers live: the connection's own schema.
        self.books = books
        self.target = f"{quote(schema)}.{quote(table)}"
        self.names = ", ".join(quote(n) for n in names)
        self.picks = ", ".join(f"c{i}" for i in range(len(names)))
        self.into = GATHERED if mode.needs_key else self.target

    def begin(self, conn: duckdb.DuckDBPyConnection) -> int | None:
        """Opens the transaction and readies the target; with the marker
        recorded already, the rows it recorded (the caller writes nothing)."""
        conn.execute("BEGIN TRANSACTION")
        if self.marker is not None:
            conn.execute(f"CREATE SCHEMA IF NOT EXISTS {quote(self.books)}")
            conn.execute(markers_ddl(self.books))
            found = conn.execute(marked_rows(self.books), _marker_key(self.marker)).fetchone()
            if found is not None:
                return int(found[0])
        conn.execute(f"CREATE SCHEMA IF NOT EXISTS {quote(self.schema)}")
        if table_exists(conn, self.schema, self.table):
            if self.changes:
                add_missing(conn, self.schema, self.table, self.changes.columns)
            self._check(conn)
        else:
            self._create(conn)
        if self.mode is WriteMode.OVERWRITE:
            conn.execute(f"DELETE FROM {self.target}")
        if self.mode.needs_key:
            conn.execute(f"DROP TABLE IF EXISTS temp.{GATHERED}")
            conn.execute(
                f"CREATE TEMP TABLE {GATHERED} AS SELECT {self.names} FROM {self.target} LIMIT 0"
            )
        return None

    def _create(self, conn: duckdb.DuckDBPyConnection) -> None:
        defs = [
            f"{quote(c.name)} {duck_types.declared(c)}{'' if c.nullable else ' NOT NULL'}"
            for c in self.columns
        ]
        if self.key:
            defs.append(f"PRIMARY KEY ({', '.join(map(quote, self.key))})")
        conn.execute(f"CREATE TABLE {self.target} ({', '.join(defs)})")
        for column in self.columns:
            comment(conn, self.target, column)

    def _check(self, conn: duckdb.DuckDBPyConnection) -> None:
        present = set(existing_columns(conn, self.schema, self.table))
        for column in self.columns:
            if column.name not in present:
                raise PermanentError(
                    f"duckdb: table {self.table!r} has no column {column.name!r}; "
                    "add it or leave it out of the write"
                )

    def insert(self, conn: duckdb.DuckDBPyConnection, batch: Batch, before: int) -> None:
        """One batch through Arrow; a value at fault names its row counted
        from the write's first (`before`: rows of earlier batches)."""
        try:
            arrow = duck_types.arrow_table(self.table, self.columns, batch)
        except ValueFault as fault:
            raise fault.located(None, before) from fault
        self._ingest(conn, arrow, self.picks)

    def insert_csv(self, conn: duckdb.DuckDBPyConnection, part: CopyBatch, before: int) -> None:
        """One batch of CSV in the hand-off dialect, parsed by Arrow (csv.py)."""
        try:
            arrow = duck_csv.arrow_table(self.table, self.columns, bytes(part.data))
        except ValueFault as fault:
            raise fault.located(None, before) from fault
        picks = ", ".join(duck_csv.pick(c, f"c{i}") for i, c in enumerate(self.columns))
        self._ingest(conn, arrow, picks)

    def _ingest(self, conn: duckdb.DuckDBPyConnection, arrow: Any, picks: str) -> None:
        conn.register(BATCH_VIEW, arrow)
        try:
            conn.execute(f"INSERT INTO {self.into} ({self.names}) SELECT {picks} FROM {BATCH_VIEW}")
        except (duckdb.ConversionException, duckdb.OutOfRangeException) as exc:
            raise self._conversion(exc) from exc
        finally:
            # An aborted transaction refuses even this; the failure above is
            # the one to report.
            with contextlib.suppress(duckdb.Error):
                conn.unregister(BATCH_VIEW)

    def _conversion(self, exc: duckdb.Error) -> ValueFault:
        at = _SOURCE_COLUMN.search(str(exc))
        column = self.columns[int(at[1])].name if at and int(at[1]) < len(self.columns) else None
        first_line = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        return ValueFault(
            f"duckdb table {self.table!r}: a value does not fit its column ({first_line})",
            column=column,
            value="",
        )

    def finish(self, conn: duckdb.DuckDBPyConnection, written: int) -> RowChanges:
        changes = RowChanges(written)
        if self.mode.needs_key:
            changes = self._apply(conn, written)
        if self.marker is not None:
            conn.execute(set_marker(self.books), [*_marker_key(self.marker), written])
            applied(conn, self.books, self.marker, KEEP_MARKERS)
        conn.execute("COMMIT")
        return changes

    def _apply(self, conn: duckdb.DuckDBPyConnection, written: int) -> RowChanges:
        keys = ", ".join(map(quote, self.key))
        match = " AND ".join(f"t.{quote(k)} = s.{quote(k)}" for k in self.key)
        others = [c.name for c in self.columns if c.name not in self.key]
        # A key written twice: its last row is the one that lands (rowid:
        # the order the rows were gathered in).
        conn.execute(f"DROP TABLE IF EXISTS temp.{LATEST}")
        conn.execute(
            f"CREATE TEMP TABLE {LATEST} AS SELECT {self.names} FROM temp.{GATHERED} "
            f"QUALIFY row_number() OVER (PARTITION BY {keys} ORDER BY rowid DESC) = 1"
        )
        differs = " OR ".join(f"t.{quote(n)} IS DISTINCT FROM s.{quote(n)}" for n in others)
        counted = conn.execute(
            f"SELECT (SELECT count(*) FROM temp.{LATEST}), count(*), "
            f"count(*) FILTER (WHERE {differs or 'false'}) "
            f"FROM temp.{LATEST} AS s JOIN {self.target} AS t ON {match}"
        ).fetchone()
        assert counted is not None
        distinct, matched, changed = (int(v) for v in counted)
        if others and changed:
            sets = ", ".join(f"{quote(n)} = s.{quote(n)}" for n in others)
            conn.execute(
                f"UPDATE {self.target} AS t SET {sets} FROM temp.{LATEST} AS s "
                f"WHERE {match} AND ({differs})"
            )
        conn.execute(
            f"INSERT INTO {self.target} ({self.names}) SELECT {self.names} FROM temp.{LATEST} "
            f"AS s WHERE NOT EXISTS (SELECT 1 FROM {self.target} AS t WHERE {match})"
        )
        deleted = 0
        if self.mode is WriteMode.MERGE:
            gone = conn.execute(
                f"DELETE FROM {self.target} AS t WHERE NOT EXISTS "
                f"(SELECT 1 FROM temp.{LATEST} AS s WHERE {match})"
            ).fetchone()
            deleted = int(gone[0]) if gone else 0
        conn.execute(f"DROP TABLE temp.{LATEST}")
        conn.execute(f"DROP TABLE temp.{GATHERED}")
        # Rows a later row of the same key replaced count as updates of it.
        superseded = written - distinct
        inserted = distinct - matched
        return RowChanges(inserted, changed + superseded, matched - changed, deleted)


def _marker_key(marker: LoadMarker) -> list[Any]:
    return [marker.run_id, marker.stream, marker.part]


def rollback(conn: duckdb.DuckDBPyConnection) -> None:
    # The original failure is what the caller must see, not a failed rollback.
    with contextlib.suppress(duckdb.Error):
        conn.execute("ROLLBACK")
