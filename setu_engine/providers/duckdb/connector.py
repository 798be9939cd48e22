"""The `duckdb` provider: a DuckDB database file as a source or a destination.

`duckdb` is blocking, so every call runs in a worker thread, one at a time
per connector (an asyncio.Lock guards the connection); a cancelled call
interrupts DuckDB's query and waits for the thread, so the connection is
never used by two threads at once. The file is opened read-only and
reopened read-write on the first write (DuckDB takes one writer per file
across processes: a file another process holds is a TransientError that
says so, failures.locked).

Sandboxing: tenants name the streams and columns, and a DuckDB session can
read any file (`read_csv('/etc/passwd')`), ATTACH another database or load
extensions from the network. Setu runs no tenant SQL and quotes every
identifier; on top of that each session is opened with external access off,
extension autoloading and autoinstalling off, and its configuration locked,
so even a statement that got through could reach nothing but this file.
Batches are ingested from registered Arrow tables, which need no file access.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import stat
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import duckdb

from setu_engine.capabilities import Capabilities
from setu_engine.errors import ConfigError, ProviderError, TransientError
from setu_engine.kinds import CopyBatch, RowChanges, WriteMode, Written
from setu_engine.planning.destination_plan import SchemaChanges, TableShape
from setu_engine.providers.base import Connector
from setu_engine.providers.duckdb import catalog as duck_catalog
from setu_engine.providers.duckdb import csv as duck_csv
from setu_engine.providers.duckdb import exposure as duck_exposure
from setu_engine.providers.duckdb import stage as duck_stage
from setu_engine.providers.duckdb import types as duck_types
from setu_engine.providers.duckdb import write as duck_write
from setu_engine.providers.duckdb.failures import duckdb_error, locked
from setu_engine.providers.duckdb.write import quote
from setu_engine.staged.markers import LoadMarker
from setu_engine.support.egress import Egress
from setu_engine.values.types import Batch, Column, Stream

if TYPE_CHECKING:
    from setu_engine.staged.resumable import Target

T = TypeVar("T")
B = TypeVar("B")

_KEYS = frozenset({"path", "create", "schema"})
DEFAULT_SCHEMA = "main"

# What the transfer may ask of a DuckDB connector (docs/providers.md).
CAPABILITIES = Capabilities(
    csv_in=True,
    counts_rows=True,
    staged_loads=True,
    inspectable=True,
    increments="cursor",
    reports_changes=frozenset({"append", "overwrite", "upsert", "merge"}),
    enforces_keys=True,
)

# Set at open, before the configuration is locked (docs/data-types.md, "DuckDB").
_SANDBOX = {
    "enable_external_access": "false",
    "autoinstall_known_extensions": "false",
    "autoload_known_extensions": "false",
    "allow_community_extensions": "false",
}


class DuckdbProvider:
    capabilities = CAPABILITIES
    name = "duckdb"

    def validate_config(self, config: dict[str, Any]) -> None:
        _parse_config(config)

    async def connect(
        self, config: dict[str, Any], egress: Egress | None = None, *, root: Path | None = None
    ) -> Connector:
        # A file, no socket: the runtime's policy placed the path (resolved,
        # links followed); checked again against `root`.
        path, create, schema = _parse_config(config)
        if root is not None and not path.is_relative_to(root):
            raise ConfigError(f"config.path: a cloud connection may only use files under {root}/")
        if not path.exists() and not create:
            raise ConfigError(
                f"config.path: no such file {path} (check the path, or set create: true to "
                f"make a new DuckDB database there)"
            )
        if create and not path.parent.is_dir():
            raise ConfigError(f"config.path: no folder {path.parent} to create {path.name} in")
        confined = root is not None
        if confined:
            _no_linked_files(path)
        conn = await _in_thread(None, _open, path, not create)
        if confined:
            await _checked_after_open(path, conn)
        return DuckdbConnector(path, conn, schema, writable=create, confined=confined)


PROVIDER = DuckdbProvider()

# Files DuckDB opens beside the database, by name and following links: its
# write-ahead log (truncated and written on every write), the log's copies
# during a checkpoint and a recovery, and its spill folder.
_SIDEFILES = (".wal", ".wal.checkpoint", ".wal.recovery", ".tmp")


def _hard_linked(path: Path) -> bool:
    """A file with another name too (a hard link): that name may be in
    another workspace's folder, which the path checks cannot see."""
    try:
        found = path.lstat()
    except FileNotFoundError:
        return False
    return stat.S_ISREG(found.st_mode) and found.st_nlink > 1


def _no_linked_files(path: Path) -> None:
    """ConfigError when the database or a file DuckDB writes beside it is a
    link: DuckDB would read or write through it, to wherever it leads
    (another workspace's file). A symbolic link beside it, or a hard link
    at either: a hard link passes every check of where a path leads."""
    if _hard_linked(path):
        raise ConfigError(
            f"config.path: {path.name} has another name (a hard link), which may be another "
            "workspace's file; a cloud connection takes a file of one name only: copy it"
        )
    for suffix in _SIDEFILES:
        beside = path.with_name(path.name + suffix)
        if beside.is_symlink() or _hard_linked(beside):
            raise ConfigError(
                f"config.path: {beside.name} beside the database is a link, which DuckDB "
                f"would write through; remove it"
            )


def _still_unlinked(path: Path) -> None:
    if path.is_symlink():
        raise ProviderError(f"duckdb: {path.name} became a link while it was opened")
    _no_linked_files(path)


async def _checked_after_open(path: Path, conn: duckdb.DuckDBPyConnection) -> None:
    """The checks again once DuckDB holds the file (it cannot open with
    O_NOFOLLOW): a link swapped in since the path was checked is caught
    here, before any use; the connection is closed on a refusal."""
    try:
        _still_unlinked(path)
    except (ProviderError, ConfigError):
        await _in_thread(None, conn.close)
        raise


def _parse_config(config: dict[str, Any]) -> tuple[Path, bool, str]:
    unknown = sorted(set(config) - _KEYS)
    if unknown:
        raise ConfigError(
            f"config: unknown key(s) {', '.join(unknown)}; duckdb takes path, create, schema"
        )
    path = config.get("path")
    if not isinstance(path, str) or not path.strip() or "\0" in path:
        raise ConfigError("config.path: required, the DuckDB file's path as a string")
    if path.strip() == ":memory:":
        raise ConfigError("config.path: a file's path (an in-memory database keeps nothing)")
    create = config.get("create", False)
    if not isinstance(create, bool):
        raise ConfigError("config.create: must be true or false")
    schema = config.get("schema", DEFAULT_SCHEMA)
    if not isinstance(schema, str) or not 0 < len(schema) <= 255 or "\0" in schema:
        raise ConfigError('config.schema: a schema name (default "main")')
    return Path(path).expanduser().resolve(), create, schema


def _open(path: Path, read_only: bool) -> duckdb.DuckDBPyConnection:
    try:
        conn = duckdb.connect(str(path), read_only=read_only, config=dict(_SANDBOX))
    except duckdb.Error as exc:
        if isinstance(exc, duckdb.IOException) and "lock" in str(exc).lower():
            raise locked(path, exc) from exc
        if "different configuration" in str(exc):
            # DuckDB shares one instance per file in a process: another
            # connector of this runtime has it open the other way (read-only
            # or for writing) until it closes.
            raise TransientError(
                f"duckdb: {path} is open in this runtime by another connection "
                f"({'for writing' if read_only else 'read-only'}); retry once it is done"
            ) from exc
        raise duckdb_error(exc, f"duckdb: cannot open {path}", path) from exc
    try:
        if not _locked(conn):
            # Instants read and written in UTC (icu is built into the wheel),
            # for every session of the instance.
            conn.execute("SET GLOBAL TimeZone = 'UTC'")
            conn.execute("SET GLOBAL lock_configuration = true")
        # Another connector of this process opened the file first: DuckDB
        # shares its instance, set up and locked already.
        zone = conn.execute("SELECT current_setting('TimeZone')").fetchone()
        if zone is None or zone[0] != "UTC":
            raise ProviderError(f"duckdb: {path} is open in this process outside UTC")
    except duckdb.Error as exc:
        conn.close()
        raise duckdb_error(exc, f"duckdb: cannot set up {path}", path) from exc
    return conn


def _locked(conn: duckdb.DuckDBPyConnection) -> bool:
    found = conn.execute("SELECT current_setting('lock_configuration')").fetchone()
    return bool(found and found[0])


async def _in_thread(conn: duckdb.DuckDBPyConnection | None, fn: Callable[..., T], *args: Any) -> T:
    """fn in a worker thread. A cancelled caller interrupts the query and
    still waits for the thread to finish, so the connection is never used
    by two threads at once."""
    task = asyncio.ensure_future(asyncio.to_thread(fn, *args))
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        if conn is not None:
            with contextlib.suppress(duckdb.Error):
                conn.interrupt()
        with contextlib.suppress(BaseException):
            await task
        raise


def _rows_of(part: CopyBatch) -> int:
    return part.rows


def _step(
    insert: Callable[[duckdb.DuckDBPyConnection, B, int], None], batch: B, before: int
) -> Callable[[duckdb.DuckDBPyConnection], None]:
    """One batch's insert, bound now (the loop moves on before it runs)."""

    def run(conn: duckdb.DuckDBPyConnection) -> None:
        insert(conn, batch, before)

    return run


class DuckdbConnector:
    capabilities = CAPABILITIES

    def __init__(
        self,
        path: Path,
        conn: duckdb.DuckDBPyConnection,
        schema: str,
        *,
        writable: bool,
        confined: bool = False,
    ) -> None:
        self._path = path
        # In the cloud: links refused at every open, views that show the
        # runtime refused at every read (exposure.py).
        self._confined = confined
        self._conn = conn
        self._schema = schema
        self._writable = writable
        self._lock = asyncio.Lock()
        # Rows fetched from the file by read (CountsRows).
        self.rows_read = 0

    def _guarded(self, what: str, fn: Callable[[duckdb.DuckDBPyConnection], T]) -> T:
        try:
            return fn(self._conn)
        except duckdb.Error as exc:
            raise duckdb_error(exc, f"duckdb: {what}", self._path) from exc

    async def _run(self, what: str, fn: Callable[[duckdb.DuckDBPyConnection], T]) -> T:
        async with self._lock:
            return await _in_thread(self._conn, self._guarded, what, fn)

    async def _writable_conn(self) -> None:
        """Reopens the file for writing if it was opened read-only; call it
        holding the lock."""
        if not self._writable:
            await _in_thread(None, self._conn.close)
            if self._confined:
                _no_linked_files(self._path)
            self._conn = await _in_thread(None, _open, self._path, False)
            if self._confined:
                await _checked_after_open(self._path, self._conn)
            self._writable = True

    async def test(self) -> str:
        def probe(conn: duckdb.DuckDBPyConnection) -> str:
            version = duckdb.__version__
            found = conn.execute(
                "SELECT count(*) FROM duckdb_tables() WHERE database_name = current_database() "
                "AND schema_name = ?",
                [self._schema],
            ).fetchone()
            tables = int(found[0]) if found else 0
            return f"DuckDB {version} at {self._path} ({tables} table{'' if tables == 1 else 's'})"

        return await self._run("test", probe)

    async def discover(self) -> list[Stream]:
        return await self._run(
            "discover", functools.partial(duck_catalog.discover, schema=self._schema)
        )

    def _table_of(self, stream: Stream) -> tuple[str, str]:
        table = str(stream.locator.get("table", stream.name))
        return str(stream.locator.get("schema", self._schema)), table

    async def _refuse_exposing(self, table: str) -> None:
        if self._confined:
            await self._run(
                f"reading {table!r}", functools.partial(duck_exposure.refuse_exposing, table=table)
            )

    async def _selecting(self, stream: Stream) -> tuple[str, list[duck_types.Found]]:
        schema, table = self._table_of(stream)
        await self._refuse_exposing(table)
        names = [c.name for c in stream.columns]
        found = await self._run(
            f"reading {table!r}",
            functools.partial(duck_catalog.found, schema=schema, table=table, names=names),
        )
        return duck_catalog.select(schema, table, found), found

    async def preview(self, stream: Stream, limit: int) -> Batch:
        sql, found = await self._selecting(stream)
        convert = duck_types.row_reader(stream.name, found)
        rows = await self._run(
            f"reading {stream.name!r}", lambda c: c.execute(f"{sql} LIMIT ?", [limit]).fetchall()
        )
        return [convert(row) for row in rows]

    async def cursor_high(self, stream: Stream) -> tuple[str | None, int]:
        """The highest cursor value an incremental read would reach, and how
        many rows it would read (setu_engine/planning/incremental.py)."""
        assert stream.since is not None, "only for an incremental read"
        schema, table = self._table_of(stream)
        since = stream.since
        await self._refuse_exposing(table)
        cast = await self._run(
            f"reading {table!r}", lambda c: duck_catalog.cursor_cast(c, schema, table, since)
        )
        where, args = duck_catalog.window(stream.since, cast, upper=False)
        col = quote(stream.since.cursor)
        sql = (
            f"SELECT CAST(max({col}) AS VARCHAR), count(*) FROM {quote(schema)}.{quote(table)} "
            f"WHERE {where}"
        )
        found = await self._run(f"reading {table!r}", lambda c: c.execute(sql, args).fetchone())
        high, count = found if found else (None, 0)
        return (None if high is None else str(high)), int(count)

    async def read(self, stream: Stream, batch_rows: int) -> AsyncIterator[Batch]:
        sql, found = await self._selecting(stream)
        convert = duck_types.row_reader(stream.name, found)
        args: list[Any] = []
        if stream.since is not None:
            schema, table = self._table_of(stream)
            since = stream.since
            cast = await self._run(
                f"reading {table!r}", lambda c: duck_catalog.cursor_cast(c, schema, table, since)
            )
            where, args = duck_catalog.window(stream.since, cast)
            sql = f"{sql} WHERE {where} ORDER BY {quote(stream.since.cursor)}"
        what = f"reading {stream.name!r}"
        # A cursor of its own: other calls on the connection between batches
        # (a cursor_high, a preview) do not end this result.
        cursor = await self._run(what, lambda c: c.cursor())
        try:
            await _in_thread(cursor, self._guarded, what, lambda _: cursor.execute(sql, args))
            while True:
                rows = await _in_thread(
                    cursor, self._guarded, what, lambda _: cursor.fetchmany(batch_rows)
                )
                if not rows:
                    return
                self.rows_read += len(rows)
                yield [convert(row) for row in rows]
        finally:
            await _in_thread(None, cursor.close)

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
    ) -> Written | int:
        plan = self._plan(stream, columns, mode, key, schema, marker, changes)
        return await self._load(plan, batches, plan.insert, len)

    def takes_csv(self, columns: Sequence[Column]) -> bool:
        """Whether write_csv lands these columns (a LIST column does not)."""
        return duck_csv.takes(columns)

    async def write_csv(
        self,
        stream: str,
        columns: Sequence[Column],
        parts: AsyncIterator[CopyBatch],
        mode: WriteMode,
        key: Sequence[str],
        *,
        schema: str | None = None,
        marker: LoadMarker | None = None,
        changes: SchemaChanges | None = None,
    ) -> Written | int:
        """Writes batches of CSV in the hand-off dialect (CsvDestination),
        each parsed into Arrow in C++ (setu_engine/providers/duckdb/csv.py); every mode,
        in one transaction, as write does."""
        plan = self._plan(stream, columns, mode, key, schema, marker, changes)
        return await self._load(plan, parts, plan.insert_csv, _rows_of)

    def _plan(
        self,
        stream: str,
        columns: Sequence[Column],
        mode: WriteMode,
        key: Sequence[str],
        schema: str | None,
        marker: LoadMarker | None,
        changes: SchemaChanges | None,
    ) -> duck_write.WritePlan:
        return duck_write.WritePlan(
            schema or self._schema,
            stream,
            columns,
            WriteMode(mode),
            key,
            marker,
            changes,
            books=self._schema,
        )

    async def _load(
        self,
        plan: duck_write.WritePlan,
        batches: AsyncIterator[B],
        insert: Callable[[duckdb.DuckDBPyConnection, B, int], None],
        size: Callable[[B], int],
    ) -> Written | int:
        what = f"writing {plan.table!r}"
        async with self._lock:
            await self._writable_conn()
            conn = self._conn
            written = 0
            # The batch being inserted (in its thread) while the next one is
            # fetched: the source's decoding overlaps DuckDB's work.
            pending: asyncio.Future[None] | None = None
            try:
                recorded: int | None = await _in_thread(conn, self._guarded, what, plan.begin)
                if recorded is not None:
                    # An earlier attempt loaded it: write nothing.
                    await _in_thread(None, duck_write.rollback, conn)
                    return recorded
                async for batch in batches:
                    if pending is not None:
                        await pending
                    step = _step(insert, batch, written)
                    pending = asyncio.ensure_future(_in_thread(conn, self._guarded, what, step))
                    written += size(batch)
                if pending is not None:
                    await pending
                finish = functools.partial(plan.finish, written=written)
                counted = await _in_thread(conn, self._guarded, what, finish)
            except BaseException:
                if pending is not None:
                    # Interrupted and waited for (one thread on the connection),
                    # or its own failure retrieved: the first failure is raised.
                    pending.cancel()
                    with contextlib.suppress(BaseException):
                        await pending
                # Cancellation included: the file keeps its old content and
                # shape (DuckDB's DDL is transactional too).
                await _in_thread(None, duck_write.rollback, conn)
                raise
            return Written(written, counted)

    # -- resumable loads (setu_engine/staged/resumable.py, providers/duckdb/stage.py)

    # The chain runs in Python: the staging table takes its output.
    copies = False

    async def marked(self, marker: LoadMarker) -> int | None:
        find = functools.partial(duck_stage.marked, books=self._schema, marker=marker)
        return await self._run("reading load markers", find)

    async def prepare_stage(
        self, stage: str, columns: Sequence[Column], schema: str | None, marker: LoadMarker
    ) -> None:
        create = functools.partial(
            duck_stage.create, books=self._schema, stage=stage, columns=columns, marker=marker
        )
        await self._write_locked(f"creating {stage!r}", create)

    async def stage_part(
        self,
        stage: str,
        columns: Sequence[Column],
        part: CopyBatch | Batch,
        marker: LoadMarker,
        schema: str | None,
    ) -> bool:
        assert isinstance(part, list), "the chain's output, as rows"
        copy = functools.partial(
            duck_stage.copy,
            books=self._schema,
            stage=stage,
            columns=columns,
            part=part,
            marker=marker,
        )
        return await self._write_locked(f"staging into {stage!r}", copy)

    async def apply_stage(
        self,
        stage: str,
        columns: Sequence[Column],
        target: Target,
        marker: LoadMarker,
        before_commit: Callable[[], Awaitable[None]],
    ) -> Written | int:
        books = self._schema
        plan = duck_write.WritePlan(
            target.schema or books,
            target.table,
            columns,
            target.mode,
            target.key,
            marker,
            target.changes,
            books=books,
        )

        def apply(conn: duckdb.DuckDBPyConnection) -> tuple[int | None, int]:
            recorded = plan.begin(conn)
            if recorded is not None:
                return recorded, 0  # an earlier attempt applied it
            return None, duck_stage.insert_staged(conn, books, stage, plan.into, plan.names)

        what = f"writing {target.table!r}"
        async with self._lock:
            await self._writable_conn()
            conn = self._conn
            try:
                began: tuple[int | None, int] = await _in_thread(conn, self._guarded, what, apply)
                recorded, written = began
                if recorded is not None:
                    await _in_thread(None, duck_write.rollback, conn)
                    return recorded
                await before_commit()
                finish = functools.partial(plan.finish, written=written)
                changes: RowChanges = await _in_thread(conn, self._guarded, what, finish)
                return Written(written, changes)
            except BaseException:
                await _in_thread(None, duck_write.rollback, conn)
                raise

    async def drop_stage(self, stage: str, marker: LoadMarker) -> None:
        drop = functools.partial(duck_stage.drop, books=self._schema, stage=stage, marker=marker)
        await self._write_locked(f"dropping {stage!r}", drop)

    async def stale_stages(self, run_id: str, idle: timedelta) -> list[LoadMarker]:
        find = functools.partial(duck_stage.stale, books=self._schema, run_id=run_id, idle=idle)
        return await self._run("reading load markers", find)

    async def _write_locked(self, what: str, fn: Callable[[duckdb.DuckDBPyConnection], T]) -> T:
        async with self._lock:
            await self._writable_conn()
            return await _in_thread(self._conn, self._guarded, what, fn)

    # -- the destination's shape (setu_engine/planning/destination_plan.py)

    async def inspect_table(self, table: str, schema: str | None) -> TableShape:
        where = schema or self._schema
        return await self._run(
            f"inspecting {table!r}",
            functools.partial(duck_catalog.inspect, schema=where, table=table),
        )

    async def create_schema(self, schema: str) -> None:
        async with self._lock:
            await self._writable_conn()
            sql = f"CREATE SCHEMA IF NOT EXISTS {quote(schema)}"
            await _in_thread(
                self._conn, self._guarded, f"creating schema {schema!r}", lambda c: c.execute(sql)
            )

    async def add_columns(self, table: str, schema: str | None, columns: Sequence[Column]) -> None:
        where = schema or self._schema

        def add(conn: duckdb.DuckDBPyConnection) -> None:
            conn.execute("BEGIN TRANSACTION")
            try:
                duck_write.add_missing(conn, where, table, columns)
                conn.execute("COMMIT")
            except BaseException:
                duck_write.rollback(conn)
                raise

        async with self._lock:
            await self._writable_conn()
            await _in_thread(self._conn, self._guarded, f"adding columns to {table!r}", add)

    async def close(self) -> None:
        async with self._lock:
            await _in_thread(None, self._conn.close)
