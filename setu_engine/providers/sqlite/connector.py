"""The `sqlite` provider: a SQLite file as a source or a destination.

`sqlite3` is blocking, so every call runs in a worker thread, one at a time
per connector (an asyncio.Lock guards the single connection). The connection
starts read-only and is reopened read-write on the first write, so a source is
never opened for writing. Values are stored in SQLite's natural forms (ISO 8601
text for dates and times, text for numerics and JSON, 0/1 for booleans) and
converted back to the neutral representation on read.

Type and value conversion lives in values.py (this package).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import re
import sqlite3
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from datetime import UTC, timedelta, tzinfo
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from setu_engine.capabilities import Capabilities, Values
from setu_engine.errors import ConfigError, PermanentError, ProviderError
from setu_engine.kinds import CopyBatch, RowChanges, WriteMode, Written
from setu_engine.planning.destination_plan import SchemaChanges, TableShape
from setu_engine.providers.base import Connector
from setu_engine.providers.sqlite import shape as sqlite_shape
from setu_engine.providers.sqlite import stage as sqlite_stage
from setu_engine.providers.sqlite.failures import sqlite_error
from setu_engine.providers.sqlite.values import DECLARED, batch_reader, neutral_of, row_writer
from setu_engine.staged.markers import KEEP_MARKERS, MARKERS, LoadMarker
from setu_engine.staged.resumable import STAGE_PREFIX
from setu_engine.support.egress import Egress
from setu_engine.values.sqltypes import kept
from setu_engine.values.types import Batch, Column, Stream

if TYPE_CHECKING:
    from setu_engine.staged.resumable import Target
    from setu_engine.values.window import Since

T = TypeVar("T")

_KEYS = frozenset({"path", "create", "timezone"})


# What the transfer may ask of a SQLite connector (docs/providers.md).
CAPABILITIES = Capabilities(
    resumable_rows=True,
    counts_rows=True,
    staged_loads=True,
    inspectable=True,
    increments="cursor",
    reports_changes=frozenset({"append", "overwrite", "upsert", "merge"}),
    enforces_keys=True,
    # SQLite stores an integral REAL as an integer (docs/data-types.md).
    values=Values(loses=frozenset({"real:-0", "double:-0"})),
)


class SqliteProvider:
    capabilities = CAPABILITIES
    name = "sqlite"

    def validate_config(self, config: dict[str, Any]) -> None:
        _parse_config(config)

    async def connect(
        self, config: dict[str, Any], egress: Egress | None = None, *, root: Path | None = None
    ) -> Connector:
        # A file, no socket: the runtime's policy already placed the path
        # (resolved, so no link in it); checked again against `root`.
        path, create, zone = _parse_config(config)
        if root is not None and not path.is_relative_to(root):
            raise ConfigError(f"config.path: a cloud connection may only use files under {root}/")
        if not path.exists() and not create:
            raise PermanentError(
                f"no SQLite database at {path} (check config.path, or set config.create "
                f"to make one)"
            )
        conn = await _in_thread(_open, path, "rwc" if create else "ro")
        if root is not None and path.is_symlink():
            # sqlite3 cannot open with O_NOFOLLOW: a link swapped in since the
            # path was resolved is caught here instead, before any use.
            await _in_thread(conn.close)
            raise ProviderError(f"sqlite: {path.name} became a link while it was opened")
        return SqliteConnector(path, conn, writable=create, zone=zone)


PROVIDER = SqliteProvider()


def _parse_config(config: dict[str, Any]) -> tuple[Path, bool, tzinfo | None]:
    unknown = sorted(set(config) - _KEYS)
    if unknown:
        raise ConfigError(
            f"config: unknown key(s) {', '.join(unknown)}; sqlite takes path, create, timezone"
        )
    path = config.get("path")
    if not isinstance(path, str) or not path.strip():
        raise ConfigError("config.path: required, the SQLite file's path as a string")
    create = config.get("create", False)
    if not isinstance(create, bool):
        raise ConfigError("config.create: must be true or false")
    return Path(path).expanduser().resolve(), create, _zone(config.get("timezone"))


def _zone(name: Any) -> tzinfo | None:
    """config.timezone: the zone the file's naive date-times are in, so they
    read as timestamptz (docs/data-types.md)."""
    if name is None:
        return None
    if not isinstance(name, str) or not 0 < len(name) <= 64:
        raise ConfigError('config.timezone: a time zone name such as "UTC" or "America/New_York"')
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise ConfigError(
            f"config.timezone: unknown time zone {name!r} (an IANA name such as "
            f'"America/New_York", or "UTC")'
        ) from None


def _open(path: Path, mode: str) -> sqlite3.Connection:
    try:
        # isolation_level=None: no implicit transactions; write() runs its own.
        return sqlite3.connect(
            f"{path.as_uri()}?mode={mode}", uri=True, check_same_thread=False, isolation_level=None
        )
    except sqlite3.Error as exc:
        raise sqlite_error(exc, f"sqlite: cannot open {path}") from exc


async def _in_thread(fn: Callable[..., T], *args: Any) -> T:
    """fn in a worker thread. A cancelled caller still waits for the thread to
    finish, so the connection is never used by two threads at once."""
    task = asyncio.ensure_future(asyncio.to_thread(fn, *args))
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        with contextlib.suppress(BaseException):
            await task
        raise


def quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


class SqliteConnector:
    capabilities = CAPABILITIES

    def __init__(
        self, path: Path, conn: sqlite3.Connection, *, writable: bool, zone: tzinfo | None = None
    ) -> None:
        self._path = path
        self._conn = conn
        self._writable = writable
        self._zone = zone
        self._lock = asyncio.Lock()
        # Rows fetched from the file by read/read_after (CountsRows).
        self.rows_read = 0

    async def _run(self, what: str, fn: Callable[[sqlite3.Connection], T]) -> T:
        async with self._lock:
            return await _in_thread(_guarded, what, fn, self._conn)

    async def test(self) -> str:
        def probe(conn: sqlite3.Connection) -> str:
            version = conn.execute("select sqlite_version()").fetchone()[0]
            tables = conn.execute(
                "SELECT count(*) FROM sqlite_master WHERE type = 'table' "
                "AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\'"
            ).fetchone()[0]
            return f"SQLite {version} at {self._path} ({tables} table{'' if tables == 1 else 's'})"

        return await self._run("test", probe)

    async def discover(self) -> list[Stream]:
        return await self._run("discover", functools.partial(_discover, zone=self._zone))

    async def preview(self, stream: Stream, limit: int) -> Batch:
        table = _table_of(stream)
        convert = batch_reader(table, stream.columns, self._zone or UTC)
        sql = f"{_select(table, stream.columns)} LIMIT ?"
        what = f"reading {table!r}"
        rows = await self._run(what, lambda conn: conn.execute(sql, (limit,)).fetchall())
        return convert(rows)

    async def cursor_high(self, stream: Stream) -> tuple[str | None, int]:
        """The highest cursor value an incremental read would reach, and how
        many rows it would read (setu_engine/planning/incremental.py)."""
        assert stream.since is not None, "only for an incremental read"
        table, col = _table_of(stream), quote(stream.since.cursor)
        where, args = _window(stream.since, upper=False)
        sql = f"SELECT max({col}), count(*) FROM {quote(table)} WHERE {where}"
        high, count = await self._run(
            f"reading {table!r}", lambda conn: conn.execute(sql, args).fetchone()
        )
        return (None if high is None else str(high)), int(count)

    async def read(self, stream: Stream, batch_rows: int) -> AsyncIterator[Batch]:
        table = _table_of(stream)
        convert = batch_reader(table, stream.columns, self._zone or UTC)
        sql, args = _select(table, stream.columns), tuple[str, ...]()
        if stream.since is not None:
            # In cursor order, so an index on the cursor serves the read.
            where, args = _window(stream.since)
            sql = f"{sql} WHERE {where} ORDER BY {quote(stream.since.cursor)}"
        what = f"reading {table!r}"
        cursor = await self._run(what, lambda conn: conn.execute(sql, args))
        try:
            while True:
                rows = await self._run(what, lambda _: cursor.fetchmany(batch_rows))
                if not rows:
                    return
                self.rows_read += len(rows)
                yield convert(rows)
        finally:
            await self._run(what, lambda _: cursor.close())

    async def resumes(self, stream: Stream) -> bool:
        """A full read of a table with a rowid of its own (not a view, not
        WITHOUT ROWID, no column hiding the name) resumes by rowid ranges."""
        if stream.since is not None or ROWID in {c.name.lower() for c in stream.columns}:
            return False
        table = _table_of(stream)

        def probe(conn: sqlite3.Connection) -> bool:
            # A view answers `SELECT _rowid_` too, but with NULL on every row:
            # a range read of it would match nothing. Only a table resumes.
            kind = conn.execute(KIND_OF, (table,)).fetchone()
            if kind is None or kind[0] != "table":
                return False
            try:  # a WITHOUT ROWID table has no such column
                conn.execute(f"SELECT {ROWID} FROM {quote(table)} LIMIT 0").fetchall()
            except sqlite3.OperationalError:
                return False
            return True

        return await self._run("probing for a rowid", probe)

    async def read_after(
        self, stream: Stream, batch_rows: int, after: str | None
    ) -> AsyncIterator[tuple[Batch, str]]:
        table = _table_of(stream)
        convert = batch_reader(table, stream.columns, self._zone or UTC)
        names = ", ".join(quote(c.name) for c in stream.columns)
        # In rowid order (the table's own order: no sort), from after `after`.
        sql = f"SELECT {ROWID}, {names} FROM {quote(table)} WHERE {ROWID} > ? ORDER BY {ROWID}"
        start = int(after) if after else -(2**63)
        what = f"reading {table!r}"
        cursor = await self._run(what, lambda conn: conn.execute(sql, (start,)))
        try:
            while True:
                rows = await self._run(what, lambda _: cursor.fetchmany(batch_rows))
                if not rows:
                    return
                self.rows_read += len(rows)
                yield convert(rows, skip=1), str(rows[-1][0])
        finally:
            await self._run(what, lambda _: cursor.close())

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
        # One table of the file, quoted whole: SQLite has no schemas to land
        # in (an attached database is not the pipeline's to pick).
        table = f"{schema}.{stream}" if schema else stream
        plan = _WritePlan(table, list(columns), WriteMode(mode), list(key), marker, changes)
        what = f"writing {table!r}"
        async with self._lock:
            if not self._writable:
                await _in_thread(self._conn.close)
                self._conn = await _in_thread(_open, self._path, "rw")
                self._writable = True
            conn = self._conn
            written = 0
            try:
                recorded: int | None = await _in_thread(_guarded, what, plan.begin, conn)
                if recorded is not None:
                    # An earlier attempt loaded it: write nothing.
                    await _in_thread(_rollback, conn)
                    return recorded
                async for batch in batches:
                    insert = functools.partial(plan.insert, batch=batch)
                    await _in_thread(_guarded, what, insert, conn)
                    written += len(batch)
                finish = functools.partial(plan.finish, written=written)
                counted = await _in_thread(_guarded, what, finish, conn)
            except BaseException:
                # Cancellation included: the destination keeps its old
                # content, and its shape (columns added by the write).
                await _in_thread(_rollback, conn)
                raise
            return Written(written, counted)

    # -- resumable loads (setu_engine/staged/resumable.py, providers/sqlite/stage.py)

    # The chain runs in Python: the staging table takes its output.
    copies = False

    async def marked(self, marker: LoadMarker) -> int | None:
        find = functools.partial(sqlite_stage.marked, marker=marker, marked_rows=MARKED_ROWS)
        return await self._run("reading load markers", find)

    async def prepare_stage(
        self, stage: str, columns: Sequence[Column], schema: str | None, marker: LoadMarker
    ) -> None:
        create = functools.partial(sqlite_stage.create, stage=stage, columns=columns, marker=marker)
        await self._write_locked(
            f"creating {stage!r}", functools.partial(create, markers_ddl=MARKERS_DDL)
        )

    async def stage_part(
        self,
        stage: str,
        columns: Sequence[Column],
        part: CopyBatch | Batch,
        marker: LoadMarker,
        schema: str | None,
    ) -> bool:
        assert isinstance(part, list)

        def copy(conn: sqlite3.Connection) -> bool:
            conn.execute("BEGIN IMMEDIATE")
            try:
                conn.execute(MARKERS_DDL)
                if conn.execute(MARKED_ROWS, _marker_key(marker)).fetchone() is not None:
                    conn.execute("ROLLBACK")
                    return False  # an earlier attempt copied it
                sqlite_stage.insert(conn, stage, columns, part)
                conn.execute(SET_MARKER, (*_marker_key(marker), len(part)))
                conn.execute("COMMIT")
                return True
            except BaseException:
                _rollback(conn)
                raise

        return await self._write_locked(f"staging into {stage!r}", copy)

    async def apply_stage(
        self,
        stage: str,
        columns: Sequence[Column],
        target: Target,
        marker: LoadMarker,
        before_commit: Callable[[], Awaitable[None]],
    ) -> Written | int:
        table = f"{target.schema}.{target.table}" if target.schema else target.table
        plan = _WritePlan(
            table, list(columns), target.mode, list(target.key), marker, target.changes
        )

        def apply(conn: sqlite3.Connection) -> tuple[int | None, int]:
            recorded = plan.begin(conn)
            if recorded is not None:
                return recorded, 0  # an earlier attempt applied it
            return None, plan.insert_staged(conn, stage)

        what = f"writing {table!r}"
        async with self._lock:
            conn = await self._writable_conn()
            try:
                began: tuple[int | None, int] = await _in_thread(_guarded, what, apply, conn)
                recorded, written = began
                if recorded is not None:
                    await _in_thread(_rollback, conn)
                    return recorded
                await before_commit()
                finish = functools.partial(plan.finish, written=written)
                changes: RowChanges = await _in_thread(_guarded, what, finish, conn)
                return Written(written, changes)
            except BaseException:
                await _in_thread(_rollback, conn)
                raise

    async def drop_stage(self, stage: str, marker: LoadMarker) -> None:
        drop = functools.partial(
            sqlite_stage.drop, stage=stage, marker=marker, markers_ddl=MARKERS_DDL
        )
        await self._write_locked(f"dropping {stage!r}", drop)

    async def stale_stages(self, run_id: str, idle: timedelta) -> list[LoadMarker]:
        find = functools.partial(sqlite_stage.stale, run_id=run_id, idle=idle)
        return await self._run("reading load markers", find)

    async def _writable_conn(self) -> sqlite3.Connection:
        """The connection, reopened for writing if it was opened read-only;
        call it holding the lock."""
        if not self._writable:
            await _in_thread(self._conn.close)
            self._conn = await _in_thread(_open, self._path, "rw")
            self._writable = True
        return self._conn

    async def _write_locked(self, what: str, fn: Callable[[sqlite3.Connection], T]) -> T:
        async with self._lock:
            if not self._writable:
                await _in_thread(self._conn.close)
                self._conn = await _in_thread(_open, self._path, "rw")
                self._writable = True
            return await _in_thread(_guarded, what, fn, self._conn)

    # -- the destination's shape (setu_engine/planning/destination_plan.py)

    async def inspect_table(self, table: str, schema: str | None) -> TableShape:
        name = sqlite_shape.table_name(table, schema)
        return await self._run(f"inspecting {name!r}", lambda c: sqlite_shape.inspect(c, name))

    async def create_schema(self, schema: str) -> None:
        return None  # no schemas: `schema.table` is one table name

    async def add_columns(self, table: str, schema: str | None, columns: Sequence[Column]) -> None:
        name = sqlite_shape.table_name(table, schema)
        definitions = [(c.name, DECLARED[c.type]) for c in columns]
        async with self._lock:
            if not self._writable:
                await _in_thread(self._conn.close)
                self._conn = await _in_thread(_open, self._path, "rw")
                self._writable = True
            add = functools.partial(sqlite_shape.add_columns, table=name, definitions=definitions)
            await _in_thread(_guarded, f"adding columns to {name!r}", add, self._conn)

    async def close(self) -> None:
        async with self._lock:
            await _in_thread(self._conn.close)


def _guarded(what: str, fn: Callable[[sqlite3.Connection], T], conn: sqlite3.Connection) -> T:
    try:
        return fn(conn)
    except sqlite3.Error as exc:
        raise sqlite_error(exc, f"sqlite: {what}") from exc


def _rollback(conn: sqlite3.Connection) -> None:
    # The original failure is what the caller must see, not a failed rollback.
    with contextlib.suppress(sqlite3.Error):
        if conn.in_transaction:
            conn.execute("ROLLBACK")


def _table_of(stream: Stream) -> str:
    return str(stream.locator.get("table", stream.name))


def _window(since: Since, *, upper: bool = True) -> tuple[str, tuple[str, ...]]:
    """An incremental read's predicate and its parameters; the column's
    affinity makes SQLite compare them as it compares the column."""
    col = quote(since.cursor)
    parts, args = ["0" if since.empty else "1"], []
    if since.low is not None:
        parts.append(f"{col} {'>=' if since.inclusive else '>'} ?")
        args.append(since.low)
    if upper and since.high is not None:
        parts.append(f"{col} <= ?")
        args.append(since.high)
    return " AND ".join(parts), tuple(args)


# The rowid's name in a resumable read (a column of that name hides it).
ROWID = "_rowid_"
# What a stream's object is: 'table' or 'view' (resumes() reads only tables by rowid).
KIND_OF = (
    "SELECT type FROM sqlite_master WHERE type IN ('table', 'view') AND name = ? COLLATE NOCASE"
)


def _select(table: str, columns: Sequence[Column]) -> str:
    return f"SELECT {', '.join(quote(c.name) for c in columns)} FROM {quote(table)}"


def _discover(conn: sqlite3.Connection, zone: tzinfo | None = None) -> list[Stream]:
    objects = conn.execute(
        "SELECT name, type FROM sqlite_master WHERE type IN ('table', 'view') "
        "AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\' ORDER BY name"
    ).fetchall()
    # The load markers are the runtime's books, not a stream.
    # Nor are the staging tables of resumable loads.
    books = [(n, k) for n, k in objects if n != MARKERS and not n.startswith(STAGE_PREFIX)]
    return [_describe(conn, name, kind, zone) for name, kind in books]


# A date-time text that ends in an offset: it names an instant.
_OFFSET = re.compile(r".*[0-9](Z|[+-][0-9]{2}(:?[0-9]{2})?)")
# Values a declared date-time column is sampled on to see whether they carry offsets.
OFFSET_SAMPLE = 100


def _column(
    conn: sqlite3.Connection, table: str, info: tuple[Any, ...], nullable: bool, zone: tzinfo | None
) -> Column:
    """A column from its declaration: the neutral type, a date-time as
    timestamptz when the connection names the zone or its values carry
    offsets, and the declared SQL type where it says more (VARCHAR(20))."""
    name, declared = info[0], str(info[1])
    neutral = neutral_of(declared)
    if neutral == "timestamp" and (zone is not None or _offsets(conn, table, name)):
        neutral = "timestamptz"
    return Column(name, neutral, nullable, kept(declared, neutral))


def _offsets(conn: sqlite3.Connection, table: str, column: str) -> bool:
    sample = conn.execute(
        f"SELECT {quote(column)} FROM {quote(table)} WHERE {quote(column)} IS NOT NULL LIMIT ?",
        (OFFSET_SAMPLE,),
    ).fetchall()
    return bool(sample) and all(isinstance(v, str) and _OFFSET.fullmatch(v) for (v,) in sample)


def _describe(conn: sqlite3.Connection, name: str, kind: str, zone: tzinfo | None) -> Stream:
    info = conn.execute(
        'SELECT name, type, "notnull", pk FROM pragma_table_info(?) ORDER BY cid', (name,)
    ).fetchall()
    pk = [r[0] for r in sorted((r for r in info if r[3]), key=lambda r: r[3])]
    # An INTEGER PRIMARY KEY is the rowid: never NULL, whatever notnull says.
    rowid = pk[0] if len(pk) == 1 and _declared(info, pk[0]) == "INTEGER" else None
    columns = tuple(_column(conn, name, r, not r[2] and r[0] != rowid, zone) for r in info)
    estimate = 0
    if kind == "table":
        estimate = conn.execute(f"SELECT count(*) FROM {quote(name)}").fetchone()[0]
    return Stream(
        name=name,
        columns=columns,
        primary_key=tuple(pk),
        row_estimate=estimate,
        locator={"table": name},
    )


def _declared(info: list[Any], column: str) -> str:
    return next(str(r[1]).strip().upper() for r in info if r[0] == column)


class _WritePlan:
    """The statements of one write, all run inside one transaction."""

    def __init__(
        self,
        table: str,
        columns: list[Column],
        mode: WriteMode,
        key: list[str],
        marker: LoadMarker | None = None,
        changes: SchemaChanges | None = None,
    ) -> None:
        self.marker = marker
        # Columns to add first, in the write's transaction (no schemas here).
        self.added = [(c.name, DECLARED[c.type]) for c in changes.columns] if changes else []
        names = [c.name for c in columns]
        if mode.needs_key:
            if not key:
                raise ConfigError(f"write mode {mode.value} needs a key")
            missing = [k for k in key if k not in names]
            if missing:
                raise ConfigError(f"key column(s) {', '.join(missing)} are not written")
        self.table, self.columns, self.mode, self.key = table, columns, mode, key
        self.conflict = ""
        self.to_sqlite = row_writer(table, columns)
        self.key_at = [names.index(k) for k in key] if mode.needs_key else []
        marks = ", ".join("?" for _ in names)
        self.insert_sql = (
            f"INSERT INTO {quote(table)} ({', '.join(map(quote, names))}) VALUES ({marks})"
        )
        if mode.needs_key:
            others = [n for n in names if n not in key]
            updates = ", ".join(f"{quote(n)} = excluded.{quote(n)}" for n in others)
            # A row already holding these values is left alone (IS NOT: NULL-safe).
            differs = " OR ".join(
                f"{quote(table)}.{quote(n)} IS NOT excluded.{quote(n)}" for n in others
            )
            action = f"DO UPDATE SET {updates} WHERE {differs}" if others else "DO NOTHING"
            self.conflict = f" ON CONFLICT ({', '.join(map(quote, key))}) {action}"
            self.insert_sql += self.conflict
        # Rows in the table before the write, and rows the inserts changed:
        # what an upsert inserted, updated and left unchanged.
        self.rows_before = 0
        self.changed = 0

    def begin(self, conn: sqlite3.Connection) -> int | None:
        """Starts the write; with a marker already recorded, the rows it
        recorded instead (and the caller writes nothing)."""
        conn.execute("BEGIN IMMEDIATE")  # the write lock: marker checks queue behind it
        if self.marker is not None:
            conn.execute(MARKERS_DDL)
            found = conn.execute(MARKED_ROWS, _marker_key(self.marker)).fetchone()
            if found is not None:
                return int(found[0])
        if self.added:
            sqlite_shape.add_missing(conn, self.table, self.added)
        existing = conn.execute(
            "SELECT name, type, pk FROM pragma_table_info(?)", (self.table,)
        ).fetchall()
        if existing:
            self._check_table(conn, existing)
        else:
            conn.execute(self._create_sql())
        if self.mode is WriteMode.OVERWRITE:
            conn.execute(f"DELETE FROM {quote(self.table)}")
        if self.mode.needs_key:
            self.rows_before = self._rows(conn)
        if self.mode is WriteMode.MERGE:
            self._create_key_table(conn)
        return None

    def _rows(self, conn: sqlite3.Connection) -> int:
        return int(conn.execute(f"SELECT count(*) FROM {quote(self.table)}").fetchone()[0])

    def _create_sql(self) -> str:
        defs = [
            f"{quote(c.name)} {DECLARED[c.type]}{'' if c.nullable else ' NOT NULL'}"
            for c in self.columns
        ]
        if self.key:
            defs.append(f"PRIMARY KEY ({', '.join(map(quote, self.key))})")
        return f"CREATE TABLE {quote(self.table)} ({', '.join(defs)})"

    def _check_table(self, conn: sqlite3.Connection, existing: list[Any]) -> None:
        present = {r[0] for r in existing}
        for column in self.columns:
            if column.name not in present:
                raise PermanentError(
                    f"sqlite: table {self.table!r} has no column {column.name!r}; "
                    "add it or leave it out of the write"
                )
        if self.mode.needs_key and not _has_unique_key(conn, self.table, existing, self.key):
            raise PermanentError(
                f"sqlite: {self.mode.value} into {self.table!r} needs a primary key or unique "
                f"index on exactly ({', '.join(self.key)}); the table has none"
            )

    def _create_key_table(self, conn: sqlite3.Connection) -> None:
        # The table's own declared types, so affinity stores the keys alike and
        # the anti-join in finish() compares like with like.
        info = conn.execute("SELECT name, type FROM pragma_table_info(?)", (self.table,))
        declared = dict(info.fetchall())
        defs = ", ".join(f"{quote(k)} {declared[k]}" for k in self.key)
        conn.execute("DROP TABLE IF EXISTS temp.setu_merge_keys")
        keys = ", ".join(map(quote, self.key))
        conn.execute(f"CREATE TEMP TABLE setu_merge_keys ({defs}, PRIMARY KEY ({keys}))")

    def insert(self, conn: sqlite3.Connection, batch: Batch) -> None:
        rows = [self.to_sqlite(row) for row in batch]
        # rowcount: the rows these statements changed, not their triggers;
        # an upsert that leaves a row alone changes none.
        self.changed += max(conn.executemany(self.insert_sql, rows).rowcount, 0)
        if self.mode is WriteMode.MERGE:
            marks = ", ".join("?" for _ in self.key)
            conn.executemany(
                f"INSERT OR IGNORE INTO temp.setu_merge_keys VALUES ({marks})",
                [tuple(row[i] for i in self.key_at) for row in rows],
            )

    def insert_staged(self, conn: sqlite3.Connection, stage: str) -> int:
        """The rows of a staging table (setu_engine/staged/resumable.py), in the order they
        were staged, as insert() would write them; then the staging table
        is dropped. The rows staged."""
        names = ", ".join(quote(c.name) for c in self.columns)
        # `WHERE true`: an upsert after INSERT … SELECT must not read as a join.
        self.changed += max(
            conn.execute(
                f"INSERT INTO {quote(self.table)} ({names}) SELECT {names} FROM {quote(stage)} "
                f"WHERE true ORDER BY rowid{self.conflict}"
            ).rowcount,
            0,
        )
        if self.mode is WriteMode.MERGE:
            keys = ", ".join(map(quote, self.key))
            conn.execute(
                f"INSERT OR IGNORE INTO temp.setu_merge_keys SELECT {keys} FROM {quote(stage)}"
            )
        staged = int(conn.execute(f"SELECT count(*) FROM {quote(stage)}").fetchone()[0])
        conn.execute(f"DROP TABLE {quote(stage)}")
        return staged

    def finish(self, conn: sqlite3.Connection, written: int = 0) -> RowChanges:
        changes = RowChanges(written)
        if self.mode.needs_key:
            inserted = self._rows(conn) - self.rows_before
            updated = self.changed - inserted
            changes = RowChanges(inserted, updated, written - inserted - updated)
        if self.marker is not None:
            conn.execute(SET_MARKER, (*_marker_key(self.marker), written))
            sqlite_stage.applied(conn, self.marker, KEEP_MARKERS)
        if self.mode is WriteMode.MERGE:
            match = " AND ".join(f"k.{quote(k)} = t.{quote(k)}" for k in self.key)
            gone = conn.execute(
                f"DELETE FROM {quote(self.table)} AS t WHERE NOT EXISTS "
                f"(SELECT 1 FROM temp.setu_merge_keys AS k WHERE {match})"
            ).rowcount
            changes = RowChanges(changes.inserted, changes.updated, changes.unchanged, gone)
            conn.execute("DROP TABLE temp.setu_merge_keys")
        conn.execute("COMMIT")
        return changes


# Load markers (setu_engine/staged/markers.py), written in the load's own transaction.
MARKERS_DDL = (
    f"CREATE TABLE IF NOT EXISTS {quote(MARKERS)} (run_id TEXT NOT NULL, stream TEXT NOT NULL, "
    "part TEXT NOT NULL DEFAULT '', loaded_at TEXT NOT NULL, rows INTEGER NOT NULL, "
    "PRIMARY KEY (run_id, stream, part))"
)
MARKED_ROWS = f"SELECT rows FROM {quote(MARKERS)} WHERE run_id = ? AND stream = ? AND part = ?"
SET_MARKER = (
    f"INSERT INTO {quote(MARKERS)} (run_id, stream, part, loaded_at, rows) "
    "VALUES (?, ?, ?, strftime('%Y-%m-%dT%H:%M:%fZ', 'now'), ?)"
)


def _marker_key(marker: LoadMarker) -> tuple[str, str, str]:
    return (marker.run_id, marker.stream, marker.part)


def _has_unique_key(
    conn: sqlite3.Connection, table: str, existing: list[Any], key: list[str]
) -> bool:
    wanted = set(key)
    # An INTEGER PRIMARY KEY is the rowid and has no index of its own.
    if {r[0] for r in existing if r[2]} == wanted:
        return True
    for _, index, unique, _, partial in conn.execute(f"PRAGMA index_list({quote(table)})"):
        if unique and not partial:
            columns = {r[2] for r in conn.execute(f"PRAGMA index_info({quote(index)})")}
            if columns == wanted:
                return True
    return False
