"""The sqlite read's batch conversion (setu_engine/providers/sqlite/columnar.py)
gives what the row reader gives, value for value, and the same error for a
bad value, whatever the column holds: sqlite3's raw values of every class,
mixed or all of one class, with NULLs."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta, timezone, tzinfo
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from setu_engine.errors import ValueFault
from setu_engine.providers.sqlite.values import batch_reader, row_reader
from setu_engine.values.types import Column

TYPES = (
    "boolean",
    "smallint",
    "integer",
    "bigint",
    "real",
    "double",
    "numeric",
    "text",
    "bytes",
    "date",
    "time",
    "timestamp",
    "timestamptz",
    "uuid",
    "json",
)

_instants = st.datetimes(
    min_value=datetime(1, 1, 2), max_value=datetime(9999, 12, 30), timezones=st.none()
)
_offsets = st.sampled_from(
    [UTC, timezone(timedelta(hours=2)), timezone(timedelta(hours=-5, minutes=-30))]
)


def _iso(at: datetime, zone: tzinfo | None, sep: str) -> str:
    return (at if zone is None else at.replace(tzinfo=zone)).isoformat(sep=sep)


# Each a class of raw value sqlite3 hands back, as SQLite stores one type or
# a file of someone else's makes it: a column is drawn all of one class
# (the vectors' ground) or mixed (their fallbacks').
RAW: dict[str, st.SearchStrategy[Any]] = {
    "small ints": st.integers(-40_000, 40_000),
    "ints": st.integers(-(2**63), 2**63 - 1),
    "bits": st.sampled_from([0, 1]),
    "floats": st.floats(allow_nan=True, allow_infinity=True),
    "integral floats": st.integers(-(2**40), 2**40).map(float),
    "texts": st.text(max_size=8),
    "words": st.sampled_from(["t", "false", "NaN", "infinity", "-infinity", "yes", "", " 1 "]),
    "decimals": st.decimals(allow_nan=False, allow_infinity=False, places=3).map(str),
    "spaced decimals": st.decimals(allow_nan=False, allow_infinity=False, places=2).map(
        lambda d: f" {d}\t"
    ),
    "blobs": st.binary(max_size=16),
    "dates": st.dates().map(str),
    "naive": st.builds(_iso, _instants, st.none(), st.sampled_from([" ", "T"])),
    "utc": st.builds(_iso, _instants, st.just(UTC), st.just(" ")),
    "zulu": _instants.map(lambda at: at.isoformat() + "Z"),
    "offsets": st.builds(_iso, _instants, _offsets, st.just(" ")),
    "times": st.times().map(str),
    "uuids": st.uuids().map(str),
    "json": st.sampled_from(['{"a": 1}', "[1, 2.50]", "null", "3", "{bad"]),
}


def _column_of(draw: st.DrawFn, rows: int) -> list[Any]:
    classes = draw(st.lists(st.sampled_from(sorted(RAW)), min_size=1, max_size=2, unique=True))
    nulls = draw(st.booleans())
    value = st.one_of(*(RAW[c] for c in classes))
    return draw(st.lists(st.none() | value if nulls else value, min_size=rows, max_size=rows))


@st.composite
def tables(draw: st.DrawFn) -> tuple[list[Column], list[tuple[Any, ...]]]:
    types = draw(st.lists(st.sampled_from(TYPES), min_size=1, max_size=4))
    rows = draw(st.integers(1, 12))
    values = [_column_of(draw, rows) for _ in types]
    columns = [Column(f"c{i}", t) for i, t in enumerate(types)]
    return columns, list(zip(*values, strict=True))


def _outcome(convert: Callable[[], list[tuple[Any, ...]]]) -> tuple[Any, ...]:
    """The rows as repr (the class, the exact digits, a datetime's zone), or
    the error: its class, message and where it says the value is."""
    try:
        return ("rows", [[repr(v) for v in row] for row in convert()])
    except ValueFault as fault:
        return ("fault", fault.column, repr(fault.value), fault.row, str(fault))
    except Exception as exc:  # the row reader's own ProviderError
        return ("error", type(exc).__name__, str(exc))


def _by_rows(columns: list[Column], rows: list[Any], zone: tzinfo) -> list[tuple[Any, ...]]:
    read = row_reader("t", columns, zone)
    return [read(row) for row in rows]


def _by_batches(
    columns: list[Column], rows: list[Any], zone: tzinfo, size: int
) -> list[tuple[Any, ...]]:
    read = batch_reader("t", columns, zone)
    return [row for at in range(0, len(rows), size) for row in read(rows[at : at + size])]


ZONES = [UTC, ZoneInfo("America/New_York")]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(table=tables(), zone=st.sampled_from(ZONES), size=st.integers(1, 5))
def test_a_batch_reads_as_the_row_reader_reads_each_row(
    table: tuple[list[Column], list[Any]], zone: tzinfo, size: int
) -> None:
    columns, rows = table
    expected = _outcome(lambda: _by_rows(columns, rows, zone))
    assert _outcome(lambda: _by_batches(columns, rows, zone, size)) == expected


# The vectors' own ground, each column all of one class: what a file Setu
# wrote holds, so what a fast read meets (and where a vector that took too
# much would show). Each row: type, the column's values, what they read as.
HOMOGENEOUS: list[tuple[str, Sequence[Any]]] = [
    ("integer", [1, 2**31, None]),  # out of range: the row reader's error
    ("smallint", [-(2**15), 2**15 - 1, None]),
    ("numeric", ["0.10", " 7 ", "1E+3", None, "-0.000"]),
    ("numeric", [0.1, 2.5]),  # a REAL in a numeric column: its shortest digits
    ("double", [1, 2.5, None]),
    ("boolean", [0, 1, None]),
    ("boolean", [0, 2]),
    ("text", [b"\xc3\xa9", "x"]),
    ("timestamptz", ["2024-01-02 03:04:05+00:00", "2024-01-02 03:04:05+02:00"]),
    ("timestamptz", ["2024-01-02 03:04:05+02:00", "2024-07-02 03:04:05.5+02:00"]),
    ("timestamptz", ["2024-01-02T03:04:05Z", None, "2024-01-02 03:04:05.000001+00:00"]),
    ("timestamptz", ["2024-01-02 03:04:05", "2024-06-02 03:04:05", None]),
    ("timestamptz", ["2024-01-02 03:04:05+00:00", "infinity"]),
    ("timestamp", ["2024-01-02 03:04:05+01:00", "2024-01-02 03:04:05"]),
    ("date", ["2024-02-29", "-infinity", None]),
    ("date", ["2024-02-30"]),
]


@pytest.mark.parametrize("zone", ZONES, ids=["utc", "new-york"])
@pytest.mark.parametrize(("kind", "values"), HOMOGENEOUS)
def test_a_column_of_one_class_reads_as_row_by_row(
    kind: str, values: Sequence[Any], zone: tzinfo
) -> None:
    columns = [Column("id", "bigint"), Column("v", kind)]
    rows = [(i, v) for i, v in enumerate(values)]
    expected = _outcome(lambda: _by_rows(columns, rows, zone))
    assert _outcome(lambda: _by_batches(columns, rows, zone, len(rows))) == expected


def test_a_timestamptz_read_in_utc_is_in_the_utc_zone_itself() -> None:
    read = batch_reader("t", [Column("at", "timestamptz")])
    rows = read([("2024-01-02 03:04:05+00:00",), ("2024-01-02 03:04:05Z",)])
    assert {row[0].tzinfo for row in rows} == {UTC}
    assert all(row[0].tzinfo is UTC for row in rows)


def test_a_bad_value_in_a_later_batch_names_its_row_in_the_read() -> None:
    read = batch_reader("events", [Column("id", "bigint"), Column("n", "integer")])
    batches = [[(i, i) for i in range(at, at + 4)] for at in (1, 5)]
    for batch in batches:
        read(batch)
    with pytest.raises(ValueFault) as raised:
        read([(9, 9), (10, "ten"), (11, 11)])
    assert (raised.value.column, raised.value.row, raised.value.value) == ("n", 10, "ten")


def test_a_rowid_read_beside_the_columns_is_left_out() -> None:
    read = batch_reader("t", [Column("a", "text"), Column("n", "numeric")])
    rows = read([(7, "x", "1.50"), (8, None, None)], skip=1)
    assert [[repr(v) for v in row] for row in rows] == [
        ["'x'", "Decimal('1.50')"],
        ["None", "None"],
    ]
