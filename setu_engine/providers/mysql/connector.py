"""The `mysql` provider: MySQL 8 and MariaDB 10.11+, one provider, the
server's flavour told by VERSION() at connect. Driver: asyncmy, measured
against aiomysql on the same MariaDB 10.11 (200,000 rows by 8 columns
fetched by a streamed cursor, best of 3): asyncmy 1.4M rows/s, aiomysql
0.13M rows/s; asyncmy is compiled (Cython) and maintained. Through this
connector's read (neutral values, keyset pages): 0.59M rows/s.

A session is set up the same way every time: time_zone '+00:00' (a
`timestamp` then comes in UTC whatever the server's zone), NAMES utf8mb4,
a strict sql_mode (a write that does not fit fails instead of truncating),
autocommit off. Nothing comes from the process's environment or files:
asyncmy reads an option file only when told to (read_default_file and
read_default_group are passed as None), and nothing reads MYSQL_PWD or
~/.my.cnf; `user` and `database` are required, since asyncmy would take
the login of whoever runs the process.

Reads run in one consistent snapshot (`START TRANSACTION WITH CONSISTENT
SNAPSHOT, READ ONLY` under REPEATABLE READ): a table with a primary key in
key order, one keyset page (`WHERE key > last ORDER BY key LIMIT n`) per
batch, each batch with its last key as the position a retried extract
resumes after (in a new snapshot); a table or view without a key, and an
incremental read (in cursor order), as one streamed query (a server-side
cursor, never the whole result in memory). Types and values: types.py.
The write side is write.py's MysqlWrites; errors are classified by
failures.py.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import ssl
from collections.abc import AsyncIterator, Sequence
from decimal import Decimal
from pathlib import Path
from typing import Any

from asyncmy.cursors import SSCursor  # type: ignore[import-untyped,unused-ignore]

from setu_engine.capabilities import Capabilities, Values
from setu_engine.errors import ConfigError, PermanentError, ProviderError
from setu_engine.providers.mysql import infile, wire
from setu_engine.providers.mysql import types as mysql_types
from setu_engine.providers.mysql.failures import (
    DRIVER_ERRORS,
    MALFORMED,
    MalformedRow,
    malformed_row,
    mysql_error,
)
from setu_engine.providers.mysql.write import MysqlWrites, quote
from setu_engine.providers.servers import check_server_fields, tls_context
from setu_engine.staged.markers import MARKERS
from setu_engine.staged.resumable import STAGE_PREFIX
from setu_engine.support.closing import closing
from setu_engine.support.egress import Egress
from setu_engine.support.secrets import check_reference, is_reference
from setu_engine.values.types import INTEGERS, Batch, Column, Stream
from setu_engine.values.window import Since

KEYS = frozenset({"host", "port", "database", "user", "password", "ssl", "connect_timeout"})
DEFAULT_PORT = 3306

SESSION = (
    "SET time_zone = '+00:00'",
    "SET NAMES utf8mb4",
    "SET SESSION sql_mode = 'STRICT_ALL_TABLES,NO_ZERO_DATE,NO_ZERO_IN_DATE,"
    "NO_ENGINE_SUBSTITUTION,ERROR_FOR_DIVISION_BY_ZERO'",
    # A streamed read waits on its consumer (a load) between batches: the
    # server must not give up on sending the next rows after 60 s.
    "SET SESSION net_write_timeout = 3600",
)

TABLES = (
    "SELECT TABLE_NAME, TABLE_TYPE, TABLE_ROWS FROM information_schema.TABLES "
    "WHERE TABLE_SCHEMA = %s ORDER BY TABLE_NAME"
)
COLUMNS = (
    "SELECT TABLE_NAME, COLUMN_NAME, DATA_TYPE, COLUMN_TYPE, IS_NULLABLE, COLUMN_COMMENT "
    "FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = %s "
    "ORDER BY TABLE_NAME, ORDINAL_POSITION"
)
PRIMARY_KEYS = (
    "SELECT TABLE_NAME, COLUMN_NAME FROM information_schema.STATISTICS "
    "WHERE TABLE_SCHEMA = %s AND INDEX_NAME = 'PRIMARY' ORDER BY TABLE_NAME, SEQ_IN_INDEX"
)
# MariaDB's json is longtext with a column CHECK (json_valid(`col`)) named
# after the column.
JSON_CHECKS = (
    "SELECT TABLE_NAME, CONSTRAINT_NAME, CHECK_CLAUSE FROM information_schema.CHECK_CONSTRAINTS "
    "WHERE CONSTRAINT_SCHEMA = %s AND LEVEL = 'Column'"
)


# What the transfer may ask of a MySQL connector (docs/providers.md).
CAPABILITIES = Capabilities(
    resumable_rows=True,
    counts_rows=True,
    staged_loads=True,
    inspectable=True,
    increments="cursor",
    reports_changes=frozenset({"append", "overwrite", "upsert", "merge"}),
    enforces_keys=True,
    # MySQL has no NaN or infinities (numbers and dates); MariaDB stores a
    # float's or double's -0 as 0; a bare numeric keeps no scale (1.10 reads
    # as 1.1) (docs/data-types.md, "MySQL and MariaDB").
    values=Values(
        refuses=frozenset(
            {
                "real:nan",
                "double:nan",
                "numeric:nan",
                "real:infinity",
                "double:infinity",
                "numeric:infinity",
                "date:infinity",
                "timestamp:infinity",
                "timestamptz:infinity",
            }
        ),
        loses=frozenset({"real:-0", "double:-0", "numeric:scale"}),
    ),
)


class MysqlProvider:
    capabilities = CAPABILITIES
    name = "mysql"

    def validate_config(self, config: dict[str, Any]) -> None:
        unknown = sorted(set(config) - KEYS)
        if unknown:
            raise ConfigError(
                f"config: unknown field(s) {', '.join(unknown)}; mysql takes "
                f"{', '.join(sorted(KEYS))}"
            )
        # user and database are required: asyncmy would log in as whoever
        # runs the process. Each may be a secret reference, as host may.
        for field in ("host", "database", "user"):
            if field not in config and field == "host":
                continue
            value = config.get(field)
            if is_reference(value):
                check_reference(value, f"config.{field}")
            elif not isinstance(value, str) or not value.strip():
                raise ConfigError(
                    f"config.{field}: required, a non-empty string or a secret reference"
                )
        check_server_fields(config, DEFAULT_PORT)

    async def connect(
        self, config: dict[str, Any], egress: Egress | None = None, *, root: Path | None = None
    ) -> MysqlConnector:
        # `root` confines nothing here: the cloud's policy refuses a socket path.
        host = config.get("host", "localhost")
        if not isinstance(host, str) or not host.strip():
            raise ConfigError("config.host: empty; name the database's host")
        for field in ("database", "user"):
            if not isinstance(config.get(field), str) or not config[field]:
                raise ConfigError(f"config.{field}: required, a non-empty string")
        port = int(config.get("port", DEFAULT_PORT))
        database = str(config["database"])
        socket_path = host if host.startswith("/") else None
        where = f"{host}/{database}" if socket_path else f"{host}:{port}/{database}"
        address = host
        if egress is not None and socket_path is None:
            address = await egress.address(host, port, "config.host")
        mode = config.get("ssl", "prefer")
        local_infile = infile.install_guard()
        timeout = float(config.get("connect_timeout", 10))
        tls = None if socket_path else tls_context(mode, host)
        try:
            try:
                conn = await _open(config, address, port, socket_path, tls, local_infile, timeout)
            except DRIVER_ERRORS as exc:
                # `prefer` falls back to plain text when the server has no
                # TLS (asyncmy asks for it regardless; the handshake fails).
                if mode != "prefer" or tls is None or not _tls_failed(exc):
                    raise
                conn = await _open(config, address, port, socket_path, None, local_infile, timeout)
        except DRIVER_ERRORS as exc:
            raise mysql_error(exc, f"mysql: cannot connect to {where}", connecting=True) from exc
        except (ProviderError, ConfigError):
            raise
        except MALFORMED as exc:
            # A greeting asyncmy cannot parse: what answers is no MySQL server.
            raise PermanentError(
                f"mysql: cannot connect to {where}: the server's handshake does not parse "
                f"({type(exc).__name__}: {str(exc)[:200]}); check that config.host and "
                "config.port name a MySQL or MariaDB server",
                fields=("config.host", "config.port"),
            ) from exc
        try:
            async with conn.cursor() as cursor:
                for statement in SESSION:
                    await cursor.execute(statement)
                await cursor.execute("SELECT VERSION(), @@local_infile")
                version, server_infile = await cursor.fetchone()
            await conn.commit()
        except DRIVER_ERRORS as exc:
            conn.close()
            raise mysql_error(exc, f"mysql: setting up the session at {where}") from exc
        except ProviderError:
            conn.close()
            raise
        except MALFORMED as exc:
            conn.abandon()
            raise malformed_row(exc, "(the session's setup)", ()) from exc
        return MysqlConnector(
            conn,
            database,
            str(version),
            local_infile=local_infile and bool(int(server_infile or 0)),
            where=where,
        )


async def _open(
    config: dict[str, Any],
    address: str,
    port: int,
    socket_path: str | None,
    tls: ssl.SSLContext | None,
    local_infile: bool,
    timeout: float,
) -> Any:
    # Every setting is explicit: no option file, no ambient login. The
    # password goes as UTF-8 bytes (asyncmy would encode a str as latin-1).
    # The session is wire.py's: a limit on one packet's size, and no
    # password in clear text unless TLS verifies the server.
    password = config.get("password") or ""
    plugins = wire.auth_plugins(str(config.get("ssl", "prefer")), socket=socket_path is not None)
    connecting = wire.connect(
        host=address,
        port=port,
        unix_socket=socket_path,
        user=config["user"],
        password=password.encode("utf-8") if isinstance(password, str) else b"",
        database=config["database"],
        charset="utf8mb4",
        read_default_file=None,
        read_default_group=None,
        init_command=None,
        sql_mode=None,
        autocommit=False,
        local_infile=local_infile,
        ssl=tls,
        connect_timeout=timeout,
        program_name="setu",
        auth_plugin_map=plugins,
    )
    # connect_timeout bounds the TCP connect only; the handshake too.
    return await asyncio.wait_for(connecting, timeout=timeout + 5)


def _tls_failed(exc: BaseException) -> bool:
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, ssl.SSLError):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def _expr(name: str, kind: str) -> str:
    """A column as selected: a float as the double of its exact value (the
    text protocol prints a float with 6 digits: 3.40282e38), a type Setu
    does not know as text."""
    if kind == mysql_types.REAL:
        return f"CAST({quote(name)} AS DOUBLE)"
    if kind == mysql_types.CAST_TEXT:
        return f"CAST({quote(name)} AS CHAR)"
    return quote(name)


def _version(text: str) -> tuple[int, ...]:
    parts = []
    for piece in text.split("-", 1)[0].split(".")[:3]:
        digits = "".join(c for c in piece if c.isdigit())
        parts.append(int(digits or 0))
    return tuple(parts)


class MysqlConnector(MysqlWrites):
    capabilities = CAPABILITIES

    def __init__(
        self, conn: Any, database: str, version: str, *, local_infile: bool, where: str
    ) -> None:
        self.conn = conn
        self.database = database
        self.server_version = version
        self.flavour = "mariadb" if "mariadb" in version.lower() else "mysql"
        self.version = _version(version)
        self.local_infile = local_infile
        self._where = where
        # Rows fetched from the server by read/read_after (CountsRows).
        self.rows_read = 0

    async def close(self) -> None:
        try:
            await self.conn.ensure_closed()
        except DRIVER_ERRORS:
            pass
        finally:
            self.conn.close()

    async def _fetch(self, query: str, args: Sequence[Any] | None = None) -> list[Any]:
        async with self.conn.cursor() as cursor:
            await cursor.execute(query, args)
            return list(await cursor.fetchall())

    async def test(self) -> str:
        try:
            streams = await self.discover()
        except DRIVER_ERRORS as exc:
            raise mysql_error(exc, "mysql") from exc
        name = "MariaDB" if self.flavour == "mariadb" else "MySQL"
        tables = f"{len(streams)} table{'' if len(streams) == 1 else 's'}"
        shown = self.server_version.split("-", 1)[0]
        return f"{name} {shown} at {self._where} ({tables})"

    async def discover(self) -> list[Stream]:
        try:
            tables = await self._fetch(TABLES, (self.database,))
            columns = await self._fetch(COLUMNS, (self.database,))
            keys = await self._fetch(PRIMARY_KEYS, (self.database,))
            checks = await self._fetch(JSON_CHECKS, (self.database,)) if self._mariadb else []
            await self.conn.rollback()
        except DRIVER_ERRORS as exc:
            raise mysql_error(exc, "mysql: discover failed") from exc
        except ProviderError:
            raise
        except MALFORMED as exc:
            raise self._malformed(exc, "(the catalog, at discover)", ()) from exc
        json_columns = {
            (str(table), str(name))
            for table, name, clause in checks
            if str(clause).replace(" ", "").lower() == f"json_valid({quote(str(name))})".lower()
        }
        by_table: dict[str, list[tuple[Column, str]]] = {}
        for table, name, data_type, column_type, nullable, comment in columns:
            column = mysql_types.column_of(
                str(name),
                str(data_type),
                str(column_type),
                nullable == "YES",
                (str(table), str(name)) in json_columns,
                str(comment or ""),
            )
            by_table.setdefault(str(table), []).append(column)
        primary: dict[str, list[str]] = {}
        for table, name in keys:
            primary.setdefault(str(table), []).append(str(name))
        streams = []
        for table, kind, estimate in tables:
            name = str(table)
            if name == MARKERS or name.startswith(STAGE_PREFIX) or name not in by_table:
                continue
            described = by_table[name]
            streams.append(
                Stream(
                    name=name,
                    namespace=self.database,
                    columns=tuple(c for c, _ in described),
                    primary_key=tuple(primary.get(name, ())),
                    row_estimate=int(estimate or 0),
                    locator={
                        "table": name,
                        "view": str(kind) != "BASE TABLE",
                        "kinds": [k for _, k in described],
                    },
                )
            )
        return streams

    def _malformed(
        self, exc: BaseException, stream: str, columns: Sequence[Column]
    ) -> MalformedRow:
        """A row the driver could not decode, classified. asyncmy's parser
        stopped mid-buffer, so the session is out of step: abandoned, and
        whatever the read's end runs on it meets a lost connection."""
        self.conn.abandon()
        return malformed_row(exc, stream, columns)

    @property
    def _mariadb(self) -> bool:
        return self.flavour == "mariadb"

    # -- reading

    def _locate(self, stream: Stream) -> dict[str, Any]:
        """The stream's locator; for one that did not come from discover (a
        manifest's schema), its columns read by their neutral types."""
        if stream.locator:
            return stream.locator
        kinds = [mysql_types.kind_of(c) for c in stream.columns]
        return {"table": stream.name, "view": False, "kinds": kinds}

    def _select(self, stream: Stream) -> tuple[str, str, list[str]]:
        locator = self._locate(stream)
        kinds = list(locator["kinds"])
        exprs = [_expr(c.name, kind) for c, kind in zip(stream.columns, kinds, strict=True)]
        relation = f"{quote(stream.namespace or self.database)}.{quote(locator['table'])}"
        return ", ".join(exprs), relation, kinds

    async def preview(self, stream: Stream, limit: int) -> Batch:
        select, relation, kinds = self._select(stream)
        order = self._order(stream)
        query = f"SELECT {select} FROM {relation}"
        if stream.since is not None:
            query += f" WHERE {self._window(stream.since)}"
        query += f"{order} LIMIT {max(int(limit), 0)}"
        convert = mysql_types.row_reader(stream.name, stream.columns, kinds)
        try:
            rows = await self._fetch(query)
            await self.conn.rollback()
        except DRIVER_ERRORS as exc:
            raise mysql_error(exc, f"mysql: reading {stream.name}") from exc
        except ProviderError:
            raise
        except MALFORMED as exc:
            raise self._malformed(exc, stream.name, stream.columns) from exc
        return convert(rows, 0)

    def _order(self, stream: Stream) -> str:
        if stream.since is not None:
            return f" ORDER BY {quote(stream.since.cursor)}"
        if stream.primary_key:
            return f" ORDER BY {', '.join(quote(k) for k in stream.primary_key)}"
        return ""

    async def read(self, stream: Stream, batch_rows: int) -> AsyncIterator[Batch]:
        # Each inner reader closed here, at once, when this one is: left to
        # the loop, its snapshot's end would race the session's next query.
        if self._keyed(stream):
            async with closing(self._keyset(stream, batch_rows, None)) as pages:
                async for batch, _ in pages:
                    yield batch
            return
        async with closing(self._streamed(stream, batch_rows)) as batches:
            async for batch in batches:
                yield batch

    def _keyed(self, stream: Stream) -> bool:
        """A full read goes in primary-key ranges when the key's order is
        one a comparison follows: an enum or set orders by its place in
        the declaration while `>` compares it as text (a keyset read would
        skip rows), and a type read as cast text orders as itself."""
        if stream.since is not None or not stream.primary_key:
            return False
        kinds = dict(zip(stream.column_names, self._locate(stream)["kinds"], strict=True))
        unordered = (mysql_types.ENUM, mysql_types.CAST_TEXT)
        return all(kinds.get(k) not in unordered for k in stream.primary_key)

    async def resumes(self, stream: Stream) -> bool:
        """A full read of a table with a primary key goes in key order, each
        batch with its last key: it resumes after it (ResumableRows)."""
        return self._keyed(stream)

    async def read_after(
        self, stream: Stream, batch_rows: int, after: str | None
    ) -> AsyncIterator[tuple[Batch, str]]:
        if not self._keyed(stream):
            raise PermanentError(
                f"mysql: {stream.name} has no primary key to resume a read by (its read "
                "is one streamed query)"
            )
        start = _position_values(after, len(stream.primary_key)) if after else None
        async with closing(self._keyset(stream, batch_rows, start)) as pages:
            async for batch, position in pages:
                yield batch, position

    async def _snapshot(self) -> None:
        await self.conn.rollback()  # whatever an earlier call left open
        async with self.conn.cursor() as cursor:
            # A consistent snapshot needs REPEATABLE READ (the next
            # transaction's level, whatever the server's default).
            await cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            await cursor.execute("START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY")

    async def _keyset(
        self, stream: Stream, batch_rows: int, start: list[Any] | None
    ) -> AsyncIterator[tuple[Batch, str]]:
        select, relation, kinds = self._select(stream)
        names = stream.column_names
        key = list(stream.primary_key)
        missing = [k for k in key if k not in names]
        if missing:
            raise PermanentError(
                f"mysql: {stream.name}: its key column(s) {', '.join(missing)} are not read"
            )
        at = [names.index(k) for k in key]
        order = ", ".join(quote(k) for k in key)
        convert = mysql_types.row_reader(stream.name, stream.columns, kinds)
        limit = max(int(batch_rows), 1)
        last = start
        before = 0
        try:
            await self._snapshot()
            while True:
                where = f" WHERE {self._after(key, last)}" if last is not None else ""
                rows = await self._fetch(
                    f"SELECT {select} FROM {relation}{where} ORDER BY {order} LIMIT {limit}"
                )
                if not rows:
                    break
                last = [rows[-1][i] for i in at]
                self.rows_read += len(rows)
                batch = convert(rows, before)
                before += len(rows)
                yield batch, _position(last)
                if len(rows) < limit:
                    break
        except DRIVER_ERRORS as exc:
            raise mysql_error(exc, f"mysql: reading {stream.name}") from exc
        except ProviderError:
            raise
        except MALFORMED as exc:
            raise self._malformed(exc, stream.name, stream.columns) from exc
        finally:
            await asyncio.shield(self._end_read())

    def _after(self, key: list[str], last: list[Any]) -> str:
        """Rows after `last` in key order: (a > x) OR (a = x AND b > y) …,
        which both servers serve as a range of the primary key."""
        terms = []
        for i, name in enumerate(key):
            equal = [f"{quote(key[j])} = {self.conn.literal(last[j])}" for j in range(i)]
            equal.append(f"{quote(name)} > {self.conn.literal(last[i])}")
            terms.append("(" + " AND ".join(equal) + ")")
        return " OR ".join(terms)

    async def _streamed(self, stream: Stream, batch_rows: int) -> AsyncIterator[Batch]:
        select, relation, kinds = self._select(stream)
        query = f"SELECT {select} FROM {relation}"
        if stream.since is not None:
            query += f" WHERE {self._window(stream.since)}"
        query += self._order(stream)
        convert = mysql_types.row_reader(stream.name, stream.columns, kinds)
        before = 0
        cursor = None
        try:
            await self._snapshot()
            cursor = self.conn.cursor(SSCursor)
            await cursor.execute(query)
            while rows := await cursor.fetchmany(max(int(batch_rows), 1)):
                self.rows_read += len(rows)
                batch = convert(rows, before)
                before += len(rows)
                yield batch
        except DRIVER_ERRORS as exc:
            raise mysql_error(exc, f"mysql: reading {stream.name}") from exc
        except ProviderError:
            raise
        except MALFORMED as exc:
            raise self._malformed(exc, stream.name, stream.columns) from exc
        finally:
            await asyncio.shield(self._end_read(cursor))

    async def _end_read(self, cursor: Any = None) -> None:
        """The read's cursor closed (its rest drained) and its snapshot ended."""
        try:
            if cursor is not None:
                await cursor.close()
            await self.conn.rollback()
        except DRIVER_ERRORS:
            # A session that broke mid-read: the read's own error says so.
            pass

    # -- incremental reads (setu_engine/planning/incremental.py)

    async def cursor_high(self, stream: Stream) -> tuple[str | None, int]:
        """The highest cursor value an incremental read would reach, and how
        many rows it would read."""
        assert stream.since is not None, "only for an incremental read"
        _, relation, _ = self._select(stream)
        col = quote(stream.since.cursor)
        where = self._window(stream.since, upper=False)
        try:
            rows = await self._fetch(
                f"SELECT CAST(max({col}) AS CHAR), count(*) FROM {relation} WHERE {where}"
            )
            await self.conn.rollback()
            high, count = rows[0]
            return (None if high is None else str(high)), int(count)
        except DRIVER_ERRORS as exc:
            raise mysql_error(exc, f"mysql: reading {stream.name}") from exc
        except ProviderError:
            raise
        except (*MALFORMED, IndexError, TypeError) as exc:
            raise self._malformed(exc, stream.name, ()) from exc

    def _window(self, since: Since, *, upper: bool = True) -> str:
        """The predicate of an incremental read; the bounds are literals of
        the cursor's own type (MySQL compares an integer with a string as
        doubles, which rounds past 2**53)."""
        col = quote(since.cursor)
        parts = ["FALSE" if since.empty else "TRUE"]
        if since.low is not None:
            op = ">=" if since.inclusive else ">"
            parts.append(f"{col} {op} {self._bound(since.low, since.cursor_type)}")
        if upper and since.high is not None:
            parts.append(f"{col} <= {self._bound(since.high, since.cursor_type)}")
        return " AND ".join(parts)

    def _bound(self, value: str, kind: str) -> str:
        try:
            if kind in INTEGERS:
                return str(int(value))
            if kind == "numeric":
                return str(self.conn.literal(Decimal(value)))
        except (ValueError, ArithmeticError):
            raise ConfigError(f"a saved cursor value {value!r} is not a {kind}") from None
        literal = str(self.conn.literal(value))
        if kind in ("real", "double"):
            return f"CAST({literal} AS DOUBLE)"
        if kind == "date":
            return f"CAST({literal} AS DATE)"
        if kind in ("timestamp", "timestamptz"):
            return f"CAST({literal} AS DATETIME(6))"
        if kind == "time":
            return f"CAST({literal} AS TIME(6))"
        return literal


# -- a resumed read's position: the last key read, as typed JSON


def _position(values: list[Any]) -> str:
    out: list[Any] = []
    for value in values:
        if isinstance(value, bool) or not isinstance(value, int | str):
            out.append(_tagged(value))
        else:
            out.append(value)
    return json.dumps(out, ensure_ascii=False)


def _tagged(value: Any) -> list[str]:
    if isinstance(value, Decimal):
        return ["n", str(value)]
    if isinstance(value, bytes):
        return ["x", value.hex()]
    if isinstance(value, float):
        return ["f", repr(value)]
    if isinstance(value, dt.datetime):
        return ["t", value.isoformat(sep=" ")]
    if isinstance(value, dt.date):
        return ["t", value.isoformat()]
    if isinstance(value, dt.timedelta):
        sign = "-" if value < dt.timedelta(0) else ""
        total = abs(value)
        seconds = total.days * 86400 + total.seconds
        text = f"{sign}{seconds // 3600}:{seconds // 60 % 60:02}:{seconds % 60:02}"
        return ["t", f"{text}.{total.microseconds:06}"]
    return ["s", str(value)]


def _position_values(text: str, width: int) -> list[Any]:
    """A position _position wrote, back as values for literals; anything
    else is refused (a position comes back from Setu's own state, but is
    not trusted to be SQL)."""
    try:
        items = json.loads(text)
        if not isinstance(items, list) or len(items) != width:
            raise ValueError("not a key of this stream")
        values: list[Any] = []
        for item in items:
            if isinstance(item, bool):
                raise ValueError("a boolean")
            if isinstance(item, int | str):
                values.append(item)
                continue
            tag, raw = item
            if tag == "n":
                values.append(Decimal(raw))
            elif tag == "x":
                values.append(bytes.fromhex(raw))
            elif tag == "f":
                values.append(float(raw))
            elif tag in ("t", "s"):
                values.append(str(raw))
            else:
                raise ValueError(f"unknown tag {tag!r}")
        return values
    except (ValueError, TypeError, ArithmeticError) as exc:
        raise PermanentError(
            f"mysql: a resume position this connector did not write ({exc}): {text[:80]!r}"
        ) from None


PROVIDER = MysqlProvider()
