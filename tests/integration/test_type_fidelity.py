"""Types and constraints arrive as the source declares them (docs/data-types.md):
PostgreSQL → PostgreSQL keeps varchar(n), char(n), numeric(p,s), smallint,
arrays, domains (as their base type), NOT NULL and the primary key, on both
paths and in every write mode; SQLite's declared types map to PostgreSQL's;
a pipeline's spec.columns declares types over the source's; and a
nycflights13-shaped dataset lands with the types a person would choose."""

from __future__ import annotations

import contextlib
import sqlite3
import uuid
from collections.abc import AsyncIterator, Sequence
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import asyncpg
import pytest

from setu_engine.errors import SpecError
from setu_engine.kinds import WriteMode
from setu_engine.movement import transfer
from setu_engine.operators.chain import parse_spec
from setu_engine.providers.base import Connector
from setu_engine.providers.postgres import PROVIDER as POSTGRES
from setu_engine.providers.sqlite import PROVIDER as SQLITE
from setu_engine.staged.blob import LocalBlobStore
from setu_engine.staged.markers import LoadIdentity
from setu_engine.staged.staging import run_prefix
from setu_engine.values.types import Column
from tests import flights
from tests.databases import postgres_config, scratch_database

PATHS = ["direct", "staged"]


class Quiet:
    async def extracted(self, stream: str, rows: int) -> None:
        return None

    async def loaded(self, stream: str, rows: int) -> None:
        return None


@pytest.fixture
async def source_url(pg_server_url: str) -> AsyncIterator[str]:
    async with scratch_database(pg_server_url, "setu_src") as url:
        yield url


@pytest.fixture
async def target_url(pg_server_url: str) -> AsyncIterator[str]:
    async with scratch_database(pg_server_url, "setu_dst") as url:
        yield url


@pytest.fixture
async def source(source_url: str) -> AsyncIterator[asyncpg.Connection]:
    conn = await asyncpg.connect(source_url)
    try:
        yield conn
    finally:
        await conn.close()


@pytest.fixture
async def target(target_url: str) -> AsyncIterator[asyncpg.Connection]:
    conn = await asyncpg.connect(target_url)
    try:
        yield conn
    finally:
        await conn.close()


@contextlib.asynccontextmanager
async def opened(provider: Any, config: dict[str, Any]) -> AsyncIterator[Connector]:
    connector = await provider.connect(config)
    try:
        yield connector
    finally:
        await connector.close()


async def move(
    source: Connector,
    destination: Connector,
    how: str,
    tmp_path: Path,
    *,
    mode: WriteMode = WriteMode.OVERWRITE,
    streams: Sequence[str] = (),
    spec: dict[str, Any] | None = None,
) -> list[transfer.StreamTotals]:
    chosen = transfer.select_streams(await source.discover(), streams)
    identity = LoadIdentity(str(uuid.uuid4()))
    parsed = parse_spec(spec)
    if how == "direct":
        return await transfer.direct(
            source, destination, chosen, parsed, mode, Quiet(), identity=identity
        )
    blob = LocalBlobStore(tmp_path / "blob")
    prefix = run_prefix("ws", "pl", identity.run_id)
    manifest = await transfer.stage(source, chosen, blob, prefix, Quiet())
    return await transfer.load(
        destination, manifest, blob, prefix, parsed, mode, Quiet(), identity=identity
    )


async def pg_move(
    source_url: str, target_url: str, how: str, tmp_path: Path, **options: Any
) -> list[transfer.StreamTotals]:
    async with (
        opened(POSTGRES, postgres_config(source_url)) as src,
        opened(POSTGRES, postgres_config(target_url)) as dst,
    ):
        return await move(src, dst, how, tmp_path, **options)


# -- PostgreSQL → PostgreSQL ----------------------------------------------------

KEPT_DDL = """
CREATE DOMAIN positive AS integer NOT NULL CHECK (VALUE > 0);
CREATE DOMAIN code AS varchar(8);
CREATE TYPE mood AS ENUM ('sad', 'happy');
CREATE TABLE kept (
    id smallint NOT NULL,
    region char(3) NOT NULL,
    label varchar(20),
    amount numeric(5,2) NOT NULL,
    ratio real,
    stamp timestamp(3) with time zone,
    counts integer[],
    names varchar(10)[],
    prices numeric(6,2)[],
    score positive,
    short code,
    feeling mood,
    span interval,
    addr inet,
    doc json,
    PRIMARY KEY (region, id)
);
INSERT INTO kept VALUES
 (1, 'EWR', 'first', 1.5, 0.01, '2013-01-01 05:00:00.123+00', '{1,NULL,3}', '{a,"b c"}',
  '{1.25,NULL}', 7, 'abc', 'happy', '1 day 02:00:00', '10.0.0.1', '{"a": [1, null]}'),
 (2, 'JF', NULL, -999.99, NULL, NULL, '{}', NULL, NULL, 1, NULL, NULL, NULL, NULL, NULL);
"""

# What the destination declares: the source's own types, a domain as its
# base type (with the domain's NOT NULL), an enum as text.
KEPT_TYPES = [
    ("id", "smallint", True),
    ("region", "character(3)", True),
    ("label", "character varying(20)", False),
    ("amount", "numeric(5,2)", True),
    ("ratio", "real", False),
    ("stamp", "timestamp(3) with time zone", False),
    ("counts", "integer[]", False),
    ("names", "character varying(10)[]", False),
    ("prices", "numeric(6,2)[]", False),
    ("score", "integer", True),
    ("short", "character varying(8)", False),
    ("feeling", "text", False),
    ("span", "interval", False),
    ("addr", "inet", False),
    ("doc", "json", False),
]

VALUES_AS_TEXT = "SELECT t::text FROM kept t ORDER BY id"


@pytest.mark.parametrize("how", PATHS)
@pytest.mark.parametrize("mode", list(WriteMode))
async def test_postgres_to_postgres_keeps_types_not_null_and_key(
    source: asyncpg.Connection,
    target: asyncpg.Connection,
    source_url: str,
    target_url: str,
    tmp_path: Path,
    how: str,
    mode: WriteMode,
) -> None:
    await source.execute(KEPT_DDL)
    await pg_move(source_url, target_url, how, tmp_path, mode=mode)
    assert await flights.declared_types(target, "kept") == KEPT_TYPES
    assert await flights.primary_key(target, "kept") == ["region", "id"]
    # Every value as the source has it, 'JF' padded as char(3) pads it.
    assert await target.fetch(VALUES_AS_TEXT) == await source.fetch(VALUES_AS_TEXT)


async def test_a_second_run_into_the_table_it_created_loads_the_same_values(
    source: asyncpg.Connection,
    target: asyncpg.Connection,
    source_url: str,
    target_url: str,
    tmp_path: Path,
) -> None:
    await source.execute(KEPT_DDL)
    for _ in range(2):
        totals = await pg_move(source_url, target_url, "direct", tmp_path)
    assert [t.loaded for t in totals] == [2]
    assert await target.fetch(VALUES_AS_TEXT) == await source.fetch(VALUES_AS_TEXT)


async def test_a_value_too_long_for_a_kept_varchar_fails_the_load(
    source: asyncpg.Connection,
    target: asyncpg.Connection,
    source_url: str,
    target_url: str,
    tmp_path: Path,
) -> None:
    await target.execute("CREATE TABLE narrow (id int PRIMARY KEY, label varchar(3))")
    await source.execute("CREATE TABLE narrow (id int PRIMARY KEY, label text)")
    await source.execute("INSERT INTO narrow VALUES (1, 'abcdef')")
    with pytest.raises(Exception, match="too long"):
        await pg_move(source_url, target_url, "direct", tmp_path)
    assert await target.fetchval("SELECT count(*) FROM narrow") == 0


@pytest.mark.parametrize(
    "sql_type",
    [
        "integer); DROP TABLE victim; --",
        "text, evil int",
        'public."victim"',
        "varchar(99999999999)",
    ],
)
async def test_a_hostile_sql_type_never_reaches_ddl(
    target: asyncpg.Connection, target_url: str, sql_type: str
) -> None:
    await target.execute("CREATE TABLE victim (id int)")
    columns = [Column("id", "integer", False, sql_type)]

    async def batches() -> AsyncIterator[list[tuple[Any, ...]]]:
        yield [(1,)]

    async with opened(POSTGRES, postgres_config(target_url)) as dst:
        await dst.write("landed", columns, batches(), WriteMode.APPEND, ())
    assert await flights.declared_types(target, "landed") == [("id", "integer", True)]
    assert await target.fetchval("SELECT to_regclass('victim')") is not None
    with pytest.raises(ValueError, match=r"unknown type|out of range"):
        Column.from_dict({"name": "id", "type": "integer", "sql_type": sql_type})


# -- SQLite → PostgreSQL -----------------------------------------------------------

SQLITE_DDL = """
CREATE TABLE measures (
    id INTEGER PRIMARY KEY,
    small SMALLINT NOT NULL,
    whole INT4,
    big BIGINT,
    ratio REAL,
    single FLOAT4,
    amount NUMERIC(5,2),
    price DECIMAL(10,4),
    loose NUMERIC,
    flag BOOLEAN,
    name VARCHAR(20),
    code CHAR(3),
    note TEXT,
    blob BLOB,
    born DATE,
    seen DATETIME,
    stamped TIMESTAMP,
    offset_seen DATETIME
);
INSERT INTO measures VALUES
 (1, 7, 42, 1099511627776, 2.5, 0.5, 12.34, 1.2345, '3.14159', 1, 'héllo', 'EWR', 'n', x'00ff',
  '2013-01-01', '2013-01-01 05:00:00', '2013-06-01 12:30:00', '2013-01-01T05:00:00+02:00'),
 (2, 1, NULL, NULL, NULL, NULL, NULL, NULL, NULL, 0, NULL, NULL, NULL, NULL, NULL, NULL,
  NULL, '2013-01-01 00:00:00Z');
"""

# (column, neutral type, SQL type) as the sqlite provider discovers them.
SQLITE_COLUMNS = [
    ("id", "bigint", ""),
    ("small", "smallint", ""),
    ("whole", "integer", ""),
    ("big", "bigint", ""),
    ("ratio", "double", ""),
    ("single", "real", ""),
    ("amount", "numeric", "numeric(5,2)"),
    ("price", "numeric", "numeric(10,4)"),
    ("loose", "numeric", ""),
    ("flag", "boolean", ""),
    ("name", "text", "character varying(20)"),
    ("code", "text", "character(3)"),
    ("note", "text", ""),
    ("blob", "bytes", ""),
    ("born", "date", ""),
    ("seen", "timestamp", ""),
    ("stamped", "timestamp", ""),
    ("offset_seen", "timestamptz", ""),
]

SQLITE_LANDED = [
    ("id", "bigint", True),
    ("small", "smallint", True),
    ("whole", "integer", False),
    ("big", "bigint", False),
    ("ratio", "double precision", False),
    ("single", "real", False),
    ("amount", "numeric(5,2)", False),
    ("price", "numeric(10,4)", False),
    ("loose", "numeric", False),
    ("flag", "boolean", False),
    ("name", "character varying(20)", False),
    ("code", "character(3)", False),
    ("note", "text", False),
    ("blob", "bytea", False),
    ("born", "date", False),
    ("seen", "timestamp without time zone", False),
    ("stamped", "timestamp without time zone", False),
    ("offset_seen", "timestamp with time zone", False),
]


def sqlite_file(tmp_path: Path) -> Path:
    path = tmp_path / "measures.db"
    with contextlib.closing(sqlite3.connect(path)) as conn:
        conn.executescript(SQLITE_DDL)
    return path


async def test_sqlite_declared_types_are_discovered_with_their_sql_types(tmp_path: Path) -> None:
    async with opened(SQLITE, {"path": str(sqlite_file(tmp_path))}) as src:
        (stream,) = await src.discover()
    assert [(c.name, c.type, c.sql_type) for c in stream.columns] == SQLITE_COLUMNS


@pytest.mark.parametrize("how", PATHS)
async def test_sqlite_to_postgres_lands_the_declared_types(
    target: asyncpg.Connection, target_url: str, tmp_path: Path, how: str
) -> None:
    async with (
        opened(SQLITE, {"path": str(sqlite_file(tmp_path))}) as src,
        opened(POSTGRES, postgres_config(target_url)) as dst,
    ):
        await move(src, dst, how, tmp_path)
    assert await flights.declared_types(target, "measures") == SQLITE_LANDED
    assert await flights.primary_key(target, "measures") == ["id"]
    row = await target.fetchrow("SELECT * FROM measures WHERE id = 1")
    assert (row["amount"], row["price"], row["code"]) == (
        Decimal("12.34"),
        Decimal("1.2345"),
        "EWR",
    )
    assert row["offset_seen"] == datetime(2013, 1, 1, 3, tzinfo=UTC)


@pytest.mark.parametrize("how", PATHS)
async def test_the_connections_timezone_lands_date_times_as_timestamptz(
    target: asyncpg.Connection, target_url: str, tmp_path: Path, how: str
) -> None:
    config = {"path": str(sqlite_file(tmp_path)), "timezone": "America/New_York"}
    async with (
        opened(SQLITE, config) as src,
        opened(POSTGRES, postgres_config(target_url)) as dst,
    ):
        await move(src, dst, how, tmp_path)
    landed = dict(
        (name, type_) for name, type_, _ in await flights.declared_types(target, "measures")
    )
    assert landed["seen"] == landed["stamped"] == "timestamp with time zone"
    row = await target.fetchrow("SELECT seen, stamped, offset_seen FROM measures WHERE id = 1")
    # 05:00 in New York in January is 10:00 UTC; 12:30 in June (EDT) is 16:30 UTC.
    assert row["seen"] == datetime(2013, 1, 1, 10, tzinfo=UTC)
    assert row["stamped"] == datetime(2013, 6, 1, 16, 30, tzinfo=UTC)
    # A value with its own offset keeps it.
    assert row["offset_seen"] == datetime(2013, 1, 1, 3, tzinfo=UTC)


@pytest.mark.parametrize("zone", ["Mars/Olympus", "", 5, "../../etc/passwd"])
def test_an_unknown_timezone_is_refused_naming_the_field(tmp_path: Path, zone: Any) -> None:
    with pytest.raises(ValueError, match=r"config\.timezone"):
        SQLITE.validate_config({"path": str(tmp_path / "x.db"), "timezone": zone})


# -- spec.columns ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("columns", "message"),
    [
        ({"t": {"a": "varchar(20"}}, r"spec.columns.t.a: unknown type"),
        ({"t": {"a": "mood"}}, r"spec.columns.t.a: unknown type 'mood'"),
        ({"t": {"a": "integer; drop table x"}}, r"spec.columns.t.a: unknown type"),
        ({"t": {"a": "numeric(2000)"}}, r"spec.columns.t.a: .*out of range"),
        ({"t": {"a": 5}}, r"spec.columns.t.a: must be a type name"),
        ({"t": {}}, r"spec.columns.t: must be a non-empty object"),
        ({"t": ["a"]}, r"spec.columns.t: must be a non-empty object"),
    ],
)
def test_declared_columns_are_validated_naming_the_path(
    columns: dict[str, Any], message: str
) -> None:
    with pytest.raises(SpecError, match=message):
        parse_spec({"columns": columns})


def test_a_declared_column_the_stream_lacks_is_named() -> None:
    spec = parse_spec({"columns": {"t": {"nope": "text"}}})
    with pytest.raises(SpecError, match="unknown column 'nope'"):
        spec.chain_for("t").plan([Column("a", "text")])


def test_a_declared_type_the_values_cannot_become_is_refused() -> None:
    spec = parse_spec({"columns": {"t": {"a": "date"}}})
    with pytest.raises(SpecError, match="cannot read bytes as date"):
        spec.chain_for("t").plan([Column("a", "bytes")])


@pytest.mark.parametrize("how", PATHS)
async def test_declared_columns_override_what_the_source_says(
    source: asyncpg.Connection,
    target: asyncpg.Connection,
    source_url: str,
    target_url: str,
    tmp_path: Path,
    how: str,
) -> None:
    await source.execute(
        "CREATE TABLE raw (id text PRIMARY KEY, time_hour text, carrier text, tags text);"
        "INSERT INTO raw VALUES ('1', '2013-01-01 05:00:00-05', 'UA', '{a,b}'),"
        " ('2', NULL, NULL, NULL)"
    )
    spec = {
        "columns": {
            "raw": {
                "id": "int",
                "time_hour": "timestamptz",
                "carrier": "char(2)",
                "tags": "varchar(5)[]",
            }
        }
    }
    await pg_move(source_url, target_url, how, tmp_path, spec=spec, mode=WriteMode.UPSERT)
    assert await flights.declared_types(target, "raw") == [
        ("id", "integer", True),
        ("time_hour", "timestamp with time zone", False),
        ("carrier", "character(2)", False),
        ("tags", "character varying(5)[]", False),
    ]
    row = await target.fetchrow("SELECT * FROM raw WHERE id = 1")
    assert row["time_hour"] == datetime(2013, 1, 1, 10, tzinfo=UTC)
    assert row["tags"] == ["a", "b"]


# -- a nycflights13-shaped dataset -------------------------------------------------


@pytest.mark.parametrize("how", PATHS)
async def test_the_flights_tables_land_with_the_types_a_person_would_choose(
    source: asyncpg.Connection,
    target: asyncpg.Connection,
    source_url: str,
    target_url: str,
    tmp_path: Path,
    how: str,
) -> None:
    counts = await flights.create(source)
    totals = await pg_move(source_url, target_url, how, tmp_path)
    assert {t.stream: t.loaded for t in totals} == {f"public.{n}": c for n, c in counts.items()}
    for table in flights.TABLES:
        assert await flights.declared_types(target, table) == await flights.declared_types(
            source, table
        ), table
        assert await flights.primary_key(target, table) == await flights.primary_key(source, table)
        assert await flights.rows_of(target, table) == await flights.rows_of(source, table)
    flights_types = dict((n, t) for n, t, _ in await flights.declared_types(target, "flights"))
    assert len(flights_types) == 19
    assert (flights_types["carrier"], flights_types["dep_delay"]) == (
        "character(2)",
        "numeric(5,2)",
    )


SQLITE_FLIGHTS = """
CREATE TABLE flights (
    year SMALLINT NOT NULL, month SMALLINT NOT NULL, day SMALLINT NOT NULL,
    dep_time SMALLINT, sched_dep_time SMALLINT NOT NULL, dep_delay NUMERIC(5,2),
    arr_time SMALLINT, sched_arr_time SMALLINT NOT NULL, arr_delay NUMERIC(5,2),
    carrier CHAR(2) NOT NULL, flight INT4 NOT NULL, tailnum VARCHAR(6),
    origin CHAR(3) NOT NULL, dest CHAR(3) NOT NULL, air_time FLOAT4,
    distance INT4 NOT NULL, hour SMALLINT NOT NULL, minute SMALLINT NOT NULL,
    time_hour DATETIME NOT NULL
)
"""


@pytest.mark.parametrize("how", PATHS)
async def test_flights_from_sqlite_land_as_from_postgres(
    source: asyncpg.Connection,
    target: asyncpg.Connection,
    target_url: str,
    tmp_path: Path,
    how: str,
) -> None:
    """A SQLite file of the flights, its time_hour naive in New York's local
    time, lands with the types the PostgreSQL tables declare."""
    rows = flights.generate(500)["flights"]
    path = tmp_path / "flights.db"
    zone = ZoneInfo("America/New_York")
    with contextlib.closing(sqlite3.connect(path)) as conn:
        conn.execute(SQLITE_FLIGHTS)
        conn.executemany(
            f"INSERT INTO flights VALUES ({', '.join('?' * 19)})",
            [
                (
                    *(str(v) if isinstance(v, Decimal) else v for v in row[:18]),
                    row[18].astimezone(zone).replace(tzinfo=None).isoformat(sep=" "),
                )
                for row in rows
            ],
        )
        conn.commit()
    await source.execute(flights.DDL)
    async with (
        opened(SQLITE, {"path": str(path), "timezone": "America/New_York"}) as src,
        opened(POSTGRES, postgres_config(target_url)) as dst,
    ):
        await move(src, dst, how, tmp_path)
    assert await flights.declared_types(target, "flights") == await flights.declared_types(
        source, "flights"
    )
    await source.copy_records_to_table("flights", records=rows)
    assert await flights.rows_of(target, "flights") == await flights.rows_of(source, "flights")
