"""A batch of SQLite rows converted column by column (values.batch_reader).

sqlite3 hands back a list of tuples; the row reader (values.py) calls one
Python function per value and builds each row again, which was three fifths
of a SQLite → PostgreSQL run. Here a batch is turned into columns once
(zip, in C), each column is checked with one set(map(type, ...)), and a
column whose values are all of the class SQLite stores for its type is
converted in C (map over a constructor) or kept as it is (an integer, a
text): no Python call per value. Then the columns are zipped back into rows.

The values are the ones the row reader gives, value for value. A column
the vectors below do not take goes through its per-value converter, as a
column; and any failure makes the whole batch go through the row reader
again, which converts it or raises exactly the error it always raised (the
column, the value, the row's number in the table's order).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import UTC, date, datetime, tzinfo
from decimal import Decimal
from operator import attrgetter, methodcaller
from typing import Any, Protocol

from setu_engine.values.types import Column, Row

Convert = Callable[[Any], Any]
# (the column's values, their classes but NoneType, whether any is None) ->
# the converted values, NULLs in place; None when the column is not theirs.
Vector = Callable[[Sequence[Any], set[type], bool], "Sequence[Any] | None"]

# What a per-value converter raises on a bad value (values._Converter).
_FAILURES = (ValueError, TypeError, ArithmeticError, AttributeError)
_NONE = type(None)
_TZINFO = attrgetter("tzinfo")
_AS_UTC = methodcaller("replace", tzinfo=UTC)


class RowConverter(Protocol):
    """values._Converter: the row reader the batch falls back to."""

    columns: Sequence[Column]
    convs: list[Convert | None]
    done: int

    def __call__(self, row: Sequence[Any]) -> Row: ...


class BatchReader:
    def __init__(self, rows: RowConverter, zone: tzinfo = UTC) -> None:
        self._rows = rows
        vectors = _VECTORS if zone is UTC else {**_VECTORS, "timestamptz": _naive_or_utc}
        self._columns = [
            (vectors.get(column.type), conv)
            for column, conv in zip(rows.columns, rows.convs, strict=True)
        ]

    def __call__(self, batch: Sequence[Sequence[Any]], skip: int = 0) -> list[Row]:
        """The batch's rows converted, each without its first `skip` values
        (a rowid read beside them)."""
        if not batch:
            return []
        width = len(self._columns)
        try:
            if not width or set(map(len, batch)) != {width + skip}:
                raise ValueError("rows of another width")  # the row reader names it
            columns = list(zip(*batch, strict=True))[skip:]
            converted = [
                _column(values, vector, conv)
                for values, (vector, conv) in zip(columns, self._columns, strict=True)
            ]
        except _FAILURES:
            return [self._rows(row[skip:]) for row in batch]
        self._rows.done += len(batch)
        return list(zip(*converted, strict=True))


def _column(values: Sequence[Any], vector: Vector | None, conv: Convert | None) -> Sequence[Any]:
    if conv is None:
        return values
    kinds = set(map(type, values))
    nulls = _NONE in kinds
    kinds.discard(_NONE)
    if not kinds:
        return values  # every value NULL
    if vector is not None:
        try:
            done = vector(values, kinds, nulls)
        except _FAILURES:
            done = None  # a value the vector does not take: each one through conv
        if done is not None:
            return done
    # One Python call per value still, but none per row; a failure here
    # sends the batch to the row reader, which names the value.
    return [None if v is None else conv(v) for v in values]


def _present(values: Sequence[Any], nulls: bool) -> Sequence[Any]:
    return [v for v in values if v is not None] if nulls else values


def _with_nulls(values: Sequence[Any], converted: list[Any], nulls: bool) -> Sequence[Any]:
    if not nulls:
        return converted
    each = iter(converted)
    return [None if v is None else next(each) for v in values]


def _mapped(fn: Convert) -> Callable[[Sequence[Any], bool], Sequence[Any]]:
    def apply(values: Sequence[Any], nulls: bool) -> Sequence[Any]:
        return _with_nulls(values, list(map(fn, _present(values, nulls))), nulls)

    return apply


def _integer(bits: int) -> Vector:
    low, high = -(2 ** (bits - 1)), 2 ** (bits - 1) - 1

    def vector(values: Sequence[Any], kinds: set[type], nulls: bool) -> Sequence[Any] | None:
        if kinds != {int}:
            return None
        present = _present(values, nulls)
        # int(v) of an int is v: only the range is left to check.
        return values if low <= min(present) and max(present) <= high else None

    return vector


def _double(values: Sequence[Any], kinds: set[type], nulls: bool) -> Sequence[Any] | None:
    if kinds == {float}:
        return values
    return _mapped(float)(values, nulls) if kinds <= {float, int} else None


def _numeric(values: Sequence[Any], kinds: set[type], nulls: bool) -> Sequence[Any] | None:
    # Decimal() strips the same whitespace str.strip() does (Unicode's).
    return _mapped(Decimal)(values, nulls) if kinds <= {str, int} else None


def _same(cls: type) -> Vector:
    def vector(values: Sequence[Any], kinds: set[type], nulls: bool) -> Sequence[Any] | None:
        return values if kinds == {cls} else None

    return vector


def _boolean(values: Sequence[Any], kinds: set[type], nulls: bool) -> Sequence[Any] | None:
    if kinds != {int} or not set(_present(values, nulls)) <= {0, 1}:
        return None
    return _mapped(bool)(values, nulls)


def _date(values: Sequence[Any], kinds: set[type], nulls: bool) -> Sequence[Any] | None:
    # 'infinity' raises here: those columns take the per-value path.
    return _mapped(date.fromisoformat)(values, nulls) if kinds == {str} else None


def _parsed(values: Sequence[Any], kinds: set[type], nulls: bool) -> list[datetime] | None:
    if kinds != {str}:
        return None
    return list(map(datetime.fromisoformat, _present(values, nulls)))


def _timestamp(values: Sequence[Any], kinds: set[type], nulls: bool) -> Sequence[Any] | None:
    parsed = _parsed(values, kinds, nulls)
    if parsed is None or set(map(_TZINFO, parsed)) != {None}:
        return None  # an offset: its instant in UTC, value by value
    return _with_nulls(values, parsed, nulls)


def _timestamptz(values: Sequence[Any], kinds: set[type], nulls: bool) -> Sequence[Any] | None:
    """Instants stored in UTC with their offset (as Setu writes them), or
    naive (in UTC, the connection naming no zone)."""
    parsed = _parsed(values, kinds, nulls)
    if parsed is None:
        return None
    zones = set(map(_TZINFO, parsed))
    if zones == {None}:
        return _with_nulls(values, list(map(_AS_UTC, parsed)), nulls)
    # astimezone(UTC) of a value already in UTC is that value.
    if len(zones) == 1 and zones.pop() is UTC:
        return _with_nulls(values, parsed, nulls)
    return None


def _naive_or_utc(values: Sequence[Any], kinds: set[type], nulls: bool) -> Sequence[Any] | None:
    """timestamptz under config.timezone: naive values are in that zone,
    which the per-value path applies; only values in UTC already are taken."""
    parsed = _parsed(values, kinds, nulls)
    if parsed is None:
        return None
    zones = set(map(_TZINFO, parsed))
    if len(zones) == 1 and zones.pop() is UTC:
        return _with_nulls(values, parsed, nulls)
    return None


_VECTORS: dict[str, Vector] = {
    "boolean": _boolean,
    "smallint": _integer(16),
    "integer": _integer(32),
    "bigint": _integer(64),
    "real": _double,
    "double": _double,
    "numeric": _numeric,
    "text": _same(str),
    "bytes": _same(bytes),
    "date": _date,
    "timestamp": _timestamp,
    "timestamptz": _timestamptz,
}
