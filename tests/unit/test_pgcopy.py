"""The binary COPY codec: round trips of every neutral type, the exact bytes of
a few values PostgreSQL's own docs fix, and the errors a caller must see."""

from __future__ import annotations

import struct
import uuid
from datetime import UTC, date, datetime, time, timedelta, timezone
from decimal import Decimal
from typing import Any

import pytest

from setu_engine.errors import ValueFault
from setu_engine.staged import pgcopy
from setu_engine.values.special import INFINITY, JSON_NULL, MINUS_INFINITY
from setu_engine.values.types import TYPES, Column

ALL_TYPES = [Column(f"c_{t}", t) for t in TYPES]

SAMPLE: dict[str, Any] = {
    "boolean": True,
    "smallint": -32768,
    "integer": 2147483647,
    "bigint": -(2**63),
    "real": 1.5,
    "double": -2.25e-300,
    "numeric": Decimal("-123.4500"),
    "text": "héllo wörld ✓ 🚀",
    "bytes": b"\x00\xff\x10",
    "date": date(1999, 12, 31),
    "time": time(23, 59, 59, 999999),
    "timestamp": datetime(1970, 1, 1, 0, 0, 0, 1),
    "timestamptz": datetime(2024, 2, 29, 12, 30, tzinfo=UTC),
    "uuid": uuid.UUID("12345678-1234-5678-1234-567812345678"),
    "json": {"a": [1, 2.5, None, True], "é": "x"},
}


def one_row_stream(column_type: str, payload: bytes | None) -> bytes:
    field = struct.pack("!i", -1) if payload is None else struct.pack("!i", len(payload)) + payload
    return pgcopy.HEADER + struct.pack("!h", 1) + field + pgcopy.TRAILER


def roundtrip(column_type: str, values: list[Any]) -> list[Any]:
    columns = [Column("v", column_type)]
    data = pgcopy.encode(columns, [(v,) for v in values])
    return [row[0] for row in pgcopy.decode(columns, data)]


def test_header_is_signature_flags_and_extension() -> None:
    assert pgcopy.SIGNATURE == b"PGCOPY\n\xff\r\n\x00"
    assert pgcopy.HEADER == pgcopy.SIGNATURE + b"\x00" * 8
    assert pgcopy.TRAILER == b"\xff\xff"
    assert pgcopy.encode(ALL_TYPES, []) == pgcopy.HEADER + pgcopy.TRAILER


def test_a_row_of_every_type_and_a_row_of_nulls_round_trip() -> None:
    rows = [tuple(SAMPLE[c.type] for c in ALL_TYPES), tuple(None for _ in ALL_TYPES)]
    assert pgcopy.decode(ALL_TYPES, pgcopy.encode(ALL_TYPES, rows)) == rows


@pytest.mark.parametrize(
    ("column_type", "values"),
    [
        ("boolean", [True, False]),
        ("smallint", [0, -32768, 32767]),
        ("integer", [0, -(2**31), 2**31 - 1]),
        ("bigint", [0, -(2**63), 2**63 - 1]),
        ("real", [0.0, -1.5, 3.4028234663852886e38, float("inf")]),
        ("double", [0.0, 1e-308, -1.7976931348623157e308, float("-inf")]),
        ("text", ["", "a", "日本語", "tab\tnew\nline", "🚀" * 1000]),
        ("bytes", [b"", b"\x00", bytes(range(256))]),
        ("date", [date(2000, 1, 1), date(1, 1, 1), date(9999, 12, 31), date(1969, 7, 20)]),
        ("time", [time(0, 0), time(12, 34, 56, 789012), time(23, 59, 59, 999999)]),
        (
            "timestamp",
            [
                datetime(2000, 1, 1),
                datetime(1, 1, 1),
                datetime(1899, 12, 31, 23, 59, 59, 999999),
                datetime(9999, 12, 31, 23, 59, 59, 999999),
            ],
        ),
        ("uuid", [uuid.UUID(int=0), uuid.uuid4(), uuid.UUID(int=2**128 - 1)]),
        ("json", [{}, [], "text", 0, 1.5, True, {"nested": {"list": [1, "two", None]}}]),
    ],
)
def test_values_round_trip(column_type: str, values: list[Any]) -> None:
    assert roundtrip(column_type, values) == values


@pytest.mark.parametrize(
    "text",
    [
        "0",
        "0.000",
        "-1",
        "1e-20",
        "0.00000000000000000001",
        "123456789012345678901234567890.123",
        "-123456789012345678901234567890.123",
        "10000",
        "9999.9999",
        "0.0001",
        "1.10",
        "1E+5",
        "12345678901234567890e-40",
        "NaN",
        "Infinity",
        "-Infinity",
    ],
)
def test_numeric_keeps_value_and_scale(text: str) -> None:
    value = Decimal(text)
    [back] = roundtrip("numeric", [value])
    if value.is_nan():
        assert back.is_nan()
        return
    assert back == value
    exponent = value.as_tuple().exponent
    if isinstance(exponent, int):
        # PostgreSQL keeps the scale; a positive exponent means scale 0.
        assert back.as_tuple().exponent == min(0, exponent)


def test_numeric_takes_an_int() -> None:
    assert roundtrip("numeric", [10**30]) == [Decimal(10**30)]


def test_numeric_wire_format_matches_postgresql() -> None:
    # 12345.678 = digits [1, 2345, 6780], weight 1, dscale 3 (numeric_send).
    data = pgcopy.encode([Column("n", "numeric")], [(Decimal("12345.678"),)])
    payload = struct.pack("!hhhh3h", 3, 1, 0x0000, 3, 1, 2345, 6780)
    assert data == one_row_stream("numeric", payload)
    negative = pgcopy.encode([Column("n", "numeric")], [(Decimal("-0.5"),)])
    assert negative == one_row_stream("numeric", struct.pack("!hhhhh", 1, -1, 0x4000, 1, 5000))


def test_dates_and_timestamps_count_from_2000() -> None:
    data = pgcopy.encode(
        [Column("d", "date"), Column("t", "timestamp")],
        [(date(2000, 1, 2), datetime(1999, 12, 31, 23, 59, 59))],
    )
    body = data[len(pgcopy.HEADER) : -len(pgcopy.TRAILER)]
    assert body == struct.pack("!hiiiq", 2, 4, 1, 8, -1_000_000)


def test_timestamptz_in_any_zone_decodes_to_the_same_instant_in_utc() -> None:
    tokyo = timezone(timedelta(hours=9))
    newfoundland = timezone(-timedelta(hours=3, minutes=30))
    values = [
        datetime(2024, 1, 1, 9, 0, tzinfo=tokyo),
        datetime(1960, 6, 1, 20, 30, 0, 5, tzinfo=newfoundland),
        datetime(3000, 1, 1, tzinfo=UTC),
    ]
    back = roundtrip("timestamptz", values)
    assert back == values  # aware datetimes compare as instants
    assert all(v.tzinfo is UTC for v in back)
    assert back[0] == datetime(2024, 1, 1, 0, 0, tzinfo=UTC)
    assert back[0].hour == 0


def test_empty_string_and_empty_bytes_are_not_null() -> None:
    columns = [Column("t", "text"), Column("b", "bytes")]
    rows = [("", b""), (None, None)]
    data = pgcopy.encode(columns, rows)
    assert pgcopy.decode(columns, data) == rows


def test_json_is_written_as_compact_jsonb() -> None:
    data = pgcopy.encode([Column("j", "json")], [({"a": [1, 2], "b": "é"},)])
    expected = b"\x01" + '{"a":[1,2],"b":"é"}'.encode()
    assert data == one_row_stream("json", expected)


def test_json_decodes_plain_json_text_too() -> None:
    # A `json` (oid 114) column sends its text without a version byte.
    data = one_row_stream("json", b' {"a": 1} ')
    assert pgcopy.decode([Column("j", "json")], data) == [({"a": 1},)]


def test_iter_decode_honours_the_batch_size() -> None:
    columns = [Column("i", "integer"), Column("t", "text")]
    rows = [(i, str(i)) for i in range(10)]
    batches = list(pgcopy.iter_decode(columns, pgcopy.encode(columns, rows), 4))
    assert [len(b) for b in batches] == [4, 4, 2]
    assert [r for b in batches for r in b] == rows


def test_encode_rows_frames_into_a_stream_batch_by_batch() -> None:
    columns = [Column("i", "bigint")]
    data = (
        pgcopy.HEADER
        + pgcopy.encode_rows(columns, [(1,), (2,)])
        + pgcopy.encode_rows(columns, [(3,)])
        + pgcopy.TRAILER
    )
    assert pgcopy.decode(columns, data) == [(1,), (2,), (3,)]


def test_header_extension_is_skipped() -> None:
    data = pgcopy.SIGNATURE + struct.pack("!ii", 0, 3) + b"abc" + struct.pack("!hiq", 1, 8, 7)
    assert pgcopy.decode([Column("i", "bigint")], data + pgcopy.TRAILER) == [(7,)]


# --- errors ------------------------------------------------------------------------


def test_bad_signature_is_refused() -> None:
    with pytest.raises(ValueError, match="bad signature"):
        pgcopy.decode([Column("i", "bigint")], b"PGCOPY\nXX" + b"\x00" * 20)


def test_truncated_streams_are_refused() -> None:
    columns = [Column("t", "text"), Column("i", "bigint")]
    data = pgcopy.encode(columns, [("hello", 1), ("world", 2)])
    for cut in (len(pgcopy.HEADER) - 1, len(data) - 2, len(data) - 5, len(data) - 14):
        with pytest.raises(ValueError, match="truncated"):
            pgcopy.decode(columns, data[:cut])


def test_a_field_longer_than_the_stream_is_truncation() -> None:
    data = pgcopy.HEADER + struct.pack("!hi", 1, 100) + b"short" + pgcopy.TRAILER
    with pytest.raises(ValueError, match="truncated"):
        pgcopy.decode([Column("t", "text")], data)


def test_a_negative_field_length_is_refused() -> None:
    data = pgcopy.HEADER + struct.pack("!hi", 1, -6) + pgcopy.TRAILER
    with pytest.raises(ValueError, match="column 't', row 1: negative field length -6"):
        pgcopy.decode([Column("t", "text")], data)


def test_wrong_field_count_is_refused() -> None:
    data = pgcopy.encode([Column("a", "bigint"), Column("b", "bigint")], [(1, 2)])
    with pytest.raises(ValueError, match="row with 2 fields for 1 columns"):
        pgcopy.decode([Column("a", "bigint")], data)


def test_bytes_after_the_trailer_are_refused() -> None:
    data = pgcopy.encode([Column("a", "bigint")], [(1,)]) + b"\x00"
    with pytest.raises(ValueError, match="after its trailer"):
        pgcopy.decode([Column("a", "bigint")], data)


def test_a_field_of_the_wrong_width_names_its_column() -> None:
    data = pgcopy.encode([Column("n", "integer")], [(1,)])
    with pytest.raises(ValueError, match="column 'n', row 1: field of 4 bytes where 8"):
        pgcopy.decode([Column("n", "bigint")], data)


@pytest.mark.parametrize(
    ("column_type", "payload", "value"),
    [
        ("date", struct.pack("!i", 0x7FFFFFFF), INFINITY),
        ("date", struct.pack("!i", -0x80000000), MINUS_INFINITY),
        ("timestamp", struct.pack("!q", 2**63 - 1), INFINITY),
        ("timestamptz", struct.pack("!q", -(2**63)), MINUS_INFINITY),
    ],
)
def test_infinite_dates_stay_infinite(column_type: str, payload: bytes, value: Any) -> None:
    data = one_row_stream(column_type, payload)
    columns = [Column("created_at", column_type)]
    assert pgcopy.decode(columns, data) == [(value,)]
    assert pgcopy.encode(columns, [(value,)]) == data


def test_json_null_is_not_sql_null() -> None:
    columns = [Column("j", "json")]
    data = pgcopy.encode(columns, [(JSON_NULL,), (None,)])
    assert pgcopy.decode(columns, data) == [(JSON_NULL,), (None,)]


def test_a_bad_value_names_its_row_across_batches() -> None:
    columns = [Column("d", "date")]
    good = struct.pack("!i", 0)
    data = (
        pgcopy.HEADER
        + b"".join(
            struct.pack("!hi", 1, 4) + payload
            for payload in [good, good, good, struct.pack("!i", 3_000_000)]
        )
        + pgcopy.TRAILER
    )
    with pytest.raises(ValueFault, match="column 'd', row 4: date outside") as caught:
        list(pgcopy.iter_decode(columns, data, 2))
    assert caught.value.retryable is False


def test_dates_beyond_python_are_refused() -> None:
    data = one_row_stream("date", struct.pack("!i", 3_000_000))
    with pytest.raises(ValueError, match="column 'd', row 1: date outside Python's years"):
        pgcopy.decode([Column("d", "date")], data)


def test_time_24_00_is_refused() -> None:
    data = one_row_stream("time", struct.pack("!q", 86_400_000_000))
    with pytest.raises(ValueError, match="column 't', row 1: PostgreSQL time 24:00:00"):
        pgcopy.decode([Column("t", "time")], data)


@pytest.mark.parametrize(
    ("column_type", "value", "type_name"),
    [
        ("boolean", 1, "int"),
        ("smallint", "1", "str"),
        ("integer", 1.0, "float"),
        ("bigint", True, "bool"),
        ("bigint", Decimal(1), "Decimal"),
        ("double", Decimal("1.5"), "Decimal"),
        ("double", "1.5", "str"),
        ("numeric", 1.5, "float"),
        ("text", b"x", "bytes"),
        ("text", 5, "int"),
        ("bytes", "x", "str"),
        ("bytes", 5, "int"),
        ("date", datetime(2024, 1, 1), "datetime"),
        ("date", "2024-01-01", "str"),
        ("time", datetime(2024, 1, 1), "datetime"),
        ("timestamp", date(2024, 1, 1), "date"),
        ("timestamptz", "2024-01-01T00:00:00Z", "str"),
        ("uuid", "12345678-1234-5678-1234-567812345678", "str"),
        ("json", {1, 2}, "set"),
    ],
)
def test_wrong_python_types_name_column_and_type(
    column_type: str, value: Any, type_name: str
) -> None:
    columns = [Column("ok", "bigint"), Column("bad", column_type)]
    with pytest.raises(
        ValueError, match=f"column 'bad', row 2: a {type_name} value is not a {column_type}"
    ):
        pgcopy.encode(columns, [(1, None), (2, value)])


@pytest.mark.parametrize(
    ("column_type", "value", "message"),
    [
        ("timestamptz", datetime(2024, 1, 1), "naive datetime"),
        ("timestamp", datetime(2024, 1, 1, tzinfo=UTC), "aware datetime"),
        ("time", time(1, tzinfo=UTC), "time with a zone"),
        ("smallint", 32768, "out of range for smallint"),
        ("integer", -(2**31) - 1, "out of range for integer"),
        ("bigint", 2**63, "out of range for bigint"),
        ("real", 1e300, "out of range for real"),
        ("json", float("nan"), "not JSON compliant"),
        ("numeric", Decimal("1e-20000"), "scale 20000 exceeds"),
    ],
)
def test_unrepresentable_values_are_refused(column_type: str, value: Any, message: str) -> None:
    with pytest.raises(ValueError, match=f"column 'v', row 1: .*{message}"):
        pgcopy.encode([Column("v", column_type)], [(value,)])


def test_a_row_of_the_wrong_length_is_refused() -> None:
    with pytest.raises(ValueError, match="row has 1 values for 2 columns"):
        pgcopy.encode([Column("a", "bigint"), Column("b", "bigint")], [(1,)])


def test_an_unknown_column_type_is_refused() -> None:
    with pytest.raises(ValueError, match="no binary COPY codec for column"):
        pgcopy.encode([Column("a", "money")], [])
