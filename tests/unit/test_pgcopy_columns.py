"""pgcopy.encode's column-by-column path gives the bytes and the errors of
one value at a time: each batch here is checked against a stream built
from the per-value encoders (what the row loop writes), and a batch with a
bad value must fail on the same row and column as the row loop would."""

from __future__ import annotations

import random
import uuid
from datetime import UTC, date, datetime, time, timedelta, timezone, tzinfo
from decimal import Decimal
from typing import Any

import pytest

from setu_engine.errors import ValueFault
from setu_engine.staged import pgcopy
from setu_engine.values.special import INFINITY, JSON_NULL, MINUS_INFINITY
from setu_engine.values.types import Column

# Values of each type the column paths take, and ones they hand back to the
# per-value encoder (±infinity, an int for a numeric, exponents, NaN).
VALUES: dict[str, list[Any]] = {
    "boolean": [True, False],
    "smallint": [-(2**15), 0, 2**15 - 1],
    "integer": [-(2**31), 7, 2**31 - 1],
    "bigint": [-(2**63), 0, 2**63 - 1],
    "real": [1.5, -0.0, float("inf"), float("nan"), 3],
    "double": [-2.25e-300, 1e308, float("-inf"), 12],
    "numeric": [
        Decimal("0.00"),
        Decimal("-0.00"),
        Decimal("1234.56"),
        Decimal("-0.0001"),
        Decimal("10000"),
        Decimal("12345678901234567890.123456789"),
        Decimal("1E+5"),
        Decimal("1E-20"),
        Decimal("NaN"),
        Decimal("-Infinity"),
        42,
    ],
    "text": ["", "héllo ✓ 🚀", "x" * 500],
    "bytes": [b"", b"\x00\xff"],
    "date": [date(1, 1, 1), date(2000, 1, 1), date(9999, 12, 31), INFINITY, MINUS_INFINITY],
    "time": [time(0), time(23, 59, 59, 999999)],
    "timestamp": [datetime(1, 1, 1), datetime(2024, 2, 29, 12, 30, 0, 1), MINUS_INFINITY],
    "timestamptz": [
        datetime(2024, 2, 29, 12, 30, tzinfo=UTC),
        datetime(1999, 12, 31, 23, 0, tzinfo=timezone(timedelta(hours=-5, minutes=-30))),
        INFINITY,
    ],
    "uuid": [uuid.UUID(int=0), uuid.UUID("12345678-1234-5678-1234-567812345678")],
    "json": [{"a": [1, 2.5, None]}, JSON_NULL, "s"],
}


class NoOffset(tzinfo):
    """A zone that gives no offset: Python treats its datetimes as naive."""

    def utcoffset(self, dt: datetime | None) -> None:
        return None

    def dst(self, dt: datetime | None) -> None:
        return None

    def tzname(self, dt: datetime | None) -> None:
        return None


# A value of the right column that the encoder refuses, and the class-only
# mistakes (a bool for an integer) the column paths must not let through.
BAD: dict[str, list[Any]] = {
    "boolean": [1],
    "smallint": [2**15, True, 1.0],
    "integer": [2**31, "1", True],
    "bigint": [2**63, Decimal(1), False],
    "real": [Decimal("1.5"), True, 1e300],
    "double": ["1", True, 10**400],
    "numeric": [1.5, True, Decimal("1E-20000")],
    "text": ["a\x00b", b"x", "\ud800"],
    "bytes": ["x"],
    "date": [datetime(2024, 1, 1)],
    "time": [time(1, tzinfo=UTC)],
    "timestamp": [
        datetime(2024, 1, 1, tzinfo=UTC),
        datetime(2024, 1, 1, tzinfo=NoOffset()),
        date(2024, 1, 1),
    ],
    "timestamptz": [datetime(2024, 1, 1), date(2024, 1, 1)],
    "uuid": ["x"],
    "json": [{"a": float("nan")}],
}


def _numeric(value: Any) -> bytes:
    # The general encoder (Decimal.as_tuple), not the str() path under test.
    payload = pgcopy._numeric_payload(Decimal(value) if value.__class__ is int else value)
    return len(payload).to_bytes(4, "big") + payload


ENCODERS = {**pgcopy._ENCODERS, "numeric": _numeric}


def one_at_a_time(columns: list[Column], rows: list[tuple[Any, ...]]) -> bytes:
    """The stream as the row loop writes it: each value through its encoder."""
    out = bytearray(pgcopy.HEADER)
    for row in rows:
        out += len(columns).to_bytes(2, "big")
        for column, value in zip(columns, row, strict=True):
            out += b"\xff\xff\xff\xff" if value is None else ENCODERS[column.type](value)
    return bytes(out + pgcopy.TRAILER)


def batch(rng: random.Random, types: list[str], rows: int) -> list[tuple[Any, ...]]:
    return [
        tuple(None if rng.random() < 0.2 else rng.choice(VALUES[t]) for t in types)
        for _ in range(rows)
    ]


@pytest.mark.parametrize("column_type", sorted(VALUES))
def test_a_column_of_each_type_encodes_as_value_by_value(column_type: str) -> None:
    columns = [Column("k", "bigint"), Column("v", column_type)]
    rng = random.Random(column_type)
    plain = [(i, rng.choice(VALUES[column_type])) for i in range(200)]
    nulls = [(i, None if i % 3 else v) for i, (_, v) in enumerate(plain)]
    for rows in (plain, nulls, [(1, None)] * 5):
        assert pgcopy.encode(columns, rows) == one_at_a_time(columns, rows)


def test_mixed_batches_encode_as_value_by_value() -> None:
    rng = random.Random(26)
    names = sorted(VALUES)
    for _ in range(300):
        types = [rng.choice(names) for _ in range(rng.randint(1, 5))]
        columns = [Column(f"c{i}", t) for i, t in enumerate(types)]
        rows = batch(rng, types, rng.randint(1, 40))
        assert pgcopy.encode(columns, rows) == one_at_a_time(columns, rows)
        assert pgcopy.encode(columns, iter(rows)) == one_at_a_time(columns, rows)


@pytest.mark.parametrize(("column_type", "bad"), [(t, v) for t, vs in BAD.items() for v in vs])
def test_a_bad_value_is_named_by_its_row_and_column(column_type: str, bad: Any) -> None:
    columns = [Column("k", "bigint"), Column("v", column_type)]
    good = VALUES[column_type][0]
    rows: list[tuple[Any, ...]] = [(i, good if i % 2 else None) for i in range(6)]
    rows[2] = (2, bad)
    with pytest.raises(ValueFault) as caught:
        pgcopy.encode(columns, rows)
    assert (caught.value.column, caught.value.row, caught.value.value) == ("v", 3, bad)


def test_the_first_bad_row_is_named_whatever_the_column() -> None:
    # Row 3's second value is bad, and row 5's first: row 3 is named.
    columns = [Column("k", "bigint"), Column("v", "text")]
    rows: list[tuple[Any, ...]] = [(i, "ok") for i in range(6)]
    rows[2] = (2, "a\x00b")
    rows[4] = ("five", "ok")
    with pytest.raises(ValueFault) as caught:
        pgcopy.encode(columns, rows)
    assert (caught.value.column, caught.value.row) == ("v", 3)


def test_a_row_of_the_wrong_width_is_refused() -> None:
    columns = [Column("a", "integer"), Column("b", "text")]
    with pytest.raises(ValueError, match="row has 3 values for 2 columns"):
        pgcopy.encode(columns, [(1, "x"), (2, "y", 3)])
    with pytest.raises(ValueError, match="row has 1 values for 2 columns"):
        pgcopy.encode(columns, [(1, "x"), (2,)])
