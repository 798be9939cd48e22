"""The `sqlite` provider's types and values: the declared SQLite type of each
neutral type, the neutral type of a declared SQLite type, and the converters
between neutral values and what SQLite stores (ISO 8601 text for dates and
times, text for numerics and JSON, 0/1 for booleans).

Separate from connector.py because it is pure data conversion, with no
connection or I/O: the connector only asks it for a row reader or writer.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Sequence
from datetime import UTC, date, datetime, time, tzinfo
from decimal import Decimal
from typing import Any
from uuid import UUID

from setu_engine.errors import ProviderError, ValueFault
from setu_engine.providers.sqlite import columnar
from setu_engine.values.special import INFINITIES, JSON_NULL, Infinite, shortest_real
from setu_engine.values.types import Column, Row

Convert = Callable[[Any], Any]

# Declared types for the tables write() creates; each reads back as its own
# neutral type (INT4, FLOAT4: INTEGER and REAL read as bigint and double).
# Numerics are declared with TEXT affinity: NUMERIC affinity would turn '0.10'
# into REAL 0.1, losing the scale and any digit past the 15th.
DECLARED: dict[str, str] = {
    "boolean": "BOOLEAN",
    "smallint": "SMALLINT",
    "integer": "INT4",
    "bigint": "BIGINT",
    "real": "FLOAT4",
    "double": "DOUBLE",
    "numeric": "DECIMAL_TEXT",
    "text": "TEXT",
    "bytes": "BLOB",
    "date": "DATE",
    "time": "TIME",
    "timestamp": "DATETIME",
    "timestamptz": "TIMESTAMPTZ",
    "uuid": "UUID",
    "json": "JSON",
}

_EXACT: dict[str, str] = {
    "BOOLEAN": "boolean",
    "BOOL": "boolean",
    "SMALLINT": "smallint",
    "INT2": "smallint",
    "INT4": "integer",
    "FLOAT4": "real",
    "REAL": "double",
    "FLOAT": "double",
    "DOUBLE": "double",
    "DOUBLE PRECISION": "double",
    "NUMERIC": "numeric",
    "DECIMAL": "numeric",
    "DECIMAL_TEXT": "numeric",
    "DATE": "date",
    "DATETIME": "timestamp",
    "TIMESTAMP": "timestamp",
    "TIMESTAMPTZ": "timestamptz",
    "TIMESTAMP WITH TIME ZONE": "timestamptz",
    "TIME": "time",
    "UUID": "uuid",
    "JSON": "json",
    "JSONB": "json",
    "BLOB": "bytes",
}


def neutral_of(declared: str) -> str:
    """The neutral type of a declared SQLite column type: known names first,
    then SQLite's own affinity rules; anything else reads as text."""
    base = " ".join(declared.split("(")[0].upper().split())
    if base in _EXACT:
        return _EXACT[base]
    if "INT" in base:
        return "bigint"
    if any(part in base for part in ("CHAR", "CLOB", "TEXT")):
        return "text"
    if "BLOB" in base:
        return "bytes"
    if any(part in base for part in ("REAL", "FLOA", "DOUB")):
        return "double"
    return "text"


def _r_boolean(v: Any) -> bool:
    if isinstance(v, int | float) and v in (0, 1):
        return bool(v)
    if isinstance(v, str):
        word = v.strip().lower()
        if word in ("1", "t", "true", "y", "yes"):
            return True
        if word in ("0", "f", "false", "n", "no"):
            return False
    raise ValueError("not a boolean (0/1, true/false)")


def _int_reader(bits: int) -> Convert:
    low, high = -(2 ** (bits - 1)), 2 ** (bits - 1) - 1

    def read(v: Any) -> int:
        if isinstance(v, float) and not v.is_integer():
            raise ValueError("not a whole number")
        if isinstance(v, bytes):
            raise TypeError("a blob")
        number = int(v)
        if not low <= number <= high:
            raise ValueError(f"out of range for a {bits}-bit integer")
        return number

    return read


def _r_double(v: Any) -> float:
    if isinstance(v, bytes):
        raise TypeError("a blob")
    return float(v)


def _r_numeric(v: Any) -> Decimal:
    if isinstance(v, float):
        return Decimal(repr(v))  # the shortest repr, not the binary expansion
    if isinstance(v, bytes):
        raise TypeError("a blob")
    return Decimal(v.strip() if isinstance(v, str) else v)


def _r_text(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def _r_bytes(v: Any) -> bytes:
    if isinstance(v, str):
        return v.encode()
    if not isinstance(v, bytes):
        raise TypeError("a number")
    return v


def _r_date(v: Any) -> date | Infinite:
    if v in INFINITIES:
        return INFINITIES[v]
    return date.fromisoformat(v)


def _r_time(v: Any) -> time:
    value = time.fromisoformat(v)
    if value.tzinfo is not None:
        raise ValueError("a time with a zone")
    return value


def _r_timestamp(v: Any) -> datetime | Infinite:
    if v in INFINITIES:
        return INFINITIES[v]
    value = datetime.fromisoformat(v)
    if value.tzinfo is not None:  # an offset in a naive column: keep the instant, in UTC
        value = value.astimezone(UTC).replace(tzinfo=None)
    return value


def _r_timestamptz(v: Any, zone: tzinfo = UTC) -> datetime | Infinite:
    if v in INFINITIES:
        return INFINITIES[v]
    value = datetime.fromisoformat(v)
    if value.tzinfo is None:
        # In the connection's config.timezone; else UTC, as SQLite's
        # CURRENT_TIMESTAMP and datetime() are.
        value = value.replace(tzinfo=zone)
    return value.astimezone(UTC)


def _r_uuid(v: Any) -> UUID:
    return UUID(bytes=v) if isinstance(v, bytes) else UUID(v)


def _r_json(v: Any) -> Any:
    # A JSON column's numbers may be stored as numbers (NUMERIC affinity).
    if isinstance(v, int | float):
        return v
    value = json.loads(v)
    return JSON_NULL if value is None else value  # SQL NULL never gets here


_READERS: dict[str, Convert] = {
    "boolean": _r_boolean,
    "smallint": _int_reader(16),
    "integer": _int_reader(32),
    "bigint": _int_reader(64),
    "real": _r_double,
    "double": _r_double,
    "numeric": _r_numeric,
    "text": _r_text,
    "bytes": _r_bytes,
    "date": _r_date,
    "time": _r_time,
    "timestamp": _r_timestamp,
    "timestamptz": _r_timestamptz,
    "uuid": _r_uuid,
    "json": _r_json,
}


def _w_timestamptz(v: Any) -> str:
    if isinstance(v, Infinite):
        return v.text
    if not isinstance(v, datetime) or v.utcoffset() is None:
        raise ValueError("a timestamptz needs an aware datetime")
    # UTC text sorts in time order.
    return v.astimezone(UTC).isoformat(sep=" ")


def _w_timestamp(v: Any) -> str:
    return v.text if isinstance(v, Infinite) else str(v.isoformat(sep=" "))


def _w_date(v: Any) -> str:
    return v.text if isinstance(v, Infinite) else date.isoformat(v)


def _w_float(v: Any) -> Any:
    # SQLite stores a NaN as NULL: as text it stays NaN (REAL affinity
    # keeps text that is no number), and reads back through float().
    return "NaN" if v != v else v


def _w_real(v: Any) -> Any:
    # The double of the float4's shortest digits: SQLite shows 0.01, not
    # 0.009999999776482582, and it encodes back to the same float4.
    return "NaN" if v != v else shortest_real(v)


def _w_json(v: Any) -> str:
    return "null" if v is JSON_NULL else _dump_json(v)


_dump_json = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode

_WRITERS: dict[str, Convert] = {
    "boolean": int,
    "numeric": str,
    "bytes": bytes,
    "real": _w_real,
    "double": _w_float,
    "date": _w_date,
    "time": time.isoformat,
    "timestamp": _w_timestamp,
    "timestamptz": _w_timestamptz,
    "uuid": str,
    "json": _w_json,
}


class _Converter:
    """One row at a time, each value through its column's converter; counts
    the rows it converted, so a bad value names its row in the table's order."""

    def __init__(
        self, table: str, columns: Sequence[Column], table_of: dict[str, Convert], verb: str
    ) -> None:
        self.table, self.columns, self.verb = table, columns, verb
        self.convs = [table_of.get(c.type) for c in columns]
        self.pairs = [(i, f) for i, f in enumerate(self.convs) if f is not None]
        self.done = 0

    def __call__(self, row: Sequence[Any]) -> Row:
        values = list(row)
        try:
            for i, f in self.pairs:
                if values[i] is not None:
                    values[i] = f(values[i])
        except (ValueError, TypeError, ArithmeticError, AttributeError) as exc:
            raise _value_error(
                self.table, self.columns, self.convs, row, self.verb, self.done + 1
            ) from exc
        self.done += 1
        return tuple(values)


def _converter(
    table: str, columns: Sequence[Column], table_of: dict[str, Convert], verb: str
) -> Callable[[Sequence[Any]], Row]:
    return _Converter(table, columns, table_of, verb)


def _value_error(
    table: str,
    columns: Sequence[Column],
    convs: list[Convert | None],
    row: Any,
    verb: str,
    number: int,
) -> ProviderError:
    for column, f, value in zip(columns, convs, row, strict=True):
        if f is None or value is None:
            continue
        try:
            f(value)
        except Exception as exc:
            # Permanent: another attempt meets the same value.
            return ValueFault(
                f"sqlite table {table!r}: cannot {verb} it as {column.type} "
                f"({exc or type(exc).__name__})",
                column=column.name,
                value=value,
                row=number,
            )
    return ProviderError(f"sqlite: table {table!r}: cannot {verb} row {row!r:.200}")


def row_reader(
    table: str, columns: Sequence[Column], zone: tzinfo = UTC
) -> Callable[[Sequence[Any]], Row]:
    """Converts a row as sqlite3 returns it into neutral values; a
    timestamptz without an offset is in `zone`."""
    return _converter(table, columns, _readers(zone), "read")


def _readers(zone: tzinfo) -> dict[str, Convert]:
    if zone is UTC:
        return _READERS
    return {**_READERS, "timestamptz": functools.partial(_r_timestamptz, zone=zone)}


def batch_reader(table: str, columns: Sequence[Column], zone: tzinfo = UTC) -> columnar.BatchReader:
    """Converts a batch of rows as sqlite3 returns them into neutral values,
    column by column (columnar.py): the same values, and the same error for
    a bad one, as row_reader's row by row, at a fraction of the Python work."""
    return columnar.BatchReader(_Converter(table, columns, _readers(zone), "read"), zone)


def row_writer(table: str, columns: Sequence[Column]) -> Callable[[Sequence[Any]], Row]:
    """Converts a row of neutral values into what SQLite stores."""
    return _converter(table, columns, _WRITERS, "write")
