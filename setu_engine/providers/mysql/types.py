"""MySQL's and MariaDB's column types as neutral columns, and their values,
as asyncmy gives them, as neutral values (docs/data-types.md, "MySQL and
MariaDB").

A column's declared type (information_schema.COLUMNS.COLUMN_TYPE) decides
its neutral type and how its values are read; both are decided once, at
discover, and the stream's locator carries one read kind per column, so a
batch is converted without looking at the catalog again.

Decisions a reader should know:

- `tinyint(1)` is boolean (as MySQL's own BOOL is): 0 and 1 read as false
  and true, any other value it holds (2, -1) fails as a ValueFault naming
  the stream, column and row: a boolean that rounds 2 to true loses data.
  `bit(1)` is boolean too; `bit(n)` is bytes, big-endian, as MySQL stores it.
- Unsigned integers widen to a type that holds their maximum: tinyint and
  smallint unsigned to smallint and integer, int unsigned to bigint,
  bigint unsigned to numeric(20,0) (a Decimal).
- `float` is a float4: it reads as the double of exactly the float4
  value, as PostgreSQL's real does (asyncmy parses the server's short text
  as a double, which is not the float4's value).
- `datetime(n)` is timestamp (naive); `timestamp(n)` is timestamptz: the
  session's time zone is pinned to UTC at connect, so the server sends it
  in UTC whatever its own zone, and it reads as an aware UTC datetime.
- Zero dates ('0000-00-00', '2020-00-10', '0000-00-00 00:00:00'), which
  MySQL stores outside strict mode and asyncmy hands over as text: NULL in
  a nullable column (what Connector/J's zeroDateTimeBehavior=CONVERT_TO_NULL
  and Airbyte do: no date is the honest reading), and a ValueFault in a NOT
  NULL column (a NULL there would break the column's own declaration).
- `time` holds -838:59:59 to 838:59:59 (an interval); asyncmy gives a
  timedelta. A value from 00:00:00 to 23:59:59.999999 reads as a
  datetime.time; any other fails as a ValueFault (the neutral time is a
  time of day; a view casting it to char reads it as text).
- `json` (MySQL's own type; on MariaDB an alias of longtext with a CHECK
  json_valid(col) constraint, found in information_schema.CHECK_CONSTRAINTS)
  reads as decoded JSON, JSON's null as JSON_NULL.
- enum and set read as text; MariaDB's uuid as uuid, inet4/inet6 as text;
  geometry types as bytes (MySQL's internal form: SRID then WKB); a type
  Setu does not know is selected CAST AS CHAR, as text.
- A `datetime` commented `setu:timestamptz`, a `char(36)` commented
  `setu:uuid` and a `decimal(65,30)` commented `setu:numeric` are columns
  the write side created (write.py) for a timestamptz (held in UTC), a
  uuid and a bare numeric: they read back as those types, the numeric's
  values without the padding zeros (1.10 reads as 1.1: a bare numeric
  keeps no scale).
- Text of any collation (binary ones included) is str as stored; char(n)
  loses trailing spaces on read, as MySQL itself strips them.
"""

from __future__ import annotations

import datetime as dt
import json
import re
import struct
import uuid
from collections.abc import Callable, Sequence
from decimal import Decimal
from operator import itemgetter
from typing import Any

from setu_engine.errors import ValueFault
from setu_engine.values import sqltypes
from setu_engine.values.special import JSON_NULL
from setu_engine.values.types import Column

# The comments the write side marks its columns with (write.py's, which
# this module cannot import: write.py is built on the connector's floor).
TIMESTAMPTZ_MARK = "setu:timestamptz"
UUID_MARK = "setu:uuid"
NUMERIC_MARK = "setu:numeric"

# How a column's value is read (one per column, in the stream's locator).
PLAIN = "plain"
BOOL = "bool"  # tinyint(1)
BIT1 = "bit1"
REAL = "real"
UNSIGNED64 = "u64"
BARE_NUMERIC = "bare-numeric"  # a decimal(65,30) Setu made for a bare numeric
DATE = "date"
DATETIME = "datetime"
TIMESTAMPTZ = "timestamptz"
TIME = "time"
JSON = "json"
UUID = "uuid"
CAST_TEXT = "cast-text"
# Text as it comes, but ordered by its place in the declaration, not as
# text: no key range of it can be read by comparing strings.
ENUM = "enum"

_GEOMETRY = frozenset(
    {
        "geometry",
        "point",
        "linestring",
        "polygon",
        "multipoint",
        "multilinestring",
        "multipolygon",
        "geometrycollection",
        "geomcollection",
    }
)
_TEXT = frozenset({"tinytext", "text", "mediumtext", "longtext", "enum", "set", "inet4", "inet6"})
_BYTES = frozenset({"binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob"})
_ARGS = re.compile(r"\(\s*(\d+)\s*(?:,\s*(\d+)\s*)?\)")


def _args(column_type: str) -> tuple[int, ...]:
    found = _ARGS.search(column_type)
    if found is None:
        return ()
    return tuple(int(a) for a in found.groups() if a is not None)


def _kept(text: str, neutral: str) -> str:
    return sqltypes.kept(text, neutral)


def column_of(
    name: str,
    data_type: str,
    column_type: str,
    nullable: bool,
    is_json: bool = False,
    comment: str = "",
) -> tuple[Column, str]:
    """The neutral column of a MySQL column, and how its values are read."""
    base = data_type.strip().lower()
    declared = column_type.strip().lower()
    unsigned = "unsigned" in declared
    args = _args(declared)

    def col(neutral: str, sql_type: str = "") -> Column:
        return Column(name, neutral, nullable, sql_type)

    if is_json or base == "json":
        return col("json"), JSON
    if comment == TIMESTAMPTZ_MARK and base == "datetime":
        return col("timestamptz", _kept("timestamp(6) with time zone", "timestamptz")), TIMESTAMPTZ
    if comment == UUID_MARK and base == "char":
        return col("uuid"), UUID
    if base == "tinyint":
        if declared.startswith("tinyint(1)") and not unsigned:
            return col("boolean"), BOOL
        return col("smallint"), PLAIN
    if base == "smallint":
        return col("integer" if unsigned else "smallint"), PLAIN
    if base in ("mediumint", "int", "integer"):
        return col("bigint" if unsigned and base != "mediumint" else "integer"), PLAIN
    if base == "bigint":
        if unsigned:
            return col("numeric", "numeric(20,0)"), UNSIGNED64
        return col("bigint"), PLAIN
    if base in ("decimal", "numeric") and comment == NUMERIC_MARK:
        return col("numeric"), BARE_NUMERIC
    if base in ("decimal", "numeric"):
        # MySQL's decimal without (p,s) is decimal(10,0).
        precision = args[0] if args else 10
        scale = args[1] if len(args) > 1 else 0
        return col("numeric", _kept(f"numeric({precision},{scale})", "numeric")), PLAIN
    if base == "float":
        return col("real"), REAL
    if base in ("double", "real", "double precision"):
        return col("double"), PLAIN
    if base == "bit":
        width = args[0] if args else 1
        return (col("boolean"), BIT1) if width == 1 else (col("bytes"), PLAIN)
    if base == "varchar":
        return col("text", _kept(f"character varying({args[0]})", "text") if args else ""), PLAIN
    if base == "char":
        return col("text", _kept(f"character({args[0]})", "text") if args else ""), PLAIN
    if base in ("enum", "set"):
        return col("text"), ENUM
    if base in _TEXT:
        return col("text"), PLAIN
    if base in _BYTES or base in _GEOMETRY:
        return col("bytes"), PLAIN
    if base == "date":
        return col("date"), DATE
    if base == "datetime":
        fraction = f"({args[0]})" if args else "(0)"
        return col("timestamp", _kept(f"timestamp{fraction}", "timestamp")), DATETIME
    if base == "timestamp":
        fraction = f"({args[0]})" if args else "(0)"
        sql_type = _kept(f"timestamp{fraction} with time zone", "timestamptz")
        return col("timestamptz", sql_type), TIMESTAMPTZ
    if base == "time":
        fraction = f"({args[0]})" if args else "(0)"
        return col("time", _kept(f"time{fraction}", "time")), TIME
    if base == "year":
        return col("smallint"), PLAIN
    if base == "uuid":
        return col("uuid"), UUID
    return col("text"), CAST_TEXT


def kind_of(column: Column) -> str:
    """How to read a column that did not come from discover (a manifest's
    schema): by its neutral type alone."""
    return {
        "boolean": BOOL,
        "real": REAL,
        "date": DATE,
        "timestamp": DATETIME,
        "timestamptz": TIMESTAMPTZ,
        "time": TIME,
        "json": JSON,
        "uuid": UUID,
    }.get(column.type, PLAIN)


# -- values: asyncmy's Python value -> the neutral one

_F4 = struct.Struct("<f")
_DAY = dt.timedelta(days=1)


class _Fault(Exception):
    """A value the column's neutral type cannot hold (located by the reader)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


_ZERO = object()  # a zero date in a nullable column: reads as NULL


def _bool(v: Any) -> bool:
    if isinstance(v, bytes):  # a bit(1) read by its neutral type alone
        v = int.from_bytes(v, "big")
    if v == 0 or v == 1:
        return bool(v)
    raise _Fault(
        "a tinyint(1) column reads as boolean, and this value is neither 0 nor 1 "
        "(declare the column tinyint, or read it through a view that casts it)"
    )


def _bit1(v: Any) -> bool:
    return bool(int.from_bytes(v, "big")) if isinstance(v, bytes) else bool(v)


def _real(v: Any) -> float:
    return float(_F4.unpack(_F4.pack(float(v)))[0])


def _u64(v: Any) -> Decimal:
    return Decimal(int(v))


def _bare(v: Any) -> Decimal:
    """A bare numeric's value without the wide decimal's padding zeros
    (1.100000… as 1.1, exactly: no context rounds it)."""
    text = format(v, "f")
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return Decimal(text)


def _moment(kind: type) -> Callable[[Any], Any]:
    def read(v: Any) -> Any:
        if isinstance(v, kind):
            return v
        return _ZERO  # asyncmy's text for a date it cannot make: a zero date

    return read


def _timestamptz(v: Any) -> Any:
    if isinstance(v, dt.datetime):
        return v.replace(tzinfo=dt.UTC)
    return _ZERO


def _time(v: Any) -> dt.time:
    if isinstance(v, dt.time):
        return v
    if isinstance(v, dt.timedelta) and dt.timedelta(0) <= v < _DAY:
        seconds = v.seconds
        return dt.time(seconds // 3600, seconds // 60 % 60, seconds % 60, v.microseconds)
    raise _Fault(
        "a time outside 00:00:00 to 23:59:59.999999 is an interval, not a time of day "
        "(read it through a view that casts it to char)"
    )


def _json(v: Any) -> Any:
    if isinstance(v, bytes):
        v = v.decode("utf-8")
    value = json.loads(v)
    return JSON_NULL if value is None else value


def _uuid(v: Any) -> uuid.UUID:
    return v if isinstance(v, uuid.UUID) else uuid.UUID(str(v))


def _text(v: Any) -> str:
    return v.decode("utf-8") if isinstance(v, bytes) else str(v)


_READERS: dict[str, Callable[[Any], Any]] = {
    BOOL: _bool,
    BIT1: _bit1,
    REAL: _real,
    UNSIGNED64: _u64,
    BARE_NUMERIC: _bare,
    DATE: _moment(dt.date),
    DATETIME: _moment(dt.datetime),
    TIMESTAMPTZ: _timestamptz,
    TIME: _time,
    JSON: _json,
    UUID: _uuid,
    CAST_TEXT: _text,
}


def row_reader(
    stream: str, columns: Sequence[Column], kinds: Sequence[str]
) -> Callable[[Sequence[tuple[Any, ...]], int], list[tuple[Any, ...]]]:
    """A converter of a batch of asyncmy rows to neutral rows; its second
    argument is the rows read before the batch, so a ValueFault names the
    row counted from the stream's start."""
    work = [
        (index, column, _READERS[kind])
        for index, (column, kind) in enumerate(zip(columns, kinds, strict=True))
        if kind in _READERS
    ]

    def convert(rows: Sequence[tuple[Any, ...]], before: int) -> list[tuple[Any, ...]]:
        todo = [w for w in work if not _unchanged(kinds[w[0]], rows, w[0])]
        if not todo:
            return list(map(tuple, rows))
        out: list[tuple[Any, ...]] = []
        for number, row in enumerate(rows, before + 1):
            values = list(row)
            for index, column, read in todo:
                value = values[index]
                if value is None:
                    continue
                try:
                    converted = read(value)
                except _Fault as fault:
                    raise _located(fault.reason, column, value, number, stream) from None
                # A hostile server's value may also overflow (a float's
                # 1e300) or nest past the JSON decoder's depth.
                except (ValueError, TypeError, OverflowError, RecursionError) as exc:
                    reason = f"not a {column.type} value ({str(exc)[:200]})"
                    raise _located(reason, column, value, number, stream) from None
                if converted is _ZERO:
                    if not column.nullable:
                        raise _located(
                            "a zero date in a NOT NULL column (it reads as NULL only where "
                            "the column takes NULL)",
                            column,
                            value,
                            number,
                            stream,
                        )
                    converted = None
                values[index] = converted
            out.append(tuple(values))
        return out

    return convert


# The classes a reader gives back as they are (a datetime column's datetime):
# a batch whose column holds only these (and NULL), as one set(map(type, ...))
# in C says, skips that column's per-value call.
_AS_IS: dict[str, frozenset[type]] = {
    DATE: frozenset({dt.date, type(None)}),
    DATETIME: frozenset({dt.datetime, type(None)}),
    TIME: frozenset({dt.time, type(None)}),
    UUID: frozenset({uuid.UUID, type(None)}),
    CAST_TEXT: frozenset({str, type(None)}),
}


def _unchanged(kind: str, rows: Sequence[tuple[Any, ...]], index: int) -> bool:
    classes = _AS_IS.get(kind)
    return classes is not None and set(map(type, map(itemgetter(index), rows))) <= classes


def _located(reason: str, column: Column, value: Any, row: int, stream: str) -> ValueFault:
    return ValueFault(reason, column=column.name, value=value, row=row, stream=stream)
