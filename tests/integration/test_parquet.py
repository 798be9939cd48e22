"""Parquet with the `file` provider, on a local folder and on a real S3
server (moto): every neutral type written with its declared Arrow type and
read back by pyarrow and by Setu, files written by other tools read with
their types, row groups as batches, the write modes, and values Parquet
cannot hold refused with their row."""

from __future__ import annotations

import io
import os
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, date, datetime, time, timedelta, timezone
from decimal import Decimal
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from setu_engine.errors import ConfigError, PermanentError, ProviderError, ValueFault
from setu_engine.kinds import WriteMode
from setu_engine.providers.files import PROVIDER
from setu_engine.providers.files.parquet import ParquetOptions, ParquetWriter
from setu_engine.values.special import JSON_NULL
from setu_engine.values.types import Batch, Column, Row
from tests.integration.test_files_provider import Place, read_all
from tests.s3server import S3Endpoint

COLUMNS = [
    Column("id", "bigint", nullable=False),
    Column("flag", "boolean"),
    Column("small", "smallint"),
    Column("medium", "integer"),
    Column("ratio", "real"),
    Column("score", "double"),
    Column("price", "numeric", sql_type="numeric(5,2)"),
    Column("huge", "numeric", sql_type="numeric(50,10)"),
    Column("bare", "numeric"),
    Column("name", "text", sql_type="character varying(20)"),
    Column("code", "text", sql_type="character(3)"),
    Column("blob", "bytes"),
    Column("day", "date"),
    Column("clock", "time"),
    Column("local", "timestamp"),
    Column("moment", "timestamptz"),
    Column("ident", "uuid"),
    Column("doc", "json"),
    Column("tags", "text", sql_type="text[]"),
    Column("counts", "text", sql_type="integer[]"),
]

ARROW_TYPES = {
    "id": pa.int64(),
    "flag": pa.bool_(),
    "small": pa.int16(),
    "medium": pa.int32(),
    "ratio": pa.float32(),
    "score": pa.float64(),
    "price": pa.decimal128(5, 2),
    "huge": pa.decimal256(50, 10),
    "bare": pa.decimal128(38, 9),
    "name": pa.string(),
    "code": pa.string(),
    "blob": pa.binary(),
    "day": pa.date32(),
    "clock": pa.time64("us"),
    "local": pa.timestamp("us"),
    "moment": pa.timestamp("us", tz="UTC"),
    "ident": pa.uuid(),
    "doc": pa.json_(),
    "tags": pa.list_(pa.string()),
    "counts": pa.list_(pa.int32()),
}

ROWS: list[Row] = [
    (
        1,
        True,
        -32768,
        2_147_483_647,
        0.01,
        -0.0,
        Decimal("-999.99"),
        Decimal("1234567890123456789012345678901234567890.0123456789"),
        Decimal("12.5"),
        "héllo, wörld 👋",
        "EWR",
        b"\x00\x01\xff",
        date(2013, 1, 1),
        time(5, 6, 7, 89),
        datetime(2013, 1, 1, 5, 0, 0, 1),
        datetime(2013, 1, 1, 5, tzinfo=timezone(timedelta(hours=-5))),
        uuid.UUID(int=42),
        {"a": [1, None, "x"], "b": {"c": 1.5}},
        '{a,"b c",NULL,"",NULL}',
        "{1,NULL,-3}",
    ),
    (2, *[None] * (len(COLUMNS) - 1)),
    (
        *(3, False, 0, 0, 1.5, 2.5, Decimal("0.00"), Decimal(0), Decimal(-7), "", "   ", b""),
        *(date(1, 1, 1), time(0), datetime(1970, 1, 1), datetime(1970, 1, 1, tzinfo=UTC)),
        *(uuid.UUID(int=0), JSON_NULL, "{}", "{}"),
    ),
]


def expected_back(row: Row) -> Row:
    """A row as Setu reads it back: timestamptz in UTC."""
    values = list(row)
    moment = COLUMNS.index(Column("moment", "timestamptz"))
    if values[moment] is not None:
        values[moment] = values[moment].astimezone(UTC)
    return tuple(values)


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


async def batches_of(*batches: Batch) -> AsyncIterator[Batch]:
    for batch in batches:
        yield batch


async def write(
    place: Place,
    rows: list[Row],
    columns: list[Column] = COLUMNS,
    mode: WriteMode = WriteMode.OVERWRITE,
    key: tuple[str, ...] = (),
    batch: int = 1000,
    **options: Any,
) -> int:
    connector = await place.connect(format="parquet", **options)
    try:
        chunks = [rows[i : i + batch] for i in range(0, len(rows), batch)] or [[]]
        return await connector.write("t", columns, batches_of(*chunks), mode, key)
    finally:
        await connector.close()


async def read_back(place: Place, **options: Any) -> tuple[list[Column], list[Row]]:
    connector = await place.connect(format="parquet", **options)
    try:
        (stream,) = await connector.discover()
        rows = [row for batch in await read_all(connector, stream) for row in batch]
    finally:
        await connector.close()
    return list(stream.columns), rows


def parquet_of(data: bytes) -> pq.ParquetFile:
    return pq.ParquetFile(io.BytesIO(data))


# ---------------------------------------------------------------- round trip


async def test_every_type_is_written_with_its_declared_arrow_type(place: Place) -> None:
    assert await write(place, ROWS) == 3

    file = parquet_of(await place.get("t.parquet"))
    schema = file.schema_arrow
    assert {f.name: f.type for f in schema} == ARROW_TYPES
    assert not schema.field("id").nullable and schema.field("name").nullable
    assert schema.field("name").metadata == {b"setu.sql_type": b"character varying(20)"}
    table = file.read()
    assert table.column("price").to_pylist() == [Decimal("-999.99"), None, Decimal("0.00")]
    assert table.column("moment").to_pylist()[0] == datetime(2013, 1, 1, 10, tzinfo=UTC)
    assert table.column("tags").to_pylist()[0] == ["a", "b c", None, "", None]
    assert table.column("counts").to_pylist() == [[1, None, -3], None, []]
    assert table.column("doc").to_pylist() == ['{"a":[1,null,"x"],"b":{"c":1.5}}', None, "null"]
    assert table.column("ident").to_pylist()[0] == uuid.UUID(int=42)
    assert table.column("ratio").to_pylist()[0] == pytest.approx(0.01)


async def test_setu_reads_its_own_file_back_with_the_same_columns_and_values(
    place: Place,
) -> None:
    await write(place, ROWS)
    columns, rows = await read_back(place)
    assert columns == COLUMNS
    assert rows == [expected_back(row) for row in ROWS]
    assert rows[0][4] == 0.01  # a real reads back as the digits it was written with


async def test_a_file_of_other_tools_reads_with_its_types(place: Place) -> None:
    table = pa.table(
        {
            "tiny": pa.array([1, None], pa.int8()),
            "unsigned": pa.array([4_000_000_000, 0], pa.uint32()),
            "half": pa.array([1.5, None], pa.float16()),
            "city": pa.array(["NYC", "NYC"]).dictionary_encode(),
            "ns": pa.array([1_000_001_999, None], pa.timestamp("ns", tz="America/New_York")),
            "wide": pa.array(["x", None], pa.large_string()),
            "when": pa.array([86_400_000, None], pa.date64()),
            "point": pa.array([{"x": 1, "y": [2, 3]}, None]),
            "names": pa.array([["a", "b"], None], pa.list_(pa.string())),
        }
    )
    out = io.BytesIO()
    pq.write_table(table, out)
    await place.put("t.parquet", out.getvalue())
    columns, rows = await read_back(place)
    assert [(c.name, c.type, c.sql_type) for c in columns] == [
        ("tiny", "smallint", ""),
        ("unsigned", "bigint", ""),
        ("half", "real", ""),
        ("city", "text", ""),
        ("ns", "timestamptz", ""),
        ("wide", "text", ""),
        ("when", "date", ""),
        ("point", "json", ""),
        ("names", "text", "text[]"),
    ]
    assert rows[0] == (
        1,
        4_000_000_000,
        1.5,
        "NYC",
        datetime(1970, 1, 1, 0, 0, 1, 1, tzinfo=UTC),  # nanoseconds cut to microseconds
        "x",
        date(1970, 1, 2),
        {"x": 1, "y": [2, 3]},
        "{a,b}",
    )
    assert rows[1] == (None, 0, None, "NYC", None, None, None, None, None)


async def test_declared_types_override_the_file_schema(place: Place) -> None:
    await write(place, ROWS)
    columns, rows = await read_back(place, columns={"t": {"small": "text", "price": "double"}})
    assert columns[2] == Column("small", "text", nullable=True)
    assert [row[2] for row in rows] == ["-32768", None, "0"]
    assert [row[6] for row in rows] == [-999.99, None, 0.0]


# ---------------------------------------------------------------- row groups


async def test_rows_are_written_in_row_groups_and_read_in_batches(place: Place) -> None:
    columns = [Column("n", "bigint")]
    rows = [(i,) for i in range(25)]
    await write(place, rows, columns, batch=7, parquet={"row_group_rows": 10})
    file = parquet_of(await place.get("t.parquet"))
    sizes = [file.metadata.row_group(i).num_rows for i in range(file.num_row_groups)]
    assert sizes == [10, 10, 5]
    assert file.metadata.row_group(0).column(0).compression == "ZSTD"

    connector = await place.connect(format="parquet")
    try:
        (stream,) = await connector.discover()
        batches = await read_all(connector, stream, batch_rows=4)
    finally:
        await connector.close()
    assert [len(b) for b in batches] == [4] * 6 + [1]
    assert [r for b in batches for r in b] == rows


async def test_the_writer_holds_less_than_one_row_group(tmp_path: Path) -> None:
    config = SimpleNamespace(parquet=ParquetOptions(row_group_rows=10))
    writer = await ParquetWriter.open(tmp_path / "t.parquet", config, [Column("n", "bigint")])
    held = []
    for start in range(0, 25, 7):
        await writer.write([(i,) for i in range(start, min(start + 7, 25))])
        held.append(writer.pending_rows)
    await writer.close()
    assert held == [7, 4, 1, 5]  # full row groups leave as soon as they are full
    assert pq.read_table(tmp_path / "t.parquet").column("n").to_pylist() == list(range(25))


async def test_compression_is_configurable(place: Place) -> None:
    await write(place, [(1,)], [Column("n", "bigint")], parquet={"compression": "snappy"})
    file = parquet_of(await place.get("t.parquet"))
    assert file.metadata.row_group(0).column(0).compression == "SNAPPY"


async def test_an_s3_file_is_read_by_ranges_and_a_replaced_one_is_refused(
    s3_endpoint: S3Endpoint,
) -> None:
    bucket = await s3_endpoint.make_bucket()
    place = Place(
        url=f"s3://{bucket}/data/",
        s3=s3_endpoint,
        bucket=bucket,
        extra={
            "endpoint_url": s3_endpoint.endpoint_url,
            "access_key_id": s3_endpoint.access_key_id,
            "secret_access_key": {"$secret": "S3_SECRET"},
        },
    )
    columns = [Column("n", "bigint"), Column("pad", "text")]
    rows = [(i, os.urandom(50).hex()) for i in range(40_000)]  # 4 MiB, 4 row groups
    options = {"row_group_rows": 10_000, "compression": "none"}
    await write(place, rows, columns, parquet=options)
    connector = await place.connect(format="parquet")
    try:
        (stream,) = await connector.discover()
        batches = connector.read(stream, 10_000)
        first = await anext(batches)
        assert first == rows[:10_000]
        # Row groups not read yet are fetched when needed, from this version only.
        # The same layout: without the ETag check its offsets would still read.
        await write(place, rows[::-1], columns, parquet=options)
        with pytest.raises(ProviderError, match=r"t\.parquet") as caught:
            async for _ in batches:
                pass
        assert "PreconditionFailed" in str(caught.value)
    finally:
        await connector.close()


# ---------------------------------------------------------------- write modes

KEYED = [Column("id", "bigint"), Column("v", "text")]


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        (WriteMode.OVERWRITE, [(2, "new"), (3, "new")]),
        (WriteMode.APPEND, [(1, "old"), (2, "old"), (2, "new"), (3, "new")]),
        (WriteMode.UPSERT, [(1, "old"), (2, "new"), (3, "new")]),
        (WriteMode.MERGE, [(2, "new"), (3, "new")]),
    ],
)
async def test_write_modes_rewrite_the_file(
    place: Place, mode: WriteMode, expected: list[Row]
) -> None:
    await write(place, [(1, "old"), (2, "old")], KEYED)
    await write(place, [(2, "new"), (3, "new")], KEYED, mode=mode, key=("id",))
    _, rows = await read_back(place)
    assert sorted(rows) == sorted(expected)


# ---------------------------------------------------------------- refusals


@pytest.mark.parametrize(
    ("column", "values", "row", "reason"),
    [
        (Column("p", "numeric", sql_type="numeric(5,2)"), [Decimal(1), Decimal("1.234")], 2, ""),
        (Column("p", "numeric"), [Decimal(1), Decimal("NaN")], 2, ""),
        (Column("p", "numeric"), [Decimal("1e-12")], 1, ""),
        (Column("p", "bigint", nullable=False), [1, None], 2, "NULL in a column declared NOT NULL"),
        (Column("p", "text", sql_type="integer[]"), ["{1,2}", "{{1},{2}}"], 2, ""),
    ],
)
async def test_a_value_parquet_cannot_hold_fails_naming_column_and_row(
    tmp_path: Path, column: Column, values: list[Any], row: int, reason: str
) -> None:
    place = Place(url=str(tmp_path / "data"), root=tmp_path / "data")
    with pytest.raises(ValueFault) as caught:
        await write(place, [(v,) for v in values], [column], batch=1)
    fault = caught.value
    assert (fault.column, fault.row, fault.retryable) == ("p", row, False)
    assert reason in str(fault)
    assert not (tmp_path / "data" / "t.parquet").exists()  # nothing half-written


async def test_a_file_that_is_not_parquet_is_refused(place: Place) -> None:
    await place.put("t.parquet", b"id,name\n1,x\n")
    with pytest.raises(PermanentError, match=r"t\.parquet is not a Parquet file"):
        await read_back(place)


@pytest.mark.parametrize(
    ("parquet", "message"),
    [
        ([], "config.parquet must be an object"),
        ({"compression": "lzma"}, "config.parquet.compression must be one of"),
        ({"row_group_rows": 0}, "config.parquet.row_group_rows must be"),
        ({"row_group_rows": True}, "config.parquet.row_group_rows must be"),
        ({"page_size": 1}, "config.parquet.page_size is not a Parquet option"),
    ],
)
def test_parquet_option_errors_name_the_key(parquet: Any, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        PROVIDER.validate_config({"url": "/d/", "format": "parquet", "parquet": parquet})


def test_a_parquet_url_implies_the_format() -> None:
    PROVIDER.validate_config({"url": "/d/x.parquet", "parquet": {"compression": "none"}})
