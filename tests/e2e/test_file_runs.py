"""Files as sources and destinations in real runs (in-process server, SDK,
cloud worker, providers, blob store): the nycflights13-shaped CSVs load into
PostgreSQL with the types a person would choose, and a PostgreSQL table goes
to Parquet (local and S3) and back with its declared types and values."""

from __future__ import annotations

import io
import json
import uuid
from datetime import UTC, date, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import asyncpg
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from setu_client import InvalidArgument, SetuClient
from setu_client._proto.setu.v1 import common_pb2
from setu_engine.staged.s3 import s3_client
from tests import flights_csv
from tests.databases import postgres_config, scratch_database
from tests.s3server import S3Endpoint

S = common_pb2


@pytest.fixture
def server_settings(tmp_path: Path) -> dict[str, Any]:
    secrets = tmp_path / "secrets.json"
    secrets.write_text(json.dumps({"S3_SECRET": "testing"}))
    return {
        "data_dir": tmp_path / "server",
        "secrets_file": str(secrets),
        "shared_secrets": "S3_SECRET",
        "batch_rows": 1000,  # several batches and parts per stream
        "task_retry_backoff_seconds": 0.05,
    }


async def run(
    client: SetuClient,
    source: tuple[str, dict[str, Any]],
    destination: tuple[str, dict[str, Any]],
    mode: str = "overwrite",
) -> Any:
    name = uuid.uuid4().hex[:8]
    src = await client.create_connection(f"src-{name}", source[0], source[1])
    dst = await client.create_connection(f"dst-{name}", destination[0], destination[1])
    pipeline = await client.create_pipeline(f"p-{name}", src.id, dst.id, write_mode=mode)
    job = await client.submit_run(pipeline.id)
    await client.wait_for_job(job.id)
    done = await client.get_job(job.id)
    assert done.state == S.JOB_STATE_SUCCEEDED, done.error_message
    return done


async def declared(url: str, table: str) -> list[tuple[str, str, bool]]:
    conn = await asyncpg.connect(url)
    try:
        records = await conn.fetch(
            "SELECT a.attname, format_type(a.atttypid, a.atttypmod), a.attnotnull "
            "FROM pg_attribute a WHERE a.attrelid = $1::regclass AND a.attnum > 0 "
            "AND NOT a.attisdropped ORDER BY a.attnum",
            table,
        )
    finally:
        await conn.close()
    return [(r[0], r[1], r[2]) for r in records]


# ---------------------------------------------------------------- config checks


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"csv": {"quote": "ab"}}, r"config\.csv\.quote must be one character"),
        ({"csv": {"null_values": "NA"}}, r"config\.csv\.null_values must be a list"),
        ({"csv": {"encoding": "utf-16"}}, r"config\.csv\.encoding: utf-16 is not read line"),
        ({"parquet": {"compression": "lzma"}}, r"config\.parquet\.compression must be one of"),
    ],
)
async def test_a_wrong_file_option_is_refused_naming_its_key(
    client: SetuClient, config: dict[str, Any], message: str
) -> None:
    with pytest.raises(InvalidArgument, match=message):
        await client.create_connection("files", "file", {"url": "data/", "format": "csv"} | config)


# ---------------------------------------------------------------- CSV → PostgreSQL

PG_NAMES = {
    "smallint": "smallint",
    "numeric": "numeric",
    "text": "text",
    "timestamp": "timestamp without time zone",
    "timestamptz": "timestamp with time zone",
}


async def test_the_nycflights13_csvs_load_into_postgres_with_chosen_types(
    client: SetuClient, pg_server_url: str, tmp_path: Path
) -> None:
    counts = flights_csv.write(tmp_path / "nycflights13")
    async with scratch_database(pg_server_url) as url:
        source = ("file", {"url": str(tmp_path / "nycflights13"), "format": "csv"})
        job = await run(client, source, ("postgres", postgres_config(url)))

        outputs = await client.job_outputs(job.id)
        assert {o.stream: o.rows_loaded for o in outputs.streams} == counts
        for table, columns in flights_csv.COLUMNS.items():
            types = [(name, type_) for name, type_, _ in await declared(url, table)]
            expected = [PG_NAMES[t] for t in flights_csv.EXPECTED[table]]
            assert types == list(zip(columns.split(), expected, strict=True)), table
        conn = await asyncpg.connect(url)
        try:
            missing = await conn.fetchval("SELECT count(*) FROM flights WHERE dep_time IS NULL")
            first = await conn.fetchrow(
                "SELECT time_hour, flight FROM flights ORDER BY year, month, day, time_hour, "
                "flight LIMIT 1"
            )
            precip = await conn.fetchval(
                "SELECT precip FROM weather WHERE time_hour = '2013-01-03 09:00:00' "
                "AND origin = 'LGA'"
            )
            quoted = await conn.fetchval(
                "SELECT count(*) FROM airports WHERE name LIKE '%\"Intl\", %'"
            )
        finally:
            await conn.close()
    assert missing > 0  # "NA" became NULL, not a failure
    assert first["time_hour"] == datetime(2013, 1, 1, 5, tzinfo=UTC)
    assert precip == Decimal("0.01")  # the row 2,053 that a 1,000-row sample would miss
    assert quoted > 0


# ---------------------------------------------------------------- PostgreSQL ↔ Parquet

SOURCE_DDL = """
CREATE TABLE items (
    id bigint PRIMARY KEY,
    code char(3) NOT NULL,
    name varchar(40),
    qty smallint,
    price numeric(7,2),
    weight real,
    ratio double precision,
    active boolean,
    born date,
    seen timestamptz,
    local_at timestamp,
    tags text[],
    counts integer[],
    doc jsonb,
    ident uuid,
    raw bytea
)"""

ITEMS = [
    (
        i,
        f"C{i % 10:02d}",
        None if i % 7 == 0 else f"item «{i}» ✓",
        i % 300,
        Decimal(i * 37 % 100000) / 100,
        0.01 * (i % 5),
        i / 3,
        i % 2 == 0,
        date(2013, 1, 1 + i % 28),
        datetime(2013, 1, 1, 5, tzinfo=UTC).replace(microsecond=i % 1000),
        datetime(2013, 1, 1, 5, i % 60),
        ["a", f"b {i}", None] if i % 3 else None,
        [i, None, -i],
        {"i": i, "nested": [1, None]},
        uuid.UUID(int=i),
        bytes([0, i % 256]),
    )
    for i in range(1, 2501)
]


async def pg_source(url: str) -> dict[str, Any]:
    conn = await asyncpg.connect(url)
    try:
        await conn.execute(SOURCE_DDL)
        await conn.set_type_codec(
            "jsonb", encoder=json.dumps, decoder=json.loads, schema="pg_catalog"
        )
        values = ", ".join(f"${i + 1}" for i in range(len(ITEMS[0])))
        await conn.executemany(f"INSERT INTO items VALUES ({values})", ITEMS)
    finally:
        await conn.close()
    return postgres_config(url)


async def table_rows(url: str) -> list[tuple[Any, ...]]:
    conn = await asyncpg.connect(url)
    try:
        await conn.set_type_codec(
            "jsonb", encoder=json.dumps, decoder=json.loads, schema="pg_catalog"
        )
        records = await conn.fetch("SELECT * FROM items ORDER BY id")
    finally:
        await conn.close()
    return [tuple(r) for r in records]


EXPECTED_SCHEMA = pa.schema(
    [
        ("id", pa.int64(), False),
        ("code", pa.string(), False),
        ("name", pa.string()),
        ("qty", pa.int16()),
        ("price", pa.decimal128(7, 2)),
        ("weight", pa.float32()),
        ("ratio", pa.float64()),
        ("active", pa.bool_()),
        ("born", pa.date32()),
        ("seen", pa.timestamp("us", tz="UTC")),
        ("local_at", pa.timestamp("us")),
        ("tags", pa.list_(pa.string())),
        ("counts", pa.list_(pa.int32())),
        ("doc", pa.json_()),
        ("ident", pa.uuid()),
        ("raw", pa.binary()),
    ]
)


@pytest.mark.parametrize("where", ["local", "s3"])
async def test_a_table_goes_to_parquet_and_back_with_its_types_and_values(
    client: SetuClient,
    pg_server_url: str,
    s3_endpoint: S3Endpoint,
    tmp_path: Path,
    where: str,
) -> None:
    if where == "local":
        files: dict[str, Any] = {"url": str(tmp_path / "lake"), "format": "parquet"}
    else:
        bucket = await s3_endpoint.make_bucket()
        files = {
            "url": f"s3://{bucket}/lake/",
            "format": "parquet",
            "endpoint_url": s3_endpoint.endpoint_url,
            "region": s3_endpoint.region,
            "access_key_id": s3_endpoint.access_key_id,
            "secret_access_key": {"$secret": "S3_SECRET"},
        }
    async with (
        scratch_database(pg_server_url) as source_url,
        scratch_database(pg_server_url) as back_url,
    ):
        await run(client, ("postgres", await pg_source(source_url)), ("file", files))

        if where == "local":
            data = (tmp_path / "lake" / "items.parquet").read_bytes()
        else:
            async with s3_client(s3_endpoint.settings) as s3:
                response = await s3.get_object(Bucket=bucket, Key="lake/items.parquet")
                async with response["Body"] as body:
                    data = await body.read()
        schema = pq.read_schema(io.BytesIO(data))
        assert schema.remove_metadata() == EXPECTED_SCHEMA
        assert schema.field("name").metadata == {b"setu.sql_type": b"character varying(40)"}
        assert pq.read_metadata(io.BytesIO(data)).num_rows == len(ITEMS)

        await run(client, ("file", files), ("postgres", postgres_config(back_url)))

        assert await declared(back_url, "items") == [
            (name, type_, notnull) for name, type_, notnull in await declared(source_url, "items")
        ]
        assert await table_rows(back_url) == await table_rows(source_url)
