"""Reading CSV with the `file` provider, on a local folder and on a real S3
server (moto): null markers, quoting, delimiters, headerless files with
given names, encodings, type inference over the whole file or a declared
sample, and the nycflights13-shaped files."""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator
from datetime import UTC, date, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from setu_engine.errors import ConfigError, PermanentError, ValueFault
from setu_engine.kinds import WriteMode
from setu_engine.providers.base import Connector
from setu_engine.providers.files import PROVIDER
from setu_engine.providers.files.codec import _Source
from setu_engine.providers.files.csv import CsvOptions, csv_records
from setu_engine.values.types import Batch, Column, Row, Stream
from tests import flights_csv
from tests.integration.test_files_provider import Place, read_all
from tests.s3server import S3Endpoint


@pytest.fixture(params=["local", "s3"])
async def place(request: pytest.FixtureRequest, tmp_path: Path) -> Place:
    if request.param == "local":
        return Place(url=str(tmp_path / "data"), root=tmp_path / "data")
    endpoint: S3Endpoint = request.getfixturevalue("s3_endpoint")
    bucket = await endpoint.make_bucket()
    extra = {
        "endpoint_url": endpoint.endpoint_url,
        "region": endpoint.region,
        "access_key_id": endpoint.access_key_id,
        "secret_access_key": {"$secret": "S3_SECRET"},
    }
    return Place(url=f"s3://{bucket}/data/", s3=endpoint, bucket=bucket, extra=extra)


async def load(place: Place, name: str, data: bytes, **options: Any) -> tuple[Stream, list[Row]]:
    """Puts one file, discovers it and reads every row."""
    await place.put(name, data)
    connector: Connector = await place.connect(place.file_url(name), format="csv", **options)
    try:
        (stream,) = await connector.discover()
        rows = [row for batch in await read_all(connector, stream) for row in batch]
    finally:
        await connector.close()
    return stream, rows


def types(stream: Stream) -> dict[str, str]:
    return {c.name: c.type for c in stream.columns}


# ---------------------------------------------------------------- markers


async def test_default_markers_are_null_in_typed_columns_and_kept_in_text(place: Place) -> None:
    data = b"n,when,word\n1,2024-01-02,NA\nNA,NULL,\nnull,N/A,NULL\n"
    stream, rows = await load(place, "t.csv", data)
    assert types(stream) == {"n": "smallint", "when": "date", "word": "text"}
    assert rows == [(1, date(2024, 1, 2), "NA"), (None, None, None), (None, None, "NULL")]


async def test_declared_null_values_hold_in_every_column(place: Place) -> None:
    data = b"n,word\n1,NA\n-,x\n,\n"
    csv = {"null_values": ["NA", "-"]}
    stream, rows = await load(place, "t.csv", data, csv=csv)
    assert types(stream) == {"n": "smallint", "word": "text"}
    # "" is no marker here: an empty field in a text column is the empty string.
    assert rows == [(1, None), (None, "x"), (None, "")]


# ---------------------------------------------------------------- dialect


async def test_another_quote_character_and_delimiter(place: Place) -> None:
    data = b"id|note\n1|'a|b'\n2|'it''s\nmultiline'\n"
    stream, rows = await load(place, "t.csv", data, csv={"delimiter": "|", "quote": "'"})
    assert rows == [(1, "a|b"), (2, "it's\nmultiline")]
    assert types(stream) == {"id": "smallint", "note": "text"}


async def test_crlf_lines_and_a_byte_order_mark(place: Place) -> None:
    data = b'\xef\xbb\xbfid,note\r\n1,"two\r\nlines"\r\n2,x\r\n'
    stream, rows = await load(place, "t.csv", data)
    assert [c.name for c in stream.columns] == ["id", "note"]
    assert rows == [(1, "two\r\nlines"), (2, "x")]


async def test_no_quoting_reads_quotes_as_text(place: Place) -> None:
    data = b'id\tnote\n1\t"half\n2\tsay "hi"\n'
    _, rows = await load(place, "t.tsv.csv", data, csv={"delimiter": "\t", "quote": ""})
    assert rows == [(1, '"half'), (2, 'say "hi"')]


async def test_a_headerless_file_takes_the_given_names(place: Place) -> None:
    csv = {"header": False, "column_names": {"t": ["id", "amount"]}}
    stream, rows = await load(place, "t.csv", b"1,2.5\n2,3\n", csv=csv)
    assert [c.name for c in stream.columns] == ["id", "amount"]
    assert rows == [(1, Decimal("2.5")), (2, Decimal("3"))]


async def test_a_record_wider_than_the_columns_is_refused(place: Place) -> None:
    csv = {"header": False, "column_names": ["id"]}
    with pytest.raises(PermanentError, match=r"2 fields but config\.csv\.column_names names 1"):
        await load(place, "t.csv", b"1,2\n", csv=csv)
    with pytest.raises(PermanentError, match="line 3 has 3 fields, more than the 2 columns"):
        await load(place, "u.csv", b"a,b\n1,2\n1,2,3\n")


async def test_another_encoding_is_decoded(place: Place) -> None:
    data = "city,temp\nMünchen,1\nSão Paulo,2\n".encode("latin-1")
    _, rows = await load(place, "t.csv", data, csv={"encoding": "latin-1"})
    assert rows == [("München", 1), ("São Paulo", 2)]


async def test_bytes_not_in_the_encoding_name_the_line_and_the_option(place: Place) -> None:
    data = "city\nParis\nMünchen\n".encode("latin-1")
    with pytest.raises(PermanentError, match=r"line 3: not utf-8 .*config\.csv\.encoding"):
        await load(place, "t.csv", data)


async def test_a_quoted_field_may_span_chunks() -> None:
    async def chunks() -> AsyncGenerator[list[bytes], None]:
        yield [b"id,note\n", b'1,"starts\n']
        yield [b"goes on\n"]
        yield [b'ends ""here"""\n', b"2,plain\n"]

    records = csv_records(chunks(), CsvOptions(), _Source("mem", "t"))
    got = [record async for chunk in records for record in chunk]
    assert got == [
        (1, ["id", "note"]),
        (2, ["1", 'starts\ngoes on\nends "here"']),
        (5, ["2", "plain"]),
    ]


async def test_a_quote_inside_an_unquoted_field_is_text_and_an_open_one_an_error() -> None:
    async def chunks(*parts: list[bytes]) -> AsyncGenerator[list[bytes], None]:
        for part in parts:
            yield part

    def records(*parts: list[bytes]) -> Any:
        return csv_records(chunks(*parts), CsvOptions(), _Source("mem", "t"))

    stray = records([b"name,height\n", b"Ann,5'11\"\n"], [b"Bob,6\n"])
    assert [r async for chunk in stray for r in chunk] == [
        (1, ["name", "height"]),
        (2, ["Ann", "5'11\""]),
        (3, ["Bob", "6"]),
    ]
    unclosed = records([b"name,note\n", b"Ann,ok\n", b'Bob,"open\n'], [b"Cy,x\n"])
    with pytest.raises(PermanentError, match="opened on line 3 or after is never closed"):
        _ = [r async for chunk in unclosed for r in chunk]


# ---------------------------------------------------------------- inference


async def test_inference_reads_the_whole_file_and_widens(place: Place) -> None:
    # The first 2,052 values of `x` are whole numbers; row 2,053 is not.
    lines = [b"x,big,flag,code,at,at_utc,mixed"]
    for i in range(1, 3001):
        x = b"0.5" if i == 2053 else b"%d" % i
        big = b"%d" % (i * 1_000_000)
        stamp = b"2013-01-01 %02d:00:00" % (i % 24)
        utc = b"2013-01-01T%02d:00:00Z" % (i % 24) if i % 2 else b"2013-01-01 05:00:00+02:00"
        mixed = b"abc" if i == 3000 else b"1"
        lines.append(b",".join([x, big, b"TRUE" if i % 2 else b"f", b"007", stamp, utc, mixed]))
    stream, rows = await load(place, "t.csv", b"\n".join(lines) + b"\n")
    assert types(stream) == {
        "x": "numeric",
        "big": "bigint",
        "flag": "boolean",
        "code": "text",
        "at": "timestamp",
        "at_utc": "timestamptz",
        "mixed": "text",
    }
    assert len(rows) == 3000
    assert rows[2052][0] == Decimal("0.5") and rows[0][0] == Decimal(1)
    assert rows[0][3] == "007"
    assert rows[0][5] == datetime(2013, 1, 1, 1, tzinfo=UTC)
    assert rows[1][5] == datetime(2013, 1, 1, 3, tzinfo=UTC)


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        ([b"1", b"-32768", b"32767"], "smallint"),
        ([b"1", b"32768"], "integer"),
        ([b"1", b"2147483648"], "bigint"),
        ([b"1", b"9223372036854775808"], "numeric"),
        ([b"1", b"NaN", b"2.5"], "numeric"),
        ([b"NaN", b"-Infinity"], "numeric"),
        ([b"infinity"], "text"),  # a date's or a number's
        ([b"2024-01-01", b"2024-01-02 03:04:05"], "timestamp"),
        ([b"2024-01-01", b"infinity"], "date"),
        ([b"2024-02-30"], "text"),
        ([b"12:30:00", b"23:59:59.5"], "time"),
        (
            [b"0b8e9d1c-2f4a-4c1e-9a7b-3d5e6f708192", b"0B8E9D1C-2F4A-4C1E-9A7B-3D5E6F708192"],
            "uuid",
        ),
        ([b"true", b"1"], "text"),
        ([b"NA", b"NA"], "text"),
    ],
)
async def test_a_column_infers_the_narrowest_type_that_holds_every_value(
    tmp_path: Path, values: list[bytes], expected: str
) -> None:
    place = Place(url=str(tmp_path / "data"), root=tmp_path / "data")
    stream, _ = await load(place, "t.csv", b"v\n" + b"\n".join(values) + b"\n")
    assert types(stream) == {"v": expected}


async def test_a_declared_sample_fails_on_a_later_value_naming_row_column_value(
    place: Place,
) -> None:
    lines = [b"id,amount"] + [b"%d,%d" % (i, i) for i in range(1, 2053)] + [b"2053,10.25"]
    await place.put("pay.csv", b"\n".join(lines) + b"\n")
    connector = await place.connect(format="csv", csv={"infer_rows": 1000})
    try:
        (stream,) = await connector.discover()
        assert types(stream) == {"id": "bigint", "amount": "bigint"}
        with pytest.raises(ValueFault) as caught:
            await read_all(connector, stream)
    finally:
        await connector.close()
    fault = caught.value
    assert fault.retryable is False
    assert (fault.stream, fault.column, fault.row, fault.value) == ("pay", "amount", 2053, "10.25")
    assert "line 2054: not a valid bigint" in str(fault)
    assert "config.csv.infer_rows" in str(fault)


async def test_a_bad_value_names_its_row_counted_across_chunks(tmp_path: Path) -> None:
    # Over a MiB of rows: the file is read in several chunks before the bad one.
    lines = [b"id,amount"] + [b"%d,%d" % (i, i) for i in range(1, 150_001)]
    lines[140_000] = b"140000,oops"
    place = Place(url=str(tmp_path / "data"), root=tmp_path / "data")
    await place.put("big.csv", b"\n".join(lines) + b"\n")
    connector = await place.connect(format="csv", csv={"infer_rows": 10})
    try:
        (stream,) = await connector.discover()
        with pytest.raises(ValueFault) as caught:
            await read_all(connector, stream)
    finally:
        await connector.close()
    assert (caught.value.row, caught.value.value) == (140_000, "oops")
    assert "big.csv: line 140001:" in str(caught.value)


async def test_declared_types_override_inference(place: Place) -> None:
    columns = {"t": {"zip": "text", "n": "double"}}
    stream, rows = await load(place, "t.csv", b"zip,n\n12345,1\n", columns=columns)
    assert list(stream.columns) == [Column("zip", "text"), Column("n", "double")]
    assert rows == [("12345", 1.0)]


# ---------------------------------------------------------------- nycflights13


async def test_the_nycflights13_files_load_with_the_types_a_person_would_choose(
    place: Place,
) -> None:
    files = flights_csv.generate()
    for table, data in files.items():
        await place.put(f"{table}.csv", data)
    connector = await place.connect(format="csv")
    try:
        streams = {s.name: s for s in await connector.discover()}
        assert {name: list(types(s).values()) for name, s in streams.items()} == (
            flights_csv.EXPECTED
        )
        weather = [r for b in await read_all(connector, streams["weather"]) for r in b]
        flights = [r for b in await read_all(connector, streams["flights"]) for r in b]
    finally:
        await connector.close()
    assert len(weather) == 3000 and len(flights) == 3000
    precip = flights_csv.COLUMNS["weather"].split().index("precip")
    assert weather[flights_csv.FIRST_DECIMAL_PRECIP - 1][precip] == Decimal("0.01")
    assert flights[0][-1] == datetime(2013, 2, 18, 18, tzinfo=UTC)
    assert any(row[3] is None for row in flights)  # dep_time NA → NULL


# ---------------------------------------------------------------- config


@pytest.mark.parametrize(
    ("csv", "message"),
    [
        ({"quote": "ab"}, "config.csv.quote must be one character"),
        ({"quote": ","}, "config.csv.quote must be one character other than the delimiter"),
        ({"null_values": "NA"}, "config.csv.null_values must be a list of strings"),
        ({"null_values": ["NA", 1]}, "config.csv.null_values must be a list of strings"),
        ({"encoding": "klingon"}, "config.csv.encoding: unknown encoding 'klingon'"),
        ({"encoding": "utf-16"}, "config.csv.encoding: utf-16 is not read line by line"),
        ({"infer_rows": 0}, "config.csv.infer_rows must be"),
        ({"infer_rows": "some"}, "config.csv.infer_rows must be"),
        ({"column_names": ["a"]}, "config.csv.column_names applies to files without a header"),
        ({"header": False, "column_names": []}, "config.csv.column_names must be a non-empty"),
        ({"header": False, "column_names": ["a", "a"]}, "must name every column once"),
        ({"header": False, "column_names": {"t": "a"}}, "config.csv.column_names.t must be"),
        ({"sample": 5}, "config.csv.sample is not a CSV option"),
    ],
)
def test_csv_option_errors_name_the_key(csv: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        PROVIDER.validate_config({"url": "/d/x.csv", "csv": csv})


def test_every_csv_option_together_is_valid() -> None:
    PROVIDER.validate_config(
        {
            "url": "/d/",
            "format": "csv",
            "csv": {
                "delimiter": ";",
                "quote": "'",
                "header": False,
                "column_names": {"t": ["a", "b"]},
                "null_values": ["", "NA"],
                "encoding": "cp1252",
                "infer_rows": 5000,
            },
        }
    )


async def test_a_field_longer_than_pythons_csv_limit_reads_whole(tmp_path: Path) -> None:
    """Python's csv module refuses fields over 128 KiB unless told; a long
    text (a document, a JSON value) written to CSV reads back whole."""
    long = "é" * 200_000 + ',"\n'
    connector = await PROVIDER.connect({"url": str(tmp_path), "format": "csv"})
    try:

        async def batches() -> AsyncIterator[Batch]:
            yield [(1, long)]

        await connector.write(
            "docs",
            [Column("id", "integer"), Column("body", "text")],
            batches(),
            WriteMode.OVERWRITE,
            [],
        )
        (stream,) = await connector.discover()
        rows = [row async for batch in connector.read(stream, 10) for row in batch]
    finally:
        await connector.close()
    assert rows == [(1, long)]
