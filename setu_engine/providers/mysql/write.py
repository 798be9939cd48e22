"""The mysql provider's write side: every write mode, all or nothing, with
exactly-once load markers (setu_engine/staged/markers.py).

MySQL and MariaDB commit implicitly before and after any DDL, so a write
cannot create or alter a table inside its transaction as PostgreSQL and
SQLite do. A write therefore runs in three steps:

1. Its rows go into a staging table of its own (`_setu_stage_<hash>` in the
   connection's database, registered by a stage marker under a run id of
   the write's own, as a resumable load's is: one left behind by a dead
   process goes with a later load's stale-stage clean-up): by `LOAD DATA
   LOCAL INFILE` of a file in a private 0700 folder when the server allows
   it (`local_infile`, only with infile.py's guard), else by multi-row
   INSERTs kept below the server's max_allowed_packet. A value the
   destination cannot hold (NaN, ±Infinity, ±infinity dates, a decimal
   with more digits than its column) fails here, before the target is
   touched, as a ValueFault naming the stream, column and row.
2. The shape changes: the target table created when missing, the columns
   of `changes` added (DDL, each committing on its own).
3. One InnoDB transaction applies the staging table to the target
   (INSERT … SELECT; upsert and merge with ON DUPLICATE KEY UPDATE, merge
   then deleting the target rows whose key the input lacks) and records
   the marker; `overwrite` instead fills a new table like the target and
   swaps it in with one atomic `RENAME TABLE t TO old, new TO t`.

An append into a table that exists, with no column to add, needs no DDL:
it skips the staging table and LOAD DATA's its rows straight into the
target, in the one transaction that records the marker (_append_direct,
which says how the warnings LOAD DATA LOCAL gives instead of errors fail
it); the multi-row INSERT path (no local_infile) stages as above.

What a failure leaves: a failure in step 1 or 3 rolls the rows back and
undoes step 2 (the table created by the write dropped, the columns added
dropped again), so the target's rows and shape are as they were. What a
crash (the process killed) between step 2 and the commit of step 3
leaves: the created table (empty) or the added columns (NULL in every
row), and a registered staging table that a later load's stale-stage
clean-up drops; the retry finds no marker and writes again, so no row is
lost or doubled. An overwrite's new table (being filled) and old one
(after the swap) are registered the same way. An overwrite's swap and its marker
are two statements: a crash between them leaves the new rows in place and
no marker, and the retry overwrites again with the same rows (overwrite is
idempotent), so the outcome is the same.

Counts: inserted rows are the table's rows after minus before (inside the
transaction); MySQL's affected-rows of ON DUPLICATE KEY UPDATE is 1 per
insert, 2 per changed row, 0 per row set to the values it had (without
CLIENT_FOUND_ROWS, which asyncmy does not set): so updated is
(affected - inserted) / 2 and unchanged the rest, as SQLite counts.

MySQL 8.0.20 deprecated `VALUES(col)` in ON DUPLICATE KEY UPDATE for a
row alias (8.0.19+); MariaDB has only `VALUES(col)`. For INSERT … SELECT
the select's own columns serve, so MySQL ≥ 8.0.19 gets a derived table
alias `AS new` and `new.col` (checked by reading MySQL's manual, not run).

Types on create (neutral → MySQL): boolean → tinyint(1), smallint,
integer → int, bigint, real → float, double, numeric(p,s) →
decimal(p,s), numeric without p,s → decimal(65,30) commented setu:numeric (a value
with more than 30 fraction digits or 35 integer digits is refused, never
rounded; it reads back without the padding zeros),
text → longtext (varchar(255) as a key column, which must be indexable;
`character varying(n)` → varchar(n)), bytes → longblob (varbinary(255)
as a key), date, time → time(6), timestamp → datetime(6), timestamptz →
datetime(6) holding UTC, uuid → char(36), both marked by a column comment
(setu:timestamptz, setu:uuid) so they read back as timestamptz and uuid,
json → json (MariaDB: longtext checked json_valid).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import json
import math
import os
import re
import shutil
import tempfile
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from datetime import timedelta
from decimal import Decimal
from typing import Any, NoReturn

from asyncmy.errors import MySQLError  # type: ignore[import-untyped,unused-ignore]

from setu_engine.errors import (
    ConfigError,
    PermanentError,
    ValueFault,
)
from setu_engine.kinds import RowChanges, WriteMode, Written
from setu_engine.planning.destination_plan import DestinationColumn, SchemaChanges, TableShape
from setu_engine.providers.mysql import infile
from setu_engine.providers.mysql.failures import DRIVER_ERRORS, mysql_error
from setu_engine.staged.markers import MARKERS, LoadMarker
from setu_engine.staged.resumable import stage_marker, stage_table
from setu_engine.values import sqltypes
from setu_engine.values.special import JSON_NULL, Infinite
from setu_engine.values.types import Batch, Column

# The widest decimal MySQL has: a numeric without precision lands in it.
WIDE_DECIMAL = (65, 30)
# A key column of text or bytes must be indexable: InnoDB indexes up to
# 3072 bytes, 255 utf8mb4 characters are 1020.
KEY_TEXT = "varchar(255)"
KEY_BYTES = "varbinary(255)"
# Rows per INSERT at most, and bytes of SQL per statement at most (a
# fraction of max_allowed_packet, read at the first write).
INSERT_ROWS = 5000
# Rows per LOAD DATA: small enough that the next piece is rendered while the
# server loads this one, large enough that a statement's round trips are
# a small share of it.
LOAD_ROWS = 25_000
STATEMENT_BYTES = 4 * 1024 * 1024

# The comments that mark a column Setu created for a neutral type MySQL
# has no type for (read by types.column_of and neutral_of below).
TIMESTAMPTZ_MARK = "setu:timestamptz"
UUID_MARK = "setu:uuid"
NUMERIC_MARK = "setu:numeric"

DDL = {
    "boolean": "tinyint(1)",
    "smallint": "smallint",
    "integer": "int",
    "bigint": "bigint",
    "real": "float",
    "double": "double",
    "text": "longtext",
    "bytes": "longblob",
    "date": "date",
    "time": "time(6)",
    "timestamp": "datetime(6)",
    # Marked by a comment, so the read side reads them back as they were
    # written (types.py): MySQL's own timestamp ends in 2038, and only
    # MariaDB has a uuid type.
    "timestamptz": f"datetime(6) COMMENT '{TIMESTAMPTZ_MARK}'",
    "uuid": f"char(36) COMMENT '{UUID_MARK}'",
    "json": "json",
}

MARKERS_DDL = (
    "CREATE TABLE IF NOT EXISTS {table} ("
    "run_id varchar(64) NOT NULL, stream varchar(512) NOT NULL, "
    "part varchar(32) NOT NULL DEFAULT '', loaded_at datetime(6) NOT NULL, "
    "`rows` bigint NOT NULL, PRIMARY KEY (run_id, stream, part)"
    ") ENGINE=InnoDB {charset}"
)


def quote(name: str) -> str:
    """A MySQL identifier: backticks, an embedded backtick doubled."""
    if "\0" in name:
        raise ConfigError(f"mysql: the name {name!r} holds a NUL character, which MySQL refuses")
    return "`" + name.replace("`", "``") + "`"


def column_ddl(column: Column, is_key: bool = False) -> str:
    """The MySQL type a column is created with."""
    declared = column.sql_type
    if column.type == "text" and declared:
        parsed = declared.strip().lower()
        if parsed.startswith(("character varying(", "varchar(")):
            return "varchar(" + parsed.split("(", 1)[1]
        if parsed.startswith(("character(", "char(")):
            return "char(" + parsed.split("(", 1)[1]
    if column.type == "numeric":
        precision, scale = _precision(column)
        if not column.sql_type.strip().lower().startswith(("numeric(", "decimal(")):
            # A bare numeric: its values read back without the zeros the
            # wide decimal pads them with (types.py).
            return f"decimal({precision},{scale}) COMMENT '{NUMERIC_MARK}'"
        return f"decimal({precision},{scale})"
    if is_key and column.type == "text":
        return KEY_TEXT
    if is_key and column.type == "bytes":
        return KEY_BYTES
    return DDL[column.type]


def _precision(column: Column) -> tuple[int, int]:
    if column.sql_type:
        try:
            parsed = sqltypes.parse(column.sql_type)
        except Exception:  # an unknown spelling: the wide decimal
            return WIDE_DECIMAL
        args = parsed.args if parsed.base == "numeric" else ()
        if args and 0 < args[0] <= 65:
            scale = args[1] if len(args) > 1 else 0
            if 0 <= scale <= min(30, args[0]):
                return args[0], scale
    return WIDE_DECIMAL


# -- values: neutral Python value -> what MySQL takes (chosen once per column)


def _fault(reason: str, column: Column, value: Any) -> ValueFault:
    return ValueFault(reason, column=column.name, value=value)


def encoder(column: Column) -> Callable[[Any], Any]:
    """A converter from the neutral value to a plain str/int/float/bytes
    MySQL stores exactly; raises ValueFault for a value it cannot hold."""
    kind = column.type

    if kind == "boolean":
        return lambda v: 1 if v else 0
    if kind in ("smallint", "integer", "bigint"):
        return int
    if kind in ("real", "double"):

        def number(v: Any) -> Any:
            f = float(v)
            if not math.isfinite(f):
                raise _fault(f"MySQL has no {v!r} for a {kind} column", column, v)
            return f

        return number
    if kind == "numeric":
        precision, scale = _precision(column)

        def decimal(v: Any) -> str:
            d = v if isinstance(v, Decimal) else Decimal(str(v))
            if not d.is_finite():
                raise _fault("MySQL's decimal holds no NaN or Infinity", column, v)
            _sign, digits, exponent = d.as_tuple()
            assert isinstance(exponent, int)
            fraction = max(-exponent, 0)
            whole = max(len(digits) + exponent, 0)
            if fraction > scale and d != d.quantize(Decimal(1).scaleb(-scale)):
                raise _fault(
                    f"more than {scale} fraction digits: "
                    f"decimal({precision},{scale}) would round it",
                    column,
                    v,
                )
            if whole > precision - scale:
                raise _fault(f"too many digits for decimal({precision},{scale})", column, v)
            return format(d, "f")

        return decimal
    if kind in ("text", "json"):
        dump = str if kind == "text" else _json_text

        def text(v: Any) -> str:
            out = dump(v)
            try:
                out.encode("utf-8")  # a lone surrogate is no utf8mb4 text
            except UnicodeEncodeError as exc:
                raise _fault(f"not valid Unicode text ({exc.reason})", column, v) from exc
            return out

        return text
    if kind == "bytes":
        return bytes
    if kind in ("date", "timestamp", "timestamptz"):

        def moment(v: Any) -> str:
            if isinstance(v, Infinite):
                raise _fault(f"MySQL has no {v} for a {kind} column", column, v)
            if isinstance(v, dt.datetime):
                if v.tzinfo is not None:
                    v = v.astimezone(dt.UTC).replace(tzinfo=None)
                return str(v.isoformat(sep=" ", timespec="microseconds"))
            return str(v.isoformat())

        return moment
    if kind == "time":
        return lambda v: str(v.isoformat(timespec="microseconds"))
    if kind == "uuid":
        return lambda v: str(uuid.UUID(str(v)))
    raise ConfigError(f"mysql: no MySQL type for a {kind} column {column.name!r}")


def _json_text(v: Any) -> str:
    if v is JSON_NULL:  # JSON's null as a whole value (SQL NULL is None)
        return "null"
    return json.dumps(v, ensure_ascii=False, allow_nan=False)


def row_encoder(columns: Sequence[Column]) -> Callable[[Sequence[Any]], list[Any]]:
    encoders = [encoder(c) for c in columns]
    pairs = list(zip(columns, encoders, strict=True))

    def encode(row: Sequence[Any]) -> list[Any]:
        out: list[Any] = []
        for (column, convert), value in zip(pairs, row, strict=True):
            if value is None:
                out.append(None)
                continue
            try:
                out.append(convert(value))
            except ValueFault:
                raise
            except (TypeError, ValueError, ArithmeticError) as exc:
                raise _fault(f"not a {column.type} MySQL can store ({exc})", column, value) from exc
        return out

    return encode


_TSV = str.maketrans({"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r", "\0": "\\0"})


def tsv_field(value: Any) -> str:
    """One field of MySQL's escaped TSV (ESCAPED BY '\\\\'): bytes as hex
    (the LOAD unhexes them), NULL as \\N."""
    if value is None:
        return "\\N"
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, float):
        return repr(value)
    return str(value).translate(_TSV)


def tsv_renderer(columns: Sequence[Column]) -> Callable[[Batch], bytes]:
    """A batch as the bytes of one LOAD DATA file: exactly what row_encoder
    then tsv_field give, faster. Each column is converted as a whole by a
    converter chosen once for it, and the lines joined in C: per value,
    only the conversion runs. Any value the fast converters are unsure of
    (or a lone surrogate, found when the whole text is encoded) sends the
    batch through row_encoder and tsv_field, which say exactly which value
    of which row is refused."""
    fast = [_fast_column(c) for c in columns]
    encode = row_encoder(columns)
    width = len(columns)

    def exact(batch: Batch) -> bytes:
        lines = []
        for index, row in enumerate(batch, 1):
            try:
                fields = encode(row)
            except ValueFault as fault:
                raise ValueFault(
                    fault.reason, column=fault.column, value=fault.value, row=index
                ) from fault
            lines.append("\t".join(tsv_field(v) for v in fields) + "\n")
        return "".join(lines).encode("utf-8")

    def render(batch: Batch) -> bytes:
        if not batch:
            return b""
        try:
            if width == 0:
                raise ValueError("no columns")
            # strict zips: a row of another width goes to the exact path
            fields = [
                convert(values)
                for convert, values in zip(fast, zip(*batch, strict=True), strict=True)
            ]
            text = "\n".join(map("\t".join, zip(*fields, strict=True))) + "\n"
            return text.encode("utf-8")
        except Exception:  # the exact path names the value, or renders it
            return exact(batch)

    return render


_NULL = "\\N"
_MOMENT = "%04d-%02d-%02d %02d:%02d:%02d.%06d"


def _write_file(path: str, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with open(fd, "wb") as out:
        out.write(data)


class _Unsure(Exception):
    """A value the fast converter leaves to the exact path."""


_SPECIAL = re.compile("[\\\\\t\n\r\0]")
_NONE = type(None)


def _fast_column(column: Column) -> Callable[[tuple[Any, ...]], Sequence[str]]:
    """A column's values (a batch's, None for NULL) as their TSV fields.
    Plain text with nothing to escape and exact ints (what most columns
    hold) are checked for that once per column, in C, and go as they are
    or through str; anything else value by value."""
    field = _fast_field(column)

    def each(values: tuple[Any, ...]) -> Sequence[str]:
        return [_NULL if v is None else field(v) for v in values]

    if column.type == "text":

        def text(values: tuple[Any, ...]) -> Sequence[str]:
            kinds = set(map(type, values))
            if kinds <= {str, _NONE} and not _SPECIAL.search("".join(filter(None, values))):
                return values if _NONE not in kinds else [_NULL if v is None else v for v in values]
            return each(values)

        return text
    if column.type in ("smallint", "integer", "bigint"):

        def integer(values: tuple[Any, ...]) -> Sequence[str]:
            kinds = set(map(type, values))
            if kinds == {int}:
                return list(map(str, values))
            if kinds == {int, _NONE}:
                return [_NULL if v is None else str(v) for v in values]
            return each(values)

        return integer
    return each


def _fast_field(column: Column) -> Callable[[Any], str]:
    """One non-NULL value as its TSV field, the same text tsv_field gives
    for what encoder(column) makes of it; raises (anything) for a value the
    exact path must judge. Text is checked for lone surrogates later, by
    encoding the whole batch."""
    kind = column.type
    if kind == "boolean":
        return lambda v: "1" if v else "0"
    if kind in ("smallint", "integer", "bigint"):
        return lambda v: str(int(v))
    if kind in ("real", "double"):

        def number(v: Any) -> str:
            f = float(v)
            if not math.isfinite(f):
                raise _Unsure
            return repr(f)

        return number
    if kind == "numeric":
        precision, scale = _precision(column)
        whole_digits = precision - scale

        def decimal(v: Any) -> str:
            if type(v) is not Decimal:
                raise _Unsure
            # The digits either side of the point, read off the text
            # encoder's check would give: within both limits it is the
            # same text; anything else goes to the exact path.
            text = format(v, "f")
            head, dot, tail = text.partition(".")
            head = head.lstrip("-")
            whole = 0 if dot and head == "0" else len(head)
            if len(tail) > scale or whole > whole_digits or not v.is_finite():
                raise _Unsure
            return text

        return decimal
    if kind == "text":
        return lambda v: str(v).translate(_TSV)
    if kind == "json":
        return lambda v: _json_text(v).translate(_TSV)
    if kind == "bytes":
        return lambda v: bytes(v).hex()
    if kind == "timestamptz" or kind == "timestamp":
        general = encoder(column)

        def moment(v: Any) -> str:
            # A naive or UTC datetime (asyncpg's timestamptz is UTC) is the
            # text of its own fields, as isoformat(" ", "microseconds") would
            # give them without an offset; %-formatting them is a third
            # faster than isoformat, the most costly field of a batch.
            if type(v) is dt.datetime and (v.tzinfo is None or v.tzinfo is dt.UTC):
                return _MOMENT % (v.year, v.month, v.day, v.hour, v.minute, v.second, v.microsecond)
            return str(general(v)).translate(_TSV)

        return moment
    general = encoder(column)
    return lambda v: str(general(v)).translate(_TSV)


class MysqlWrites:
    """The write side of MysqlConnector (connector.py), a mixin: it relies on
    the connector's attributes below."""

    conn: Any  # the asyncmy Connection, autocommit off
    database: str
    flavour: str  # "mariadb" or "mysql"
    version: tuple[int, ...]
    local_infile: bool  # server's @@local_infile is ON and infile's guard is installed

    # -- helpers on the connection

    async def _sql(self, statement: str) -> int:
        async with self.conn.cursor() as cursor:
            await cursor.execute(statement)
            return int(cursor.rowcount or 0)

    async def _one(self, statement: str) -> Any:
        async with self.conn.cursor() as cursor:
            await cursor.execute(statement)
            row = await cursor.fetchone()
            return None if row is None else row[0]

    def _charset(self) -> str:
        """Tables the write creates compare text byte for byte, trailing
        spaces included: the server's default collation (utf8mb4_general_ci)
        would make the keys 'a', 'A' and 'a ' one row."""
        if self.flavour == "mysql":
            return "CHARACTER SET utf8mb4 COLLATE utf8mb4_0900_bin"
        return "CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin"

    def _lit(self, value: Any) -> str:
        return str(self.conn.literal(value))

    def _name(self, table: str, schema: str | None = None) -> str:
        return f"{quote(schema or self.database)}.{quote(table)}"

    def _raise(self, exc: BaseException, what: str, mode: WriteMode | None = None) -> NoReturn:
        """Raises the error for `exc` (called in its except clause): the
        driver's (and the socket's) classified and caused by it, anything
        else (the source's own failure, a hook's, a ValueFault) as it is."""
        if isinstance(exc, infile.RefusedFile):
            raise PermanentError(str(exc)) from exc
        if isinstance(exc, DRIVER_ERRORS):
            # One table for both sides (failures.py): a duplicate key, under
            # append or not, is permanent with PostgreSQL's hint.
            raise mysql_error(exc, f"mysql: {what}") from exc
        raise exc

    async def _rollback(self) -> None:
        with contextlib.suppress(Exception):
            await self.conn.rollback()

    # -- markers

    def _markers(self) -> str:
        return self._name(MARKERS)

    async def marked(self, marker: LoadMarker) -> int | None:
        exists = await self._one(
            "SELECT 1 FROM information_schema.TABLES WHERE TABLE_SCHEMA = "
            f"{self._lit(self.database)} AND TABLE_NAME = {self._lit(MARKERS)}"
        )
        if not exists:
            await self._rollback()
            return None
        found = await self._one(self._marked_sql(marker))
        await self._rollback()
        return None if found is None else int(found)

    def _marked_sql(self, marker: LoadMarker, lock: bool = False) -> str:
        return (
            f"SELECT `rows` FROM {self._markers()} WHERE run_id = {self._lit(marker.run_id)} "
            f"AND stream = {self._lit(marker.stream)} AND part = {self._lit(marker.part)}"
            + (" FOR UPDATE" if lock else "")
        )

    def _set_marker_sql(self, marker: LoadMarker, rows: int) -> str:
        return (
            f"INSERT INTO {self._markers()} (run_id, stream, part, loaded_at, `rows`) VALUES "
            f"({self._lit(marker.run_id)}, {self._lit(marker.stream)}, {self._lit(marker.part)}, "
            f"UTC_TIMESTAMP(6), {int(rows)})"
        )

    # -- the write

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
        mode = WriteMode(mode)
        columns, key = list(columns), list(key)
        names = [c.name for c in columns]
        if mode.needs_key:
            if not key:
                raise ConfigError(f"write mode {mode.value} needs a key")
            missing = [k for k in key if k not in names]
            if missing:
                raise ConfigError(f"key column(s) {', '.join(missing)} are not written")
        target = self._name(stream, schema)
        what = f"writing {target}"
        if marker is not None:
            recorded = await self.marked(marker)
            if recorded is not None:
                return recorded  # an earlier attempt loaded it: write nothing
        if (
            mode is WriteMode.APPEND
            and self.local_infile
            and not changes
            and await self._exists(stream, schema)
        ):
            return await self._append_direct(stream, schema, columns, batches, marker)
        # The write's own staging table, registered as a resumable load's
        # is (under a run id of its own): a process that dies before
        # dropping it leaves it to a later load's stale-stage clean-up.
        registered = stage_marker(f"write-{uuid.uuid4().hex}", stream)
        staged = self._name(stage_table(registered.run_id, stream))
        created = False
        added: list[str] = []
        try:
            try:
                await self._sql(MARKERS_DDL.format(table=self._markers(), charset=self._charset()))
                await self._register(registered)
                await self._create_stage(staged, columns, key if mode.needs_key else [])
                written = await self._fill_stage(stream, staged, columns, batches)
                created, added = await self._shape(stream, schema, columns, key, mode, changes)
                if mode is WriteMode.OVERWRITE:
                    result = await self._overwrite(stream, schema, staged, columns, marker, written)
                else:
                    result = await self._apply(target, staged, columns, key, mode, marker, written)
            except BaseException as exc:
                await asyncio.shield(self._undo(stream, schema, created, added))
                if isinstance(exc, Exception):
                    self._raise(exc, what, mode)
                raise
        finally:
            await asyncio.shield(self._drop_registered(staged, registered))
        return result

    async def _append_direct(
        self,
        stream: str,
        schema: str | None,
        columns: Sequence[Column],
        batches: AsyncIterator[Batch],
        marker: LoadMarker | None,
    ) -> Written | int:
        """An append into a table that exists, with no column to add: no
        DDL, so no staging table. The rows are LOAD DATA'd straight into
        the target in one InnoDB transaction with the marker (LOAD DATA is
        transactional there): a failure rolls every batch back.

        LOAD DATA LOCAL turns what strict mode refuses in an INSERT (a value
        the column cannot hold, a duplicate key, a NULL in a NOT NULL column)
        into warnings and goes on, as the server cannot stop the upload. So
        notes are not recorded while it runs (sql_notes = 0: a note, such as
        a decimal rounded to a smaller scale, is what an INSERT … SELECT in
        strict mode lets pass too) and any warning left after a batch fails
        the write with that warning's code, classified as the same statement's
        error would be (failures.py: 1062 is the duplicate key's hint)."""
        target = self._name(stream, schema)
        try:
            await self._sql(MARKERS_DDL.format(table=self._markers(), charset=self._charset()))
            # The checks _shape makes of an existing table (it makes no DDL
            # for one when nothing is to be added).
            await self._shape(stream, schema, columns, [], WriteMode.APPEND, None)
            await self._rollback()
            await self.conn.begin()
            if marker is not None:
                recorded = await self._one(self._marked_sql(marker, lock=True))
                if recorded is not None:
                    await self._rollback()
                    return int(recorded)
            await self._sql("SET SESSION sql_notes = 0")
            written = await self._load_batches(stream, target, columns, batches, check=True)
            if marker is not None:
                await self._sql(self._set_marker_sql(marker, written))
            await self.conn.commit()
        except BaseException as exc:
            await asyncio.shield(self._rollback())
            if isinstance(exc, Exception):
                self._raise(exc, f"writing {target}", WriteMode.APPEND)
            raise
        finally:
            with contextlib.suppress(Exception):
                await asyncio.shield(self._sql("SET SESSION sql_notes = 1"))
        return Written(written, RowChanges(written))

    async def _load_batches(
        self,
        stream: str,
        table: str,
        columns: Sequence[Column],
        batches: AsyncIterator[Batch],
        *,
        check: bool = False,
        commit: bool = False,
    ) -> int:
        """LOAD DATA's `batches` into `table` in pieces of LOAD_ROWS rows,
        each piece rendered (in a thread) while the server loads the one
        before: Python's work and the server's overlap. `check`: a warning
        fails the load (_refuse_warnings); `commit`: after every piece."""
        render = tsv_renderer(columns)
        folder = tempfile.mkdtemp(prefix="setu-mysql-")
        written = 0
        loading: asyncio.Task[None] | None = None

        async def load(data: bytes, sent: int) -> None:
            loaded = await self._load_file(folder, table, columns, data)
            if check:
                await self._refuse_warnings(table, sent, loaded)
            if commit:
                await self.conn.commit()

        try:
            async for batch in batches:
                for start in range(0, len(batch), LOAD_ROWS):
                    piece = batch[start : start + LOAD_ROWS]
                    try:
                        data = await asyncio.to_thread(render, piece)
                    except ValueFault as fault:
                        raise fault.located(stream, written) from fault
                    if loading is not None:
                        # Shielded: a cancel must not cut a statement short
                        # (the session would be out of step for the rollback).
                        await asyncio.shield(loading)
                    loading = asyncio.create_task(load(data, len(piece)))
                    written += len(piece)
            if loading is not None:
                await asyncio.shield(loading)
        except BaseException:
            if loading is not None:
                # The statement in flight ends before the caller rolls back.
                await asyncio.shield(asyncio.wait([loading]))
                if not loading.cancelled():
                    loading.exception()  # raised here already, or superseded
            raise
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        return written

    async def _refuse_warnings(self, target: str, sent: int, loaded: int) -> None:
        """Raises the first warning the last LOAD DATA left, as its error."""
        async with self.conn.cursor() as cursor:
            await cursor.execute("SHOW WARNINGS LIMIT 1")
            warning = await cursor.fetchone()
        if warning is not None:
            raise MySQLError(int(warning[1]), str(warning[2]))
        if loaded != sent:
            raise PermanentError(
                f"mysql: LOAD DATA into {target} took {loaded} of {sent} rows without a warning"
            )

    async def _register(self, marker: LoadMarker) -> None:
        await self.conn.begin()
        await self._sql(
            f"INSERT IGNORE INTO {self._markers()} (run_id, stream, part, loaded_at, `rows`) "
            f"VALUES ({self._lit(marker.run_id)}, {self._lit(marker.stream)}, "
            f"{self._lit(marker.part)}, UTC_TIMESTAMP(6), 0)"
        )
        await self.conn.commit()

    async def _drop_registered(self, staged: str, marker: LoadMarker) -> None:
        await self._rollback()
        with contextlib.suppress(Exception):
            await self._drop_stage(staged, marker)

    async def _create_stage(
        self, staged: str, columns: Sequence[Column], key: Sequence[str]
    ) -> None:
        # Key columns as wide as any other: the target decides what fits.
        defs = [f"{quote(c.name)} {column_ddl(c)} NULL" for c in columns]
        defs.append("`_setu_seq` bigint NOT NULL AUTO_INCREMENT PRIMARY KEY")
        await self._sql(
            f"CREATE TABLE {staged} ({', '.join(defs)}) ENGINE=InnoDB {self._charset()}"
        )
        if key:
            await self._index_stage(staged, columns, key)

    async def _fill_stage(
        self, stream: str, staged: str, columns: Sequence[Column], batches: AsyncIterator[Batch]
    ) -> int:
        written = 0
        if not self.local_infile:
            encode = row_encoder(columns)
            async for batch in batches:
                rows = []
                for index, row in enumerate(batch, 1):
                    try:
                        rows.append(encode(row))
                    except ValueFault as fault:
                        at = ValueFault(
                            fault.reason, column=fault.column, value=fault.value, row=index
                        )
                        raise at.located(stream, written) from fault
                await self._insert_rows(staged, columns, rows)
                await self.conn.commit()
                written += len(batch)
            return written
        return await self._load_batches(stream, staged, columns, batches, commit=True)

    async def _statement_bytes(self) -> int:
        """How long one INSERT may be: well under the server's
        max_allowed_packet (read once per connection), at most STATEMENT_BYTES."""
        known = getattr(self, "_setu_statement_bytes", None)
        if isinstance(known, int):
            return known
        packet = int(await self._one("SELECT @@max_allowed_packet") or 0)
        limit = max(min(STATEMENT_BYTES, packet // 2), 16 * 1024)
        self._setu_statement_bytes = limit
        return limit

    async def _insert_rows(
        self, staged: str, columns: Sequence[Column], rows: list[list[Any]]
    ) -> None:
        most = await self._statement_bytes()
        head = f"INSERT INTO {staged} ({', '.join(quote(c.name) for c in columns)}) VALUES "
        pieces: list[str] = []
        size = 0
        for row in rows:
            piece = "(" + ", ".join(self._lit(v) for v in row) + ")"
            if pieces and (size + len(piece) > most or len(pieces) >= INSERT_ROWS):
                await self._sql(head + ", ".join(pieces))
                pieces, size = [], 0
            pieces.append(piece)
            size += len(piece) + 2
        if pieces:
            await self._sql(head + ", ".join(pieces))

    async def _load_file(
        self, folder: str, staged: str, columns: Sequence[Column], data: bytes
    ) -> int:
        path = os.path.join(folder, f"{uuid.uuid4().hex}.tsv")
        await asyncio.to_thread(_write_file, path, data)
        targets, sets = [], []
        for index, column in enumerate(columns):
            if column.type == "bytes":
                targets.append(f"@v{index}")
                sets.append(f"{quote(column.name)} = UNHEX(@v{index})")
            else:
                targets.append(quote(column.name))
        statement = (
            f"LOAD DATA LOCAL INFILE {self._lit(path)} INTO TABLE {staged} "
            "CHARACTER SET utf8mb4 FIELDS TERMINATED BY '\\t' ESCAPED BY '\\\\' "
            f"LINES TERMINATED BY '\\n' ({', '.join(targets)})"
            + (f" SET {', '.join(sets)}" if sets else "")
        )
        try:
            with infile.allow(self.conn, path):
                return await self._sql(statement)
        finally:
            os.unlink(path)

    async def _exists(self, table: str, schema: str | None) -> bool:
        found = await self._one(
            "SELECT 1 FROM information_schema.TABLES WHERE TABLE_SCHEMA = "
            f"{self._lit(schema or self.database)} AND TABLE_NAME = {self._lit(table)}"
        )
        return found is not None

    async def _present(self, table: str, schema: str | None) -> list[str]:
        async with self.conn.cursor() as cursor:
            await cursor.execute(
                "SELECT COLUMN_NAME FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = "
                f"{self._lit(schema or self.database)} AND TABLE_NAME = {self._lit(table)} "
                "ORDER BY ORDINAL_POSITION"
            )
            return [str(r[0]) for r in await cursor.fetchall()]

    async def _shape(
        self,
        table: str,
        schema: str | None,
        columns: Sequence[Column],
        key: Sequence[str],
        mode: WriteMode,
        changes: SchemaChanges | None,
    ) -> tuple[bool, list[str]]:
        """Creates the target when missing and adds the columns of
        `changes` (DDL: each commits); what it did, for _undo."""
        target = self._name(table, schema)
        if not await self._exists(table, schema):
            defs = [
                f"{quote(c.name)} {column_ddl(c, c.name in key)}"
                + ("" if c.nullable and c.name not in key else " NOT NULL")
                for c in columns
            ]
            if key:
                defs.append(f"PRIMARY KEY ({', '.join(quote(k) for k in key)})")
            await self._sql(
                f"CREATE TABLE {target} ({', '.join(defs)}) ENGINE=InnoDB {self._charset()}"
            )
            return True, []
        present = set(await self._present(table, schema))
        added: list[str] = []
        if changes is not None and mode is not WriteMode.OVERWRITE:
            for column in changes.columns:
                if column.name not in present:
                    await self._sql(
                        f"ALTER TABLE {target} ADD COLUMN {quote(column.name)} "
                        f"{column_ddl(column)} NULL"
                    )
                    added.append(column.name)
                    present.add(column.name)
        if mode.needs_key and not await self._unique_on(table, schema, key):
            raise PermanentError(
                f"mysql: {mode.value} into {target} needs a primary key or unique index on "
                f"exactly ({', '.join(key)}); the table has none"
            )
        absent = [c.name for c in columns if c.name not in present]
        if absent and mode is not WriteMode.OVERWRITE:
            raise PermanentError(
                f"mysql: table {target} has no column(s) {', '.join(absent)}; "
                "add them or leave them out of the write"
            )
        return False, added

    async def _unique_on(self, table: str, schema: str | None, key: Sequence[str]) -> bool:
        async with self.conn.cursor() as cursor:
            await cursor.execute(
                "SELECT INDEX_NAME, COLUMN_NAME FROM information_schema.STATISTICS WHERE "
                f"TABLE_SCHEMA = {self._lit(schema or self.database)} AND TABLE_NAME = "
                f"{self._lit(table)} AND NON_UNIQUE = 0"
            )
            indexes: dict[str, set[str]] = {}
            for index, column in await cursor.fetchall():
                indexes.setdefault(str(index), set()).add(str(column))
        return set(key) in indexes.values()

    async def _undo(self, table: str, schema: str | None, created: bool, added: list[str]) -> None:
        """Compensates _shape after a failure: the target's shape as it was."""
        await self._rollback()
        target = self._name(table, schema)
        with contextlib.suppress(Exception):
            if created:
                await self._sql(f"DROP TABLE IF EXISTS {target}")
            elif added:
                drops = ", ".join(f"DROP COLUMN {quote(name)}" for name in added)
                await self._sql(f"ALTER TABLE {target} {drops}")

    async def _drop_quietly(self, staged: str) -> None:
        await self._rollback()
        with contextlib.suppress(Exception):
            await self._sql(f"DROP TABLE IF EXISTS {staged}")

    def _upsert_sql(self, target: str, staged: str, names: list[str], key: Sequence[str]) -> str:
        cols = ", ".join(quote(n) for n in names)
        others = [n for n in names if n not in key] or list(key)
        if self.flavour == "mysql" and tuple(self.version) >= (8, 0, 19):
            updates = ", ".join(f"{quote(n)} = `new`.{quote(n)}" for n in others)
            source = f"SELECT * FROM (SELECT {cols} FROM {staged} ORDER BY `_setu_seq`) AS `new`"
        else:
            updates = ", ".join(f"{quote(n)} = VALUES({quote(n)})" for n in others)
            source = f"SELECT {cols} FROM {staged} ORDER BY `_setu_seq`"
        return f"INSERT INTO {target} ({cols}) {source} ON DUPLICATE KEY UPDATE {updates}"

    async def _apply(
        self,
        target: str,
        staged: str,
        columns: Sequence[Column],
        key: Sequence[str],
        mode: WriteMode,
        marker: LoadMarker | None,
        written: int,
        hook: Callable[[], Awaitable[None]] | None = None,
    ) -> Written | int:
        names = [c.name for c in columns]
        cols = ", ".join(quote(n) for n in names)
        await self.conn.begin()
        if marker is not None:
            recorded = await self._one(self._marked_sql(marker, lock=True))
            if recorded is not None:
                await self._rollback()
                return int(recorded)
        if not mode.needs_key:
            await self._sql(
                f"INSERT INTO {target} ({cols}) SELECT {cols} FROM {staged} ORDER BY `_setu_seq`"
            )
            changes = RowChanges(written)
        else:
            before = int(await self._one(f"SELECT COUNT(*) FROM {target}"))
            affected = await self._sql(self._upsert_sql(target, staged, names, key))
            after = int(await self._one(f"SELECT COUNT(*) FROM {target}"))
            inserted = after - before
            updated = (affected - inserted) // 2
            changes = RowChanges(inserted, updated, written - inserted - updated)
            if mode is WriteMode.MERGE:
                match = " AND ".join(f"s.{quote(k)} = t.{quote(k)}" for k in key)
                gone = await self._sql(
                    f"DELETE t FROM {target} AS t WHERE NOT EXISTS "
                    f"(SELECT 1 FROM {staged} AS s WHERE {match})"
                )
                changes = RowChanges(inserted, updated, changes.unchanged, gone)
        if marker is not None:
            await self._sql(self._set_marker_sql(marker, written))
            if marker.part == "":
                # A resumable load's part markers go with its rows.
                await self._sql(self._forget_parts_sql(marker))
        if hook is not None:
            await hook()
        await self.conn.commit()
        return Written(written, changes)

    async def _overwrite(
        self,
        table: str,
        schema: str | None,
        staged: str,
        columns: Sequence[Column],
        marker: LoadMarker | None,
        written: int,
        hook: Callable[[], Awaitable[None]] | None = None,
    ) -> Written | int:
        """A new table like the target, filled, swapped in with one RENAME."""
        target = self._name(table, schema)
        # The new table and the old one after the swap are registered as
        # staging tables (in the connection's database), so a process that
        # dies before dropping them leaves them to the stale-stage clean-up.
        suffix = uuid.uuid4().hex
        new_marker = stage_marker(f"new-{suffix}", table)
        old_marker = stage_marker(f"old-{suffix}", table)
        fresh_name = stage_table(new_marker.run_id, table)
        fresh = self._name(fresh_name)
        old = self._name(stage_table(old_marker.run_id, table))
        cols = ", ".join(quote(c.name) for c in columns)
        await self._register(new_marker)
        await self._register(old_marker)
        await self._sql(f"CREATE TABLE {fresh} LIKE {target}")
        try:
            present = set(await self._present(fresh_name, None))
            for column in columns:
                # The columns `changes` adds, in the new table only: the
                # target's shape changes with the swap or not at all.
                if column.name not in present:
                    await self._sql(
                        f"ALTER TABLE {fresh} ADD COLUMN {quote(column.name)} "
                        f"{column_ddl(column)} NULL"
                    )
            await self._sql(
                f"INSERT INTO {fresh} ({cols}) SELECT {cols} FROM {staged} ORDER BY `_setu_seq`"
            )
            await self.conn.commit()
            if marker is not None:
                await self.conn.begin()
                recorded = await self._one(self._marked_sql(marker, lock=True))
                await self._rollback()
                if recorded is not None:
                    return int(recorded)
            if hook is not None:
                await hook()
            await self._sql(f"RENAME TABLE {target} TO {old}, {fresh} TO {target}")
        except BaseException:
            await asyncio.shield(self._drop_registered(fresh, new_marker))
            await asyncio.shield(self._drop_registered(old, old_marker))
            raise
        await asyncio.shield(self._drop_registered(old, old_marker))
        await asyncio.shield(self._drop_registered(fresh, new_marker))  # its registration
        if marker is not None:
            await self.conn.begin()
            await self._sql(self._set_marker_sql(marker, written))
            await self.conn.commit()
        return Written(written, RowChanges(written))

    def _forget_parts_sql(self, marker: LoadMarker) -> str:
        return (
            f"DELETE FROM {self._markers()} WHERE run_id = {self._lit(marker.run_id)} "
            f"AND stream = {self._lit(marker.stream)} AND part NOT IN ('', 'stage')"
        )

    # -- resumable loads (setu_engine/staged/resumable.py): the staging table
    # holds the chain's output, as rows; it lives in the connection's database.

    copies = False

    async def prepare_stage(
        self, stage: str, columns: Sequence[Column], schema: str | None, marker: LoadMarker
    ) -> None:
        staged = self._name(stage)
        try:
            await self._sql(MARKERS_DDL.format(table=self._markers(), charset=self._charset()))
            if not await self._exists(stage, None):
                await self._create_stage(staged, columns, [])
            await self._register(marker)
        except Exception as exc:
            await self._rollback()
            self._raise(exc, f"creating {staged}")

    async def stage_part(
        self,
        stage: str,
        columns: Sequence[Column],
        part: Any,
        marker: LoadMarker,
        schema: str | None,
    ) -> bool:
        assert isinstance(part, list)
        staged = self._name(stage)
        rows: list[list[Any]] = []
        data = b""
        if self.local_infile:
            try:
                data = tsv_renderer(columns)(part)
            except ValueFault as fault:
                raise fault.located(marker.stream) from fault
        else:
            encode = row_encoder(columns)
            for index, row in enumerate(part, 1):
                try:
                    rows.append(encode(row))
                except ValueFault as fault:
                    at = ValueFault(fault.reason, column=fault.column, value=fault.value, row=index)
                    raise at.located(marker.stream) from fault
        folder = tempfile.mkdtemp(prefix="setu-mysql-") if self.local_infile else None
        try:
            await self.conn.begin()
            if await self._one(self._marked_sql(marker, lock=True)) is not None:
                await self._rollback()
                return False  # an earlier attempt copied it
            if folder is not None:
                await self._load_file(folder, staged, columns, data)
            else:
                await self._insert_rows(staged, columns, rows)
            await self._sql(self._set_marker_sql(marker, len(part)))
            await self.conn.commit()
            return True
        except BaseException as exc:
            await asyncio.shield(self._rollback())
            if isinstance(exc, Exception):
                self._raise(exc, f"staging into {staged}")
            raise
        finally:
            if folder is not None:
                shutil.rmtree(folder, ignore_errors=True)

    async def apply_stage(
        self,
        stage: str,
        columns: Sequence[Column],
        target: Any,
        marker: LoadMarker,
        before_commit: Callable[[], Awaitable[None]],
    ) -> Written | int:
        mode = WriteMode(target.mode)
        key = list(target.key)
        staged = self._name(stage)
        name = self._name(target.table, target.schema)
        created, added = False, list[str]()
        try:
            recorded = await self.marked(marker)
            if recorded is not None:
                return recorded
            written = int(await self._one(f"SELECT COUNT(*) FROM {staged}"))
            await self._rollback()
            if mode is WriteMode.MERGE:
                await self._index_stage(staged, columns, key)
            created, added = await self._shape(
                target.table, target.schema, columns, key, mode, target.changes
            )
            if mode is WriteMode.OVERWRITE:
                result = await self._overwrite(
                    target.table, target.schema, staged, columns, marker, written, before_commit
                )
                await self._sql(self._forget_parts_sql(marker))
                await self.conn.commit()
            else:
                result = await self._apply(
                    name, staged, columns, key, mode, marker, written, before_commit
                )
        except BaseException as exc:
            await asyncio.shield(self._undo(target.table, target.schema, created, added))
            if isinstance(exc, Exception):
                self._raise(exc, f"writing {name}", mode)
            raise
        # The rows are in: the staging table and its registration go (a
        # crash before this leaves them to stale_stages' clean-up).
        await asyncio.shield(self._drop_stage(staged, marker, keep_parts=True))
        return result

    async def _index_stage(
        self, staged: str, columns: Sequence[Column], key: Sequence[str]
    ) -> None:
        """An index on the staging table's key, so merge's anti-join reads
        it rather than scanning it per target row. Text and bytes key
        columns get a 255-character prefix; a key too wide for InnoDB's
        3072 bytes goes without (slower, still right)."""
        kinds = {c.name: c.type for c in columns}
        parts = [
            quote(k) + ("(255)" if kinds.get(k) in ("text", "bytes", "json") else "") for k in key
        ]
        with contextlib.suppress(Exception):
            await self._sql(f"CREATE INDEX `_setu_key` ON {staged} ({', '.join(parts)})")

    async def _drop_stage(self, staged: str, marker: LoadMarker, keep_parts: bool = False) -> None:
        await self._sql(f"DROP TABLE IF EXISTS {staged}")
        await self.conn.begin()
        parts = "part = 'stage'" if keep_parts else "part <> ''"
        await self._sql(
            f"DELETE FROM {self._markers()} WHERE run_id = {self._lit(marker.run_id)} "
            f"AND stream = {self._lit(marker.stream)} AND {parts}"
        )
        await self.conn.commit()

    async def drop_stage(self, stage: str, marker: LoadMarker) -> None:
        try:
            await self._sql(MARKERS_DDL.format(table=self._markers(), charset=self._charset()))
            await self._drop_stage(self._name(stage), marker)
        except Exception as exc:
            await self._rollback()
            self._raise(exc, f"dropping {stage}")

    async def stale_stages(self, run_id: str, idle: timedelta) -> list[LoadMarker]:
        if not await self._exists(MARKERS, None):
            await self._rollback()
            return []
        seconds = max(int(idle.total_seconds()), 0)
        markers = self._markers()
        async with self.conn.cursor() as cursor:
            await cursor.execute(
                f"SELECT s.run_id, s.stream, s.part FROM {markers} s "
                f"WHERE s.part = 'stage' AND s.run_id <> {self._lit(run_id)} "
                f"AND (SELECT max(m.loaded_at) FROM {markers} m WHERE m.run_id = s.run_id "
                f"AND m.stream = s.stream) < UTC_TIMESTAMP(6) - INTERVAL {seconds} SECOND "
                "ORDER BY s.loaded_at"
            )
            found = await cursor.fetchall()
        await self._rollback()
        return [LoadMarker(str(r), str(st), str(p)) for r, st, p in found]

    # -- the destination's shape (setu_engine/planning/destination_plan.py)

    async def inspect_table(self, table: str, schema: str | None) -> TableShape:
        database = schema or self.database
        shown = f"{quote(database)}.{quote(table)}"
        try:
            if schema is not None:
                found = await self._one(
                    "SELECT 1 FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = "
                    f"{self._lit(schema)}"
                )
                if found is None:
                    await self._rollback()
                    return TableShape(shown, missing_schema=schema)
            async with self.conn.cursor() as cursor:
                await cursor.execute(
                    "SELECT COLUMN_NAME, COLUMN_TYPE, IS_NULLABLE, COLUMN_DEFAULT, EXTRA, "
                    "COLUMN_COMMENT "
                    "FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = "
                    f"{self._lit(database)} AND TABLE_NAME = {self._lit(table)} "
                    "ORDER BY ORDINAL_POSITION"
                )
                info = await cursor.fetchall()
                await cursor.execute(
                    "SELECT INDEX_NAME, COLUMN_NAME FROM information_schema.STATISTICS WHERE "
                    f"TABLE_SCHEMA = {self._lit(database)} AND TABLE_NAME = "
                    f"{self._lit(table)} AND NON_UNIQUE = 0"
                )
                indexes: dict[str, set[str]] = {}
                for index, column in await cursor.fetchall():
                    indexes.setdefault(str(index), set()).add(str(column))
            await self._rollback()
        except Exception as exc:
            await self._rollback()
            self._raise(exc, f"inspecting {shown}")
        if not info:
            return TableShape(shown)
        columns = tuple(
            DestinationColumn(
                str(name),
                str(declared),
                neutral_of(str(declared), str(comment or "")),
                nullable == "NO" and default is None and "auto_increment" not in str(extra),
            )
            for name, declared, nullable, default, extra, comment in info
        )
        return TableShape(
            shown, columns=columns, unique_keys=tuple(frozenset(v) for v in indexes.values())
        )

    async def create_schema(self, schema: str) -> None:
        try:
            await self._sql(f"CREATE DATABASE IF NOT EXISTS {quote(schema)} CHARACTER SET utf8mb4")
        except Exception as exc:
            self._raise(exc, f"creating database {schema!r}")

    async def add_columns(self, table: str, schema: str | None, columns: Sequence[Column]) -> None:
        target = self._name(table, schema)
        try:
            present = set(await self._present(table, schema))
            for column in columns:
                if column.name not in present:
                    await self._sql(
                        f"ALTER TABLE {target} ADD COLUMN {quote(column.name)} "
                        f"{column_ddl(column)} NULL"
                    )
            await self._rollback()
        except Exception as exc:
            await self._rollback()
            self._raise(exc, f"adding columns to {target}")


def neutral_of(declared: str, comment: str = "") -> str | None:
    """The neutral type of a MySQL column type (COLUMN_TYPE, and the comment
    that marks a column Setu created), for judging a load's columns against
    it; None (not judged) for what has none."""
    t = declared.strip().lower()
    if comment == TIMESTAMPTZ_MARK and t.startswith("datetime"):
        return "timestamptz"
    if comment == UUID_MARK and t.startswith("char"):
        return "uuid"
    base = t.split("(", 1)[0].split(" ", 1)[0]
    unsigned = "unsigned" in t
    if t.startswith("tinyint(1)") and not unsigned:
        return "boolean"
    if base in ("tinyint", "smallint"):
        return "integer" if unsigned and base == "smallint" else "smallint"
    if base in ("mediumint", "int", "integer"):
        return "bigint" if unsigned and base != "mediumint" else "integer"
    if base == "bigint":
        return "numeric" if unsigned else "bigint"
    if base == "float":
        return "real"
    if base in ("double", "real"):
        return "double"
    if base in ("decimal", "numeric"):
        return "numeric"
    if base in ("char", "varchar", "tinytext", "text", "mediumtext", "longtext", "enum", "set"):
        return "text"
    if base in ("binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob"):
        return "bytes"
    if base in ("date", "time", "json"):
        return base
    if base == "datetime":
        # A datetime holds a timestamptz (in UTC, as the write side stores
        # one) as well as a timestamp: judged by the widest it takes.
        return "timestamptz"
    if base == "timestamp":
        return "timestamptz"
    if base == "year":
        return "smallint"
    return None
