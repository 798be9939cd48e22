"""The `postgres` provider: asyncpg, and binary COPY at both ends.

Rows never become Python objects on the PostgreSQL → PostgreSQL path: a
table is read as binary COPY batches and loaded with binary COPY, and the
operator chain runs inside the destination as one INSERT … SELECT compiled
from the chain (operators/chain.py). Decoding a million rows into Python and
encoding them back costs three times the raw pipe; COPY bytes cost nothing.

Reads are batched by ctid page ranges (TID range scans, PostgreSQL 14+) in one
REPEATABLE READ snapshot: each batch is a separate COPY whose row count the
server reports, so progress and cancellation have a grain, memory stays
bounded, and every batch is a self-contained COPY stream.
"""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import asyncpg

from setu_engine.capabilities import Capabilities
from setu_engine.errors import ConfigError, PermanentError, ProviderError, SqlTypeError, ValueFault
from setu_engine.kinds import CopyBatch, RowChanges, WriteMode, Written
from setu_engine.operators.chain import Plan, parse_spec
from setu_engine.planning.destination_plan import SchemaChanges, TableShape
from setu_engine.providers.postgres import copying
from setu_engine.providers.postgres import json as postgres_json
from setu_engine.providers.postgres import shape as postgres_shape
from setu_engine.providers.postgres import stage as postgres_stage
from setu_engine.providers.postgres.failures import postgres_error
from setu_engine.providers.servers import check_server_fields, tls_context
from setu_engine.staged import pgcopy
from setu_engine.staged.markers import KEEP_MARKERS, MARKERS, LoadMarker
from setu_engine.staged.pgcopy_split import CopySplitter
from setu_engine.support.closing import closing
from setu_engine.support.egress import Egress
from setu_engine.support.secrets import check_reference, is_reference
from setu_engine.values import sqltypes
from setu_engine.values.types import FROM_PG, PG_TYPES, Batch, Column, Stream

if TYPE_CHECKING:
    from setu_engine.staged.resumable import Target
    from setu_engine.values.window import Since

KEYS = frozenset(
    {"host", "port", "database", "user", "password", "schema", "ssl", "connect_timeout"}
)
# What a statement may raise: the server's errors, and a session that went
# away under it (closed by a restart, reset); postgres_error classifies them.
DRIVER_ERRORS = (asyncpg.PostgresError, asyncpg.InterfaceError, OSError)

# The type each neutral type is staged as: a column of any other type is cast
# in the read query, so every part decodes with the neutral codec.
CANONICAL: dict[str, str] = {
    "boolean": "bool",
    "smallint": "int2",
    "integer": "int4",
    "bigint": "int8",
    "real": "float4",
    "double": "float8",
    "numeric": "numeric",
    "text": "text",
    "bytes": "bytea",
    "date": "date",
    "time": "time",
    "timestamp": "timestamp",
    "timestamptz": "timestamptz",
    "uuid": "uuid",
    "json": "jsonb",
}

# Rows per heap page when the planner has no statistics yet (never analysed);
# DISCOVER's estimate uses the same figure.
FALLBACK_ROWS_PER_PAGE = 60
DISCOVER = """
SELECT c.relname, c.relkind,
       -- Never analysed (reltuples < 0): guess from the pages it fills.
       CASE WHEN c.reltuples >= 0 THEN c.reltuples::bigint
            ELSE (pg_relation_size(c.oid) / current_setting('block_size')::int) * 60
       END AS estimate,
       a.attname,
       -- A domain is read, and lands, as its base type (and its NOT NULL).
       coalesce(b.typname, t.typname) AS typname,
       format_type(coalesce(b.oid, t.oid), CASE WHEN b.oid IS NULL THEN a.atttypmod
                                                ELSE t.typtypmod END) AS sql_type,
       a.attnotnull OR t.typnotnull AS attnotnull,
       array_position(i.indkey::int2[], a.attnum) AS key_position
FROM pg_class c
JOIN pg_namespace n ON n.oid = c.relnamespace
JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
JOIN pg_type t ON t.oid = a.atttypid
LEFT JOIN pg_type b ON t.typtype = 'd' AND b.oid = t.typbasetype
LEFT JOIN pg_index i ON i.indrelid = c.oid AND i.indisprimary
WHERE n.nspname = $1 AND c.relkind IN ('r', 'p', 'v', 'm', 'f')
  -- A partition's rows are read through its parent; offering both would
  -- copy them twice when a pipeline takes every stream.
  AND NOT c.relispartition
  -- The load markers are the runtime's books, not a stream.
  AND c.relname <> '_setu_loads'
  AND left(c.relname, 12) <> '_setu_stage_'  -- resumable loads' staging tables
ORDER BY c.relname, a.attnum
"""

TABLE_PAGES = """
SELECT c.relkind::text AS relkind,
       pg_relation_size(c.oid) / current_setting('block_size')::int AS pages,
       CASE WHEN c.relpages > 0 AND c.reltuples > 0
            THEN c.reltuples / c.relpages ELSE 0 END AS rows_per_page
FROM pg_class c WHERE c.oid = $1::regclass
"""

TARGET_COLUMNS = """
SELECT a.attname, t.typname
FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid
WHERE a.attrelid = $1::regclass AND a.attnum > 0 AND NOT a.attisdropped
ORDER BY a.attnum
"""

# Load markers (setu_engine/staged/markers.py): one row per stream (or part) a run
# loaded, written in the load's own transaction, in the connection's schema.
MARKERS_DDL = """
CREATE TABLE IF NOT EXISTS {table} (
    run_id uuid NOT NULL,
    stream text NOT NULL,
    part text NOT NULL DEFAULT '',
    loaded_at timestamptz NOT NULL DEFAULT now(),
    rows bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (run_id, stream, part)
)
"""
# Claims a load inside its transaction. A concurrent load of the same piece
# waits here until the other commits (then finds its marker) or rolls back
# (then claims it), so two attempts never both write.
CLAIM_MARKER = """
INSERT INTO {table} (run_id, stream, part) VALUES ($1, $2, $3)
ON CONFLICT DO NOTHING RETURNING true
"""
MARKED_ROWS = "SELECT rows FROM {table} WHERE run_id = $1 AND stream = $2 AND part = $3"
SET_MARKER = """
UPDATE {table} SET rows = $4, loaded_at = now()
WHERE run_id = $1 AND stream = $2 AND part = $3
"""

UNIQUE_KEYS = """
SELECT array_agg(a.attname ORDER BY a.attname)::text[] AS columns
FROM pg_index i
JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey)
-- ON CONFLICT can only arbitrate on a plain, immediate, non-partial index.
WHERE i.indrelid = $1::regclass AND i.indisunique AND i.indpred IS NULL
  AND i.indexprs IS NULL AND i.indimmediate
GROUP BY i.indexrelid
"""


def quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


# What the transfer may ask of a PostgreSQL connector (docs/providers.md).
CAPABILITIES = Capabilities(
    copy_out=True,
    copy_in=True,
    json_lines_out=True,
    csv_out=True,
    resumable_copies=True,
    counts_rows=True,
    staged_loads=True,
    inspectable=True,
    increments="cursor",
    reusable_sessions=True,
    reports_changes=frozenset({"append", "overwrite", "upsert", "merge"}),
    enforces_keys=True,
)


class PostgresProvider:
    capabilities = CAPABILITIES
    name = "postgres"

    def validate_config(self, config: dict[str, Any]) -> None:
        unknown = sorted(set(config) - KEYS)
        if unknown:
            raise ConfigError(
                f"config: unknown field(s) {', '.join(unknown)}; postgres takes "
                f"{', '.join(sorted(KEYS))}"
            )
        # Where the database is may be as private as how to log in to it:
        # host, database and user may be secret references too.
        for field in ("host", "database", "user"):
            if field not in config and field == "host":
                continue
            value = config.get(field)
            if is_reference(value):
                check_reference(value, f"config.{field}")
            elif not isinstance(value, str) or not value:
                raise ConfigError(
                    f"config.{field}: required, a non-empty string or a secret reference"
                )
        if "schema" in config and (not isinstance(config["schema"], str) or not config["schema"]):
            raise ConfigError("config.schema: a non-empty string")
        check_server_fields(config, 5432)

    async def connect(
        self, config: dict[str, Any], egress: Egress | None = None, *, root: Path | None = None
    ) -> PostgresConnector:
        # `root` confines nothing here: the runtime's policy placed a socket folder.
        host = config.get("host", "localhost")
        if not isinstance(host, str) or not host.strip():
            # asyncpg would take PGHOST, then the usual socket folders: this
            # process's machine, not anything the connection named.
            raise ConfigError("config.host: empty; name the database's host")
        port = int(config.get("port", 5432))
        where = f"{host}:{port}/{config['database']}"
        address = host
        if egress is not None and not host.startswith("/"):
            address = await egress.address(host, port, "config.host")
        mode = config.get("ssl", "prefer")
        try:
            try:
                conn = await self._open(config, address, port, _tls(mode, host))
            except ConnectionError as exc:
                # `prefer` falls back to plain text when the server has no TLS.
                if mode != "prefer" or "rejected SSL upgrade" not in str(exc):
                    raise
                conn = await self._open(config, address, port, False)
        # InterfaceError: refused client settings.
        except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError, TimeoutError) as exc:
            raise postgres_error(
                exc, f"postgres: cannot connect to {where}", connecting=True
            ) from exc
        # Fetched rows decode as binary COPY parts do (±infinity, float4
        # digits, JSON null): one decoder for both paths.
        await pgcopy.use_codec(conn)
        return PostgresConnector(conn, config.get("schema", "public"), where)

    @staticmethod
    async def _open(
        config: dict[str, Any], address: str, port: int, tls: ssl.SSLContext | bool
    ) -> asyncpg.Connection:
        # Every setting is explicit: asyncpg fills anything left as None from
        # PG* variables, ~/.pgpass and ~/.postgresql/, which hold the
        # credentials of whoever runs this process, not of this connection.
        return await asyncpg.connect(
            host=address,
            port=port,
            user=config["user"],
            password=config.get("password") or "",
            database=config["database"],
            ssl=tls,
            direct_tls=False,
            server_settings={"application_name": "setu"},
            timeout=float(config.get("connect_timeout", 10)),
            # Batches are COPY streams, not prepared statements; keep the
            # server's per-session cache small.
            statement_cache_size=32,
        )


def _tls(mode: str, server_name: str) -> ssl.SSLContext | bool:
    """The TLS context of an ssl mode; none over a Unix socket (asyncpg
    takes False for none)."""
    if server_name.startswith("/"):
        return False
    return tls_context(mode, server_name) or False


class PostgresConnector:
    capabilities = CAPABILITIES

    def __init__(self, conn: asyncpg.Connection, schema: str, where: str) -> None:
        self._conn = conn
        self._schema = schema
        self._where = where
        # Rows read from the database by read/copy_batches (CountsRows).
        self.rows_read = 0

    async def close(self) -> None:
        await self._conn.close()

    # -- reuse by the cloud worker's connection cache (setu_agent/cloud/connections.py)

    def idle(self) -> bool:
        return not self._conn.is_closed() and not self._conn.is_in_transaction()

    async def reset(self) -> None:
        # Rollback, RESET ALL, CLOSE ALL, UNLISTEN *, advisory locks released:
        # one round trip, which also proves the session is alive.
        await self._conn.reset(timeout=10)

    async def test(self) -> str:
        try:
            version = await self._conn.fetchval("SHOW server_version")
            streams = await self.discover()
        except DRIVER_ERRORS as exc:
            raise postgres_error(exc, "postgres") from exc
        tables = f"{len(streams)} table{'' if len(streams) == 1 else 's'}"
        return f"PostgreSQL {version} at {self._where} ({tables} in schema {self._schema})"

    async def discover(self) -> list[Stream]:
        try:
            records = await self._conn.fetch(DISCOVER, self._schema)
        except DRIVER_ERRORS as exc:
            raise postgres_error(exc, "postgres: discover failed") from exc
        tables: dict[str, list[Any]] = {}
        for record in records:
            tables.setdefault(record["relname"], []).append(record)
        return [self._stream(name, rows) for name, rows in tables.items()]

    def _stream(self, name: str, records: list[Any]) -> Stream:
        columns: list[Column] = []
        select: list[str] = []
        keyed: list[tuple[int, str]] = []
        for record in records:
            neutral = FROM_PG.get(record["typname"], "text")
            # format_type's text is the catalog's: sqltypes keeps it only as
            # a whitelisted name rendered anew (an enum lands as text).
            sql_type = sqltypes.kept(record["sql_type"], neutral)
            columns.append(Column(record["attname"], neutral, not record["attnotnull"], sql_type))
            expr = quote(record["attname"])
            if record["typname"] != CANONICAL[neutral]:
                expr = f"{expr}::{PG_TYPES[neutral]}"
            select.append(expr)
            if record["key_position"] is not None:
                keyed.append((record["key_position"], record["attname"]))
        relation = f"{quote(self._schema)}.{quote(name)}"
        return Stream(
            name=name,
            namespace=self._schema,
            columns=tuple(columns),
            primary_key=tuple(column for _, column in sorted(keyed)),
            row_estimate=int(records[0]["estimate"]),
            locator={"relation": relation, "select": ", ".join(select)},
        )

    def _query(self, stream: Stream) -> str:
        locator = stream.locator or self._locate(stream)
        query = f"SELECT {locator['select']} FROM {locator['relation']}"
        if stream.since is None:
            return query
        # In cursor order, so an index on the cursor serves the read.
        return f"{query} WHERE {_window(stream.since)} ORDER BY {quote(stream.since.cursor)}"

    async def cursor_high(self, stream: Stream) -> tuple[str | None, int]:
        """The highest cursor value an incremental read would reach, and how
        many rows it would read (setu_engine/planning/incremental.py)."""
        assert stream.since is not None, "only for an incremental read"
        relation = (stream.locator or self._locate(stream))["relation"]
        col = quote(stream.since.cursor)
        where = _window(stream.since, upper=False)
        sql = f"SELECT max({col})::text AS high, count(*) AS n FROM {relation} WHERE {where}"
        try:
            record = await self._conn.fetchrow(sql)
        except DRIVER_ERRORS as exc:
            raise postgres_error(exc, f"postgres: reading {stream.name}") from exc
        return record["high"], int(record["n"])

    def _locate(self, stream: Stream) -> dict[str, Any]:
        """A locator for a stream that did not come from this connector's
        discover (a manifest's schema): the columns by name, as staged."""
        select = ", ".join(f"{quote(c.name)}::{PG_TYPES[c.type]}" for c in stream.columns)
        schema = stream.namespace or self._schema
        return {"relation": f"{quote(schema)}.{quote(stream.name)}", "select": select}

    async def preview(self, stream: Stream, limit: int) -> Batch:
        try:
            records = await self._conn.fetch(f"{self._query(stream)} LIMIT {int(limit)}")
        except DRIVER_ERRORS as exc:
            raise postgres_error(exc, "postgres") from exc
        return [tuple(record) for record in records]

    async def read(self, stream: Stream, batch_rows: int) -> AsyncIterator[Batch]:
        try:
            async with self._conn.transaction(isolation="repeatable_read", readonly=True):
                async for batch in self._cursor_batches(self._query(stream), batch_rows):
                    self.rows_read += len(batch)
                    yield batch
        except DRIVER_ERRORS as exc:
            raise postgres_error(exc, f"postgres: reading {stream.name}") from exc

    async def resumes(self, stream: Stream) -> bool:
        """A full read of a table (or materialized view) goes in ctid ranges,
        each batch with the page its next range starts at: it resumes there
        (ResumableCopies), in a new snapshot."""
        if stream.since is not None:
            return False
        relation = (stream.locator or self._locate(stream))["relation"]
        try:
            shape = await self._conn.fetchrow(TABLE_PAGES, relation)
        except DRIVER_ERRORS as exc:
            raise postgres_error(exc, f"postgres: reading {stream.name}") from exc
        return shape is not None and shape["relkind"] in ("r", "m")

    def copy_batches_after(
        self, stream: Stream, batch_rows: int, after: str | None
    ) -> AsyncIterator[CopyBatch]:
        if not after:  # a read from the start is the plain one
            return self.copy_batches(stream, batch_rows)
        return self._copy_ranges(stream, batch_rows, int(after))

    def copy_batches(self, stream: Stream, batch_rows: int) -> AsyncIterator[CopyBatch]:
        return self._copy_ranges(stream, batch_rows, 0)

    async def _copy_ranges(
        self, stream: Stream, batch_rows: int, start_page: int
    ) -> AsyncIterator[CopyBatch]:
        query = self._query(stream)
        relation = (stream.locator or self._locate(stream))["relation"]
        try:
            async with self._conn.transaction(isolation="repeatable_read", readonly=True):
                shape = await self._conn.fetchrow(TABLE_PAGES, relation)
                if shape["relkind"] not in ("r", "m") or stream.since is not None:
                    # An incremental read is in cursor order (views and
                    # partitioned parents have no ctid ranges): one COPY,
                    # cut into batches as it streams, keeps memory bounded.
                    async for batch in self._copy_split(query, batch_rows):
                        self.rows_read += batch.rows
                        yield batch
                    return
                per_page = float(shape["rows_per_page"]) or FALLBACK_ROWS_PER_PAGE
                step = max(1, int(batch_rows / per_page))
                pages = int(shape["pages"])
                for first in range(start_page, max(pages, 1), step):
                    # The last range is open-ended: nothing visible to this
                    # snapshot lies beyond it, but a bound costs nothing.
                    where = f"ctid >= '({first},0)'::tid"
                    if first + step < pages:
                        where += f" AND ctid < '({first + step},0)'::tid"
                    copied = await self._copy_out(f"{query} WHERE {where}")
                    self.rows_read += copied.rows
                    # Where a resumed read starts: the next range's first page.
                    yield CopyBatch(copied.data, copied.rows, str(first + step))
        except DRIVER_ERRORS as exc:
            raise postgres_error(exc, f"postgres: reading {stream.name}") from exc

    async def json_lines(self, stream: Stream, batch_rows: int) -> AsyncIterator[CopyBatch]:
        """The stream's rows as JSON Lines that PostgreSQL renders itself
        (postgres_json), in batches as copy_batches reads them."""
        lines = postgres_json.line_sql(stream.columns, self._query(stream))
        relation = (stream.locator or self._locate(stream))["relation"]
        try:
            async with self._conn.transaction(isolation="repeatable_read", readonly=True):
                await self._conn.execute("SET LOCAL TimeZone = 'UTC'")
                shape = await self._conn.fetchrow(TABLE_PAGES, relation)
                if shape["relkind"] not in ("r", "m") or stream.since is not None:
                    cursor = await self._conn.cursor(lines)
                    while batch := await cursor.fetch(batch_rows):
                        data = "".join([f"{record[0]}\n" for record in batch]).encode()
                        yield CopyBatch(data, len(batch))
                    return
                per_page = float(shape["rows_per_page"]) or FALLBACK_ROWS_PER_PAGE
                step = max(1, int(batch_rows / per_page))
                pages = int(shape["pages"])
                query = self._query(stream)
                for first in range(0, max(pages, 1), step):
                    where = f"ctid >= '({first},0)'::tid"
                    if first + step < pages:
                        where += f" AND ctid < '({first + step},0)'::tid"
                    ranged = postgres_json.line_sql(stream.columns, f"{query} WHERE {where}")
                    yield await self._json_out(ranged)
        except DRIVER_ERRORS as exc:
            raise postgres_error(exc, f"postgres: reading {stream.name}") from exc

    async def _json_out(self, query: str) -> CopyBatch:
        data, rows = await copying.copy_whole(self._conn, query, "text")
        return CopyBatch(postgres_json.unescape(data), rows)

    async def _cursor_batches(self, query: str, batch_rows: int) -> AsyncIterator[Batch]:
        cursor = await self._conn.cursor(query)
        while batch := await cursor.fetch(batch_rows):
            yield [tuple(record) for record in batch]

    def _copy_split(self, query: str, batch_rows: int) -> AsyncIterator[CopyBatch]:
        """One binary COPY of `query`, in batches of `batch_rows` rows as it
        arrives (setu_engine/staged/pgcopy_split.py, copying.copy_split)."""
        return copying.copy_split(self._conn, query, "binary", CopySplitter(batch_rows))

    async def _copy_out(self, query: str) -> CopyBatch:
        data, rows = await copying.copy_whole(self._conn, query, "binary")
        return CopyBatch(data, rows)

    async def write(
        self,
        stream: str,
        columns: Sequence[Column],
        batches: AsyncIterator[Batch],
        mode: WriteMode,
        key: Sequence[str],
        *,
        schema: str | None = None,
        marker: LoadMarker | None = None,
        changes: SchemaChanges | None = None,
    ) -> int:
        async def parts() -> AsyncIterator[CopyBatch]:
            before = 0
            async with closing(batches):
                async for batch in batches:
                    try:
                        data = pgcopy.encode(columns, batch)
                    except ValueFault as fault:
                        raise fault.located(None, before) from fault
                    before += len(batch)
                    yield CopyBatch(data, len(batch))

        plan = parse_spec(None).chain_for(stream).plan(columns)
        async with closing(parts()) as copies:
            return await self.write_copy(
                stream,
                columns,
                copies,
                plan,
                mode,
                key,
                schema=schema,
                marker=marker,
                changes=changes,
            )

    async def write_copy(
        self,
        stream: str,
        columns: Sequence[Column],
        parts: AsyncIterator[CopyBatch],
        plan: Plan,
        mode: WriteMode,
        key: Sequence[str],
        *,
        schema: str | None = None,
        marker: LoadMarker | None = None,
        changes: SchemaChanges | None = None,
    ) -> int:
        # `stream` is one identifier, dots and all: only the pipeline's author
        # (through `schema`) picks another schema than the configured one.
        load = _Load(self._conn, schema or self._schema, stream, columns, plan, mode, key, changes)
        try:
            markers = await self._markers() if marker is not None else ""
            async with self._conn.transaction():
                if marker is not None:
                    recorded = await self._claim(markers, marker)
                    if recorded is not None:
                        return recorded  # an earlier attempt loaded it
                # The compiled chain renders timestamptz as UTC (operators).
                await self._conn.execute("SET LOCAL TimeZone = 'UTC'")
                written = await load.run(parts)
                if marker is not None:
                    key_of = (marker.run_id, marker.stream, marker.part)
                    await self._conn.execute(
                        SET_MARKER.format(table=markers), *key_of, int(written)
                    )
                    await postgres_stage.applied(self._conn, markers, marker, KEEP_MARKERS)
                return written
        except DRIVER_ERRORS as exc:
            raise postgres_error(exc, f"postgres: loading {load.target}") from exc

    async def _markers(self) -> str:
        """The marker table, created if missing: apart from any load and
        under a lock, so two first loads cannot race to create it."""
        table = f"{quote(self._schema)}.{quote(MARKERS)}"
        if await self._conn.fetchval("SELECT to_regclass($1)", table) is None:
            async with self._conn.transaction():
                await self._conn.execute("SELECT pg_advisory_xact_lock(hashtext($1))", table)
                await self._conn.execute(MARKERS_DDL.format(table=table))
        return table

    async def _set_marker(self, markers: str, marker: LoadMarker, rows: int) -> None:
        key = (marker.run_id, marker.stream, marker.part)
        await self._conn.execute(SET_MARKER.format(table=markers), *key, rows)

    async def _claim(self, markers: str, marker: LoadMarker) -> int | None:
        """None when this load goes on (its marker claimed in its own
        transaction); else the rows the attempt that loaded it recorded."""
        key = (marker.run_id, marker.stream, marker.part)
        if await self._conn.fetchval(CLAIM_MARKER.format(table=markers), *key):
            return None
        rows: int = await self._conn.fetchval(MARKED_ROWS.format(table=markers), *key)
        return rows

    # -- resumable loads (setu_engine/staged/resumable.py, providers/postgres/stage.py)

    # The staging table takes the staged bytes as they are; the chain runs
    # when it is applied.
    copies = True

    async def marked(self, marker: LoadMarker) -> int | None:
        try:
            markers = await self._markers()
            key = (marker.run_id, marker.stream, marker.part)
            rows: int | None = await self._conn.fetchval(MARKED_ROWS.format(table=markers), *key)
            return rows
        except DRIVER_ERRORS as exc:
            raise postgres_error(exc, "postgres: reading load markers") from exc

    async def prepare_stage(
        self, stage: str, columns: Sequence[Column], schema: str | None, marker: LoadMarker
    ) -> None:
        relation = f"{quote(await self._stage_schema(stage, schema))}.{quote(stage)}"
        try:
            markers = await self._markers()
            await postgres_stage.create(self._conn, relation, _ddl(columns), markers, marker)
        except DRIVER_ERRORS as exc:
            raise postgres_error(exc, f"postgres: creating {relation}") from exc

    async def stage_part(
        self,
        stage: str,
        columns: Sequence[Column],
        part: CopyBatch | Batch,
        marker: LoadMarker,
        schema: str | None,
    ) -> bool:
        assert isinstance(part, CopyBatch)
        plan = parse_spec(None).chain_for(stage).plan(columns)
        at = await self._stage_schema(stage, schema)
        load = _Load(self._conn, at, stage, columns, plan, WriteMode.APPEND, ())
        try:
            markers = await self._markers()
            async with self._conn.transaction():
                if await self._claim(markers, marker) is not None:
                    return False  # an earlier attempt copied it
                await load.copy_part(part)
                await self._set_marker(markers, marker, part.rows)
                return True
        except DRIVER_ERRORS as exc:
            raise postgres_error(exc, f"postgres: staging into {load.target}") from exc

    async def apply_stage(
        self,
        stage: str,
        columns: Sequence[Column],
        target: Target,
        marker: LoadMarker,
        before_commit: Callable[[], Awaitable[None]],
    ) -> Written | int:
        schema = target.schema or self._schema
        load = _Load(
            self._conn,
            schema,
            target.table,
            columns,
            target.plan,
            target.mode,
            target.key,
            target.changes,
        )
        try:
            relation = f"{quote(await self._stage_schema(stage, target.schema))}.{quote(stage)}"
            markers = await self._markers()
            async with self._conn.transaction():
                recorded = await self._claim(markers, marker)
                if recorded is not None:
                    return recorded  # an earlier attempt applied it
                await postgres_stage.apply_settings(self._conn)
                await load.ready()
                written = await load.insert_from(relation)
                await self._conn.execute(f"DROP TABLE {relation}")
                await self._set_marker(markers, marker, int(written))
                await postgres_stage.applied(self._conn, markers, marker, KEEP_MARKERS)
                await before_commit()
                return written
        except DRIVER_ERRORS as exc:
            raise postgres_error(exc, f"postgres: loading {load.target}") from exc

    async def _stage_schema(self, stage: str, schema: str | None) -> str:
        """Where the staging table is (an earlier attempt's), else where it
        goes: next to the target, or in the connection's own schema while
        the target's is still to be created (by the apply, with the rows)."""
        try:
            found = await self._conn.fetchval(postgres_stage.RELATIONS, stage)
            if found is None:
                wanted = schema or self._schema
                there = await self._conn.fetchval("SELECT to_regnamespace($1)", wanted)
                found = wanted if there is not None else self._schema
        except DRIVER_ERRORS as exc:
            raise postgres_error(exc, f"postgres: finding {stage}") from exc
        return str(found)

    async def drop_stage(self, stage: str, marker: LoadMarker) -> None:
        try:
            await postgres_stage.drop(self._conn, await self._markers(), stage, marker)
        except DRIVER_ERRORS as exc:
            raise postgres_error(exc, f"postgres: dropping {stage}") from exc

    async def stale_stages(self, run_id: str, idle: timedelta) -> list[LoadMarker]:
        try:
            return await postgres_stage.stale(self._conn, await self._markers(), run_id, idle)
        except DRIVER_ERRORS as exc:
            raise postgres_error(exc, "postgres: reading load markers") from exc

    # -- the destination's shape (setu_engine/planning/destination_plan.py)

    async def inspect_table(self, table: str, schema: str | None) -> TableShape:
        try:
            return await postgres_shape.inspect(self._conn, schema or self._schema, table)
        except DRIVER_ERRORS as exc:
            raise postgres_error(exc, f"postgres: inspecting {table}") from exc

    async def create_schema(self, schema: str) -> None:
        try:
            await postgres_shape.create_schema(self._conn, schema)
        except DRIVER_ERRORS as exc:
            raise postgres_error(exc, f"postgres: creating schema {schema}") from exc

    async def add_columns(self, table: str, schema: str | None, columns: Sequence[Column]) -> None:
        definitions = [(c.name, _declared(c)) for c in columns]
        try:
            await postgres_shape.add_columns(self._conn, schema or self._schema, table, definitions)
        except DRIVER_ERRORS as exc:
            raise postgres_error(exc, f"postgres: adding columns to {table}") from exc

    # -- CSV for a csv_in destination (setu_engine/providers/postgres/csv.py)

    async def csv_batches(self, stream: Stream, batch_rows: int) -> AsyncIterator[CopyBatch]:
        """The stream's rows as CSV that PostgreSQL renders itself, in
        batches as copy_batches reads them (ctid ranges of a table, else one
        COPY cut at record boundaries)."""
        from setu_engine.providers.postgres import csv as postgres_csv

        query = self._query(stream)
        relation = (stream.locator or self._locate(stream))["relation"]
        try:
            async with self._conn.transaction(isolation="repeatable_read", readonly=True):
                for setting in postgres_csv.CSV_SETTINGS:
                    await self._conn.execute(setting)
                shape = await self._conn.fetchrow(TABLE_PAGES, relation)
                if shape["relkind"] not in ("r", "m") or stream.since is not None:
                    copy = postgres_csv.copy_sql(stream.columns, query)
                    async for batch in postgres_csv.split(self._conn, copy, batch_rows):
                        self.rows_read += batch.rows
                        yield batch
                    return
                per_page = float(shape["rows_per_page"]) or FALLBACK_ROWS_PER_PAGE
                step = max(1, int(batch_rows / per_page))
                pages = int(shape["pages"])
                for first in range(0, max(pages, 1), step):
                    where = f"ctid >= '({first},0)'::tid"
                    if first + step < pages:
                        where += f" AND ctid < '({first + step},0)'::tid"
                    ranged = postgres_csv.copy_sql(stream.columns, f"{query} WHERE {where}")
                    batch = await postgres_csv.copy_whole(self._conn, ranged)
                    self.rows_read += batch.rows
                    yield batch
        except DRIVER_ERRORS as exc:
            raise postgres_error(exc, f"postgres: reading {stream.name}") from exc


class _Load:
    """One stream's load, inside the caller's transaction."""

    def __init__(
        self,
        conn: asyncpg.Connection,
        schema: str,
        table: str,
        columns: Sequence[Column],
        plan: Plan,
        mode: WriteMode,
        key: Sequence[str],
        changes: SchemaChanges | None = None,
    ) -> None:
        self.conn = conn
        self.changes = changes
        self.schema = schema
        self.table = table
        self.target = f"{quote(schema)}.{quote(table)}"
        self.columns = list(columns)
        self.plan = plan
        self.mode = mode
        self.key = list(key)
        self.names = ", ".join(quote(c.name) for c in plan.output)
        # The target's column types (typname), once known.
        self.existing: dict[str, str] = {}

    async def run(self, parts: AsyncIterator[CopyBatch]) -> int:
        existing = await self.ready()
        same_types = all(_copies_into(c, existing[c.name]) for c in self.plan.output)
        if self.plan.identity and not self.mode.needs_key and same_types:
            rows = await self._copy(parts, self.schema, self.table, self.plan.output)
            return Written(rows, RowChanges(rows))
        await self.conn.execute(
            f"CREATE TEMP TABLE _setu_stage ({_ddl(self.columns)}) ON COMMIT DROP"
        )
        await self._copy(parts, None, "_setu_stage", self.columns)
        return await self.insert_from("_setu_stage")

    async def insert_from(self, relation: str) -> Written:
        """The chain's output over `relation` (staged columns) into the target."""
        select = _typed(self.plan.select_sql(relation), self.plan.output)
        if not self.mode.needs_key:
            status = await self.conn.execute(f"INSERT INTO {self.target} ({self.names}) {select}")
            return Written(copying.count(status), RowChanges(copying.count(status)))
        return await self._upsert(select)

    async def ready(self) -> dict[str, str]:
        """The target checked (created if missing, emptied to overwrite);
        its column types."""
        if self.mode.needs_key and not self.key:
            raise ConfigError(
                f"write mode {self.mode.value} needs a key for {self.target}: the source has "
                f"no primary key; set one in the pipeline spec's primary_key"
            )
        await self._evolve()
        existing = await self._target_types()
        if existing is None:
            await self._create()
            existing = await self._target_types() or {}
        missing = [c.name for c in self.plan.output if c.name not in existing]
        if missing:
            raise PermanentError(
                f"destination table {self.target} has no column(s) {', '.join(missing)} "
                f"(add them, drop the table so the load creates it, or select and rename "
                f"columns in the pipeline spec)"
            )
        if self.mode.needs_key:
            await self._check_unique_key()
        if self.mode is WriteMode.OVERWRITE:
            await self.conn.execute(f"TRUNCATE {self.target}")
        self.existing = existing
        return existing

    async def _evolve(self) -> None:
        """The schema changes the load makes (setu_engine/planning/destination_plan.py),
        in its transaction: rolled back with it, they never happened."""
        if not self.changes:
            return
        if self.changes.schema is not None:
            await postgres_shape.create_schema(self.conn, self.changes.schema)
        if self.changes.columns:
            definitions = [(c.name, _declared(c)) for c in self.changes.columns]
            await postgres_shape.add_columns(self.conn, self.schema, self.table, definitions)

    async def _target_types(self) -> dict[str, str] | None:
        exists = await self.conn.fetchval("SELECT to_regclass($1)", self.target)
        if exists is None:
            return None
        records = await self.conn.fetch(TARGET_COLUMNS, self.target)
        return {r["attname"]: r["typname"] for r in records}

    async def _create(self) -> None:
        key = f", PRIMARY KEY ({', '.join(quote(k) for k in self.key)})" if self.key else ""
        columns = _ddl(self.plan.output, declared=True)
        await self.conn.execute(f"CREATE TABLE {self.target} ({columns}{key})")

    async def _check_unique_key(self) -> None:
        records = await self.conn.fetch(UNIQUE_KEYS, self.target)
        if sorted(self.key) not in [list(r["columns"]) for r in records]:
            raise PermanentError(
                f"write mode {self.mode.value} into {self.target} needs a primary key or "
                f"unique index on ({', '.join(self.key)}): add one, or use write_mode "
                f"append or overwrite"
            )

    async def copy_part(self, part: CopyBatch) -> None:
        """One staged part, as it is, into this (staging) table."""
        await self._copy(_one(part), self.schema, self.table, self.columns)

    async def _copy(
        self,
        parts: AsyncIterator[CopyBatch],
        schema: str | None,
        table: str,
        columns: Sequence[Column],
    ) -> int:
        rows = 0
        async for part in parts:
            status = await self.conn.copy_to_table(
                table,
                schema_name=schema,
                source=_once(part.data),
                columns=[c.name for c in columns],
                format="binary",
            )
            copied = copying.count(status)
            if copied != part.rows:
                raise ProviderError(
                    f"a staged part holds {copied} rows where its manifest says {part.rows}"
                )
            rows += copied
        return rows

    async def _upsert(self, select: str) -> Written:
        await self.conn.execute(f"CREATE TEMP TABLE _setu_out ON COMMIT DROP AS {select}")
        keys = ", ".join(quote(k) for k in self.key)
        # A key twice in one load would make ON CONFLICT touch a row twice;
        # the last one loaded wins, as if the rows were upserted in order.
        # _setu_out's ctids follow load order: both temp tables are filled
        # by one sequential pass, and a temp table is never scanned in
        # parallel or in sync with another scan. A row whose values are all
        # there already is not updated (no new row version, no WAL). Every
        # part of one statement sees the table as it was before it: `fresh`
        # counts the keys new to it, RETURNING the rows inserted or updated
        # (xmax would tell them apart, but a partitioned table has none).
        match = " AND ".join(f"_setu_t.{quote(k)} = src.{quote(k)}" for k in self.key)
        counts = await self.conn.fetchrow(
            f"WITH src AS (SELECT DISTINCT ON ({keys}) {self.names} FROM _setu_out "
            f"ORDER BY {keys}, ctid DESC), "
            f"fresh AS (SELECT count(*) AS n FROM src WHERE NOT EXISTS "
            f"(SELECT 1 FROM {self.target} _setu_t WHERE {match})), "
            f"w AS (INSERT INTO {self.target} AS _setu_t ({self.names}) SELECT * FROM src "
            f"ON CONFLICT ({keys}) {self._conflict_action()} RETURNING 1) "
            f"SELECT (SELECT count(*) FROM src) AS offered, (SELECT n FROM fresh) AS inserted, "
            f"(SELECT count(*) FROM w) AS changed"
        )
        deleted = 0
        if self.mode is WriteMode.MERGE:
            match = " AND ".join(f"s.{quote(k)} = t.{quote(k)}" for k in self.key)
            status = await self.conn.execute(
                f"DELETE FROM {self.target} t "
                f"WHERE NOT EXISTS (SELECT 1 FROM _setu_out s WHERE {match})"
            )
            deleted = copying.count(status)
        written: int = await self.conn.fetchval("SELECT count(*) FROM _setu_out")
        inserted = int(counts["inserted"])
        updated = int(counts["changed"]) - inserted
        unchanged = int(counts["offered"]) - inserted - updated
        return Written(written, RowChanges(inserted, updated, unchanged, deleted))

    def _conflict_action(self) -> str:
        others = [c.name for c in self.plan.output if c.name not in self.key]
        if not others:
            return "DO NOTHING"
        sets = ", ".join(f"{quote(c)} = EXCLUDED.{quote(c)}" for c in others)
        differs = " OR ".join(
            f"{_comparable('_setu_t', c, self.existing[c])} IS DISTINCT FROM "
            f"{_comparable('EXCLUDED', c, self.existing[c])}"
            for c in others
        )
        return f"DO UPDATE SET {sets} WHERE {differs}"


def _ddl(columns: Sequence[Column], *, declared: bool = False) -> str:
    """Column definitions: the neutral types (a staging table), or as the
    source declared them (a table the load creates): SQL type and NOT NULL."""
    if not declared:
        return ", ".join(f"{quote(c.name)} {PG_TYPES[c.type]}" for c in columns)
    return ", ".join(
        f"{quote(c.name)} {_declared(c)}{'' if c.nullable else ' NOT NULL'}" for c in columns
    )


def _sql_type(column: Column) -> sqltypes.SqlType | None:
    """The column's SQL type, parsed again: only a whitelisted name rendered
    from its parts reaches DDL, and only one that holds the column's values."""
    try:
        parsed = sqltypes.parse(column.sql_type) if column.sql_type else None
    except SqlTypeError:
        return None
    return parsed if parsed is not None and parsed.neutral == column.type else None


def _declared(column: Column) -> str:
    parsed = _sql_type(column)
    return parsed.render() if parsed is not None else PG_TYPES[column.type]


def _typed(select: str, columns: Sequence[Column]) -> str:
    """`select` with explicit casts where a declared type takes no assignment
    from the staged one (text into an array, an inet, an interval)."""
    casts = [(c, _sql_type(c)) for c in columns]
    if not any(t is not None and t.cast_from_staged for _, t in casts):
        return select
    exprs = ", ".join(
        f"{quote(c.name)}::{t.render()} AS {quote(c.name)}"
        if t is not None and t.cast_from_staged
        else quote(c.name)
        for c, t in casts
    )
    return f"SELECT {exprs} FROM ({select}) AS _setu_typed"


# Text is binary COPY's wire form of these too (their receive functions
# apply the length: char(n) pads, varchar(n) refuses a longer value).
_TEXT_ALIKE = frozenset({"text", "varchar", "bpchar"})


def _copies_into(column: Column, typname: str) -> bool:
    """True when the column's staged binary form loads straight into a
    target column of type `typname`."""
    staged = CANONICAL[column.type]
    return typname == staged or (staged == "text" and typname in _TEXT_ALIKE)


# Types without an equality operator: compared as their text.
_NO_EQUALITY = frozenset(
    {"json", "xml", "point", "line", "lseg", "box", "path", "polygon", "circle"}
)


def _comparable(alias: str, column: str, typname: str) -> str:
    ref = f"{alias}.{quote(column)}"
    return f"{ref}::text" if typname.lstrip("_") in _NO_EQUALITY else ref


# COPY FROM reads a CopyData message whole before parsing it: chunks of this
# size let the server work while the rest of a part is still on the wire.
COPY_CHUNK = 256 * 1024


async def _one(part: CopyBatch) -> AsyncIterator[CopyBatch]:
    yield part


async def _once(data: bytes) -> AsyncIterator[memoryview]:
    view = memoryview(data)
    for start in range(0, len(view), COPY_CHUNK):
        yield view[start : start + COPY_CHUNK]


PROVIDER = PostgresProvider()


def _window(since: Since, *, upper: bool = True) -> str:
    """The SQL predicate of an incremental read; values are quoted literals
    cast to the cursor's type, so they compare as the column does."""
    col, pg_type = quote(since.cursor), PG_TYPES[since.cursor_type]
    parts = ["false" if since.empty else "true"]
    if since.low is not None:
        op = ">=" if since.inclusive else ">"
        parts.append(f"{col} {op} {_literal(since.low)}::{pg_type}")
    if upper and since.high is not None:
        parts.append(f"{col} <= {_literal(since.high)}::{pg_type}")
    return " AND ".join(parts)


def _literal(text: str) -> str:
    """A string literal, as PostgreSQL's quote_literal writes it: quotes
    doubled, and backslashes doubled in an E'' literal, so the text stays one
    literal whatever standard_conforming_strings is. A cursor value comes
    from Setu's state, but is treated as untrusted all the same."""
    if "\x00" in text:
        raise ConfigError("a cursor value holds a NUL character, which PostgreSQL cannot compare")
    quoted = "'" + text.replace("'", "''") + "'"
    return "E" + quoted.replace("\\", "\\\\") if "\\" in text else quoted
