"""The postgres provider against a real PostgreSQL (a scratch database per
test): config validation, connecting, discovery and its type mapping, reads
(rows and binary COPY batches, one snapshot), and the four write modes over
both load paths with their atomicity and the errors a user sees."""

from __future__ import annotations

import contextlib
import json
import socket
import uuid
from collections.abc import AsyncIterator, Iterator, Sequence
from datetime import UTC, date, datetime, time, timedelta, timezone
from decimal import Decimal
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from setu_agent.handlers import open_connector
from setu_agent.runtime.task import TaskContext
from setu_engine.errors import (
    ConfigError,
    OutageError,
    PermanentError,
    ProviderError,
    TransientError,
)
from setu_engine.kinds import CopyBatch, WriteMode
from setu_engine.operators.chain import Plan, parse_spec
from setu_engine.providers import get_provider
from setu_engine.providers.postgres.connector import (
    FALLBACK_ROWS_PER_PAGE,
    PROVIDER,
    PostgresConnector,
)
from setu_engine.staged import pgcopy
from setu_engine.support.secrets import SecretStore
from setu_engine.values.types import Batch, Column, Row, Stream
from setu_tasks.specs import LeasedTask
from tests.databases import postgres_config, scratch_database

# -- plumbing -----------------------------------------------------------------


@pytest.fixture
async def url(pg_server_url: str) -> AsyncIterator[str]:
    async with scratch_database(pg_server_url) as scratch:
        yield scratch


@pytest.fixture
async def admin(url: str) -> AsyncIterator[asyncpg.Connection]:
    """A second session on the scratch database, for setup and checks."""
    conn = await asyncpg.connect(url)
    try:
        for name in ("json", "jsonb"):
            await conn.set_type_codec(
                name, encoder=json.dumps, decoder=json.loads, schema="pg_catalog"
            )
        yield conn
    finally:
        await conn.close()


@pytest.fixture
async def pg(url: str) -> AsyncIterator[PostgresConnector]:
    async with connected(url) as connector:
        yield connector


@contextlib.asynccontextmanager
async def connected(url: str, **extra: Any) -> AsyncIterator[PostgresConnector]:
    connector = await PROVIDER.connect({**postgres_config(url), **extra})
    try:
        yield connector
    finally:
        await connector.close()


async def stream_named(pg: PostgresConnector, name: str) -> Stream:
    return next(s for s in await pg.discover() if s.name == name)


def by_id(rows: Sequence[Row]) -> list[Row]:
    return sorted(rows, key=lambda row: row[0])


# -- a table of every type ----------------------------------------------------

EVERYTHING_DDL = """
CREATE TYPE mood AS ENUM ('sad', 'happy');
CREATE TABLE everything (
    id int4 NOT NULL,
    small int2,
    big int8,
    ratio float4,
    precise float8,
    amount numeric(12, 2),
    name text,
    label varchar(20),
    code char(5),
    blob bytea,
    born date,
    alarm time,
    seen timestamp,
    stamped timestamptz,
    ident uuid,
    doc json,
    docb jsonb,
    flag bool NOT NULL,
    addr inet,
    feeling mood,
    counts int[],
    span interval,
    PRIMARY KEY (id)
);
INSERT INTO everything VALUES
 (1, 7, 1099511627776, 1.5, 2.25, 12.34, 'héllo', 'label', 'ab', '\\x00ff', '2024-02-29',
  '13:45:30.123456', '2024-01-02 03:04:05.000006', '2024-01-02 03:04:05+02',
  'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', '{"a": [1, "x", null]}', '[1, {"b": true}]', true,
  '10.0.0.1', 'happy', '{1,2,3}', '1 day 2 hours'),
 (2, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
  NULL, false, NULL, NULL, NULL, NULL);
"""

EVERYTHING_COLUMNS = (
    Column("id", "integer", False),
    Column("small", "smallint"),
    Column("big", "bigint"),
    Column("ratio", "real"),
    Column("precise", "double"),
    Column("amount", "numeric", sql_type="numeric(12,2)"),
    Column("name", "text"),
    Column("label", "text", sql_type="character varying(20)"),
    Column("code", "text", sql_type="character(5)"),
    Column("blob", "bytes"),
    Column("born", "date"),
    Column("alarm", "time"),
    Column("seen", "timestamp"),
    Column("stamped", "timestamptz"),
    Column("ident", "uuid"),
    Column("doc", "json", sql_type="json"),
    Column("docb", "json"),
    Column("flag", "boolean", False),
    Column("addr", "text", sql_type="inet"),
    Column("feeling", "text"),  # an enum lands as text
    Column("counts", "text", sql_type="integer[]"),
    Column("span", "text", sql_type="interval"),
)

EVERYTHING_ROWS: list[Row] = [
    (
        1,
        7,
        2**40,
        1.5,
        2.25,
        Decimal("12.34"),
        "héllo",
        "label",
        "ab",  # char(5) read as text loses its padding, as PostgreSQL casts it
        b"\x00\xff",
        date(2024, 2, 29),
        time(13, 45, 30, 123456),
        datetime(2024, 1, 2, 3, 4, 5, 6),
        datetime(2024, 1, 2, 1, 4, 5, tzinfo=UTC),
        uuid.UUID("a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"),
        {"a": [1, "x", None]},
        [1, {"b": True}],
        True,
        "10.0.0.1/32",
        "happy",
        "{1,2,3}",
        "1 day 02:00:00",
    ),
    (2,) + (None,) * 16 + (False,) + (None,) * 4,
]


def assert_everything(rows: Sequence[Row]) -> None:
    rows = by_id(rows)
    assert rows == EVERYTHING_ROWS
    stamped = rows[0][13]
    assert stamped.tzinfo is not None and stamped.utcoffset() == timedelta(0)
    assert rows[0][12].tzinfo is None


# -- validate_config ------------------------------------------------------------

VALID: dict[str, Any] = {"database": "app", "user": "reader"}


@pytest.mark.parametrize(
    "config",
    [
        VALID,
        {
            "host": {"$secret": "PG_HOST"},
            "database": {"$secret": "PG_DB"},
            "user": {"$secret": "PG_USER"},
            "password": {"$secret": "PG_PASSWORD"},
        },
        {
            **VALID,
            "host": "db.internal",
            "port": 6543,
            "schema": "sales",
            "ssl": "verify-full",
            "connect_timeout": 0.5,
        },
        {**VALID, "port": 1, "connect_timeout": 300},
        {**VALID, "port": 65535, "ssl": "disable"},
    ],
)
def test_valid_configs_pass(config: dict[str, Any]) -> None:
    PROVIDER.validate_config(config)
    get_provider("postgres").validate_config(config)


@pytest.mark.parametrize(
    ("config", "field"),
    [
        ({"user": "reader"}, "config.database"),
        ({"database": "app"}, "config.user"),
        ({**VALID, "database": ""}, "config.database"),
        ({**VALID, "user": 7}, "config.user"),
        ({**VALID, "host": ""}, "config.host"),
        ({**VALID, "host": None}, "config.host"),
        ({**VALID, "host": {"$secret": "PG_HOST", "extra": 1}}, "config.host"),
        ({**VALID, "user": {"$secret": "not a name"}}, "config.user"),
        ({**VALID, "password": {"$secret": "bad-name"}}, "config.password"),
        ({**VALID, "schema": ""}, "config.schema"),
        ({**VALID, "schema": 3}, "config.schema"),
        ({**VALID, "port": 0}, "config.port"),
        ({**VALID, "port": 65536}, "config.port"),
        ({**VALID, "port": "5432"}, "config.port"),
        ({**VALID, "port": 5432.5}, "config.port"),
        ({**VALID, "port": True}, "config.port"),
        ({**VALID, "ssl": "sometimes"}, "config.ssl"),
        ({**VALID, "ssl": True}, "config.ssl"),
        ({**VALID, "connect_timeout": 0}, "config.connect_timeout"),
        ({**VALID, "connect_timeout": -1}, "config.connect_timeout"),
        ({**VALID, "connect_timeout": 301}, "config.connect_timeout"),
        ({**VALID, "connect_timeout": "10"}, "config.connect_timeout"),
        ({**VALID, "connect_timeout": True}, "config.connect_timeout"),
        ({**VALID, "connect_timeout": float("nan")}, "config.connect_timeout"),
    ],
)
def test_invalid_configs_name_the_field(config: dict[str, Any], field: str) -> None:
    with pytest.raises(ConfigError, match=field.replace(".", r"\.")):
        PROVIDER.validate_config(config)


@pytest.mark.parametrize("password", ["hunter2", "", None, {"$secret": "X", "also": "y"}])
def test_a_plain_password_is_refused_without_echoing_it(password: Any) -> None:
    with pytest.raises(ConfigError, match=r"config\.password.*secret reference") as caught:
        PROVIDER.validate_config({**VALID, "password": password})
    assert "hunter2" not in str(caught.value)


def test_unknown_fields_are_listed_with_the_known_ones() -> None:
    with pytest.raises(ConfigError, match="unknown field") as caught:
        PROVIDER.validate_config({**VALID, "sslmode": "require", "passwd": "x"})
    message = str(caught.value)
    assert "passwd, sslmode" in message
    assert "connect_timeout" in message and "database" in message


# -- connect and test ---------------------------------------------------------


@pytest.fixture
def closed_port() -> Iterator[int]:
    """A port on 127.0.0.1 that refuses connections: bound, never listening."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        yield sock.getsockname()[1]


@pytest.mark.parametrize("ssl", ["disable", "prefer"])
async def test_an_unreachable_server_is_a_provider_error_naming_it(
    closed_port: int, ssl: str
) -> None:
    config = {
        "host": "127.0.0.1",
        "port": closed_port,
        "database": "nowhere",
        "user": "reader",
        "ssl": ssl,
        "connect_timeout": 2,
    }
    with pytest.raises(ProviderError, match=f"cannot connect to 127.0.0.1:{closed_port}/nowhere"):
        await PROVIDER.connect(config)


async def test_tls_takes_no_roots_or_keys_from_the_process_environment(
    closed_port: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The process's PostgreSQL files are its own, not a connection's: asyncpg
    # would read these (and fail on them) if it were left to build the TLS.
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("PGSSLROOTCERT", str(tmp_path / "missing-root.crt"))
    monkeypatch.setenv("PGSSLCERT", str(tmp_path / "missing-client.crt"))
    monkeypatch.setenv("PGSSLKEY", str(tmp_path / "missing-client.key"))
    monkeypatch.setenv("PGSSLMODE", "disable")
    for mode in ("verify-full", "verify-ca", "require", "prefer"):
        config = {
            "host": "127.0.0.1",
            "port": closed_port,
            "database": "nowhere",
            "user": "reader",
            "ssl": mode,
            "connect_timeout": 2,
        }
        with pytest.raises(ProviderError) as info:
            await PROVIDER.connect(config)
        message = str(info.value)
        assert f"127.0.0.1:{closed_port}/nowhere" in message
        assert "missing-" not in message and "Connect call failed" in message, message


async def test_a_missing_database_is_a_provider_error_naming_it(url: str) -> None:
    config = {**postgres_config(url), "database": "no_such_database_here"}
    with pytest.raises(ProviderError, match="no_such_database_here"):
        await PROVIDER.connect(config)


async def test_test_names_version_place_and_stream_count(
    url: str, admin: asyncpg.Connection
) -> None:
    await admin.execute(
        """
        CREATE TABLE a (id int); CREATE TABLE b (id int); CREATE VIEW c AS SELECT * FROM a;
        CREATE SCHEMA other; CREATE TABLE other.d (id int);
        """
    )
    version = await admin.fetchval("SHOW server_version")
    config = postgres_config(url)
    where = f"{config['host']}:{config.get('port', 5432)}/{config['database']}"
    async with connected(url) as pg:
        assert await pg.test() == (f"PostgreSQL {version} at {where} (3 tables in schema public)")
    async with connected(url, schema="other") as pg:
        assert await pg.test() == f"PostgreSQL {version} at {where} (1 table in schema other)"


# -- discover -----------------------------------------------------------------


async def test_discover_maps_every_type_nullability_and_key(
    admin: asyncpg.Connection, pg: PostgresConnector
) -> None:
    await admin.execute(EVERYTHING_DDL)
    stream = await stream_named(pg, "everything")
    assert stream.columns == EVERYTHING_COLUMNS
    assert stream.namespace == "public"
    assert stream.primary_key == ("id",)


async def test_a_composite_key_comes_in_key_order(
    admin: asyncpg.Connection, pg: PostgresConnector
) -> None:
    await admin.execute(
        "CREATE TABLE pairs (a int, b text, c int, note text, PRIMARY KEY (c, a, b))"
    )
    stream = await stream_named(pg, "pairs")
    assert stream.primary_key == ("c", "a", "b")
    assert [c.nullable for c in stream.columns] == [False, False, False, True]


async def test_discover_offers_views_materialized_views_and_partitioned_tables(
    admin: asyncpg.Connection, pg: PostgresConnector
) -> None:
    await admin.execute(
        """
        CREATE TABLE base (id int PRIMARY KEY, name text);
        CREATE VIEW base_view AS SELECT id, upper(name) AS loud FROM base;
        CREATE MATERIALIZED VIEW base_mat AS SELECT id, name FROM base;
        CREATE TABLE events (id int NOT NULL, kind text) PARTITION BY RANGE (id);
        CREATE TABLE events_low PARTITION OF events FOR VALUES FROM (0) TO (100);
        CREATE TABLE events_high PARTITION OF events FOR VALUES FROM (100) TO (MAXVALUE);
        CREATE SEQUENCE counter;
        CREATE INDEX base_name ON base (name);
        """
    )
    streams = {s.name: s for s in await pg.discover()}
    # A partition's rows are its parent's: offering both would copy them twice.
    assert sorted(streams) == ["base", "base_mat", "base_view", "events"]
    assert streams["base_view"].columns == (Column("id", "integer"), Column("loud", "text"))
    assert streams["base_view"].primary_key == ()
    assert streams["base_mat"].columns == (Column("id", "integer"), Column("name", "text"))
    assert streams["events"].columns == (
        Column("id", "integer", False),
        Column("kind", "text"),
    )


async def test_row_estimates_use_statistics_or_the_pages_a_table_fills(
    admin: asyncpg.Connection, pg: PostgresConnector
) -> None:
    # Autovacuum off: an ANALYZE of its own would turn the guess into a count.
    await admin.execute(
        """
        CREATE TABLE analysed (id int);
        INSERT INTO analysed SELECT generate_series(1, 500);
        ANALYZE analysed;
        CREATE TABLE unanalysed (id int, pad text) WITH (autovacuum_enabled = false);
        INSERT INTO unanalysed SELECT g, repeat('x', 100) FROM generate_series(1, 1000) g;
        CREATE TABLE untouched (id int) WITH (autovacuum_enabled = false);
        """
    )
    pages = await admin.fetchval(
        "SELECT pg_relation_size('unanalysed') / current_setting('block_size')::int"
    )
    assert pages > 1
    streams = {s.name: s for s in await pg.discover()}
    assert streams["analysed"].row_estimate == 500
    assert streams["unanalysed"].row_estimate == pages * FALLBACK_ROWS_PER_PAGE
    assert streams["untouched"].row_estimate == 0


async def test_discover_sees_only_the_configured_schema(
    url: str, admin: asyncpg.Connection
) -> None:
    await admin.execute(
        """
        CREATE TABLE mine (id int);
        CREATE SCHEMA sales; CREATE TABLE sales.orders (id int PRIMARY KEY, total numeric);
        CREATE TABLE sales.mine (other text);
        """
    )
    async with connected(url) as pg:
        streams = await pg.discover()
        assert [(s.namespace, s.name) for s in streams] == [("public", "mine")]
        assert streams[0].columns == (Column("id", "integer"),)
    async with connected(url, schema="sales") as pg:
        streams = await pg.discover()
        assert [(s.namespace, s.name) for s in streams] == [("sales", "mine"), ("sales", "orders")]
        assert streams[0].columns == (Column("other", "text"),)
        assert await pg.preview(streams[1], 10) == []


# -- preview and read -----------------------------------------------------------


async def test_preview_gives_neutral_values_up_to_the_limit(
    admin: asyncpg.Connection, pg: PostgresConnector
) -> None:
    await admin.execute(EVERYTHING_DDL)
    stream = await stream_named(pg, "everything")
    assert_everything(await pg.preview(stream, 10))
    assert len(await pg.preview(stream, 1)) == 1
    assert await pg.preview(stream, 0) == []


async def test_read_honours_the_batch_size(
    admin: asyncpg.Connection, pg: PostgresConnector
) -> None:
    await admin.execute(
        "CREATE TABLE numbers AS SELECT g AS id, g * 2 AS twice FROM generate_series(1, 25) g"
    )
    stream = await stream_named(pg, "numbers")
    batches = [batch async for batch in pg.read(stream, 10)]
    assert [len(b) for b in batches] == [10, 10, 5]
    assert by_id([row for b in batches for row in b]) == [(i, i * 2) for i in range(1, 26)]


async def test_read_gives_neutral_values(admin: asyncpg.Connection, pg: PostgresConnector) -> None:
    await admin.execute(EVERYTHING_DDL)
    stream = await stream_named(pg, "everything")
    batches = [batch async for batch in pg.read(stream, 1)]
    assert [len(b) for b in batches] == [1, 1]
    assert_everything([row for b in batches for row in b])


async def test_a_stream_without_a_locator_reads_by_column_names(
    admin: asyncpg.Connection, pg: PostgresConnector
) -> None:
    """A manifest's stream carries no locator; the columns are cast as staged."""
    await admin.execute(EVERYTHING_DDL)
    bare = Stream.from_dict((await stream_named(pg, "everything")).to_dict())
    assert bare.locator == {}
    assert_everything(await pg.preview(bare, 10))
    assert_everything([row async for batch in pg.read(bare, 5) for row in batch])
    assert_everything(await copied_rows(pg, bare, 5))


# -- copy_batches ---------------------------------------------------------------


async def collect(pg: PostgresConnector, stream: Stream, batch_rows: int) -> list[CopyBatch]:
    return [batch async for batch in pg.copy_batches(stream, batch_rows)]


def decoded(stream: Stream, batches: Sequence[CopyBatch]) -> list[Row]:
    rows: list[Row] = []
    for batch in batches:
        assert batch.data.startswith(pgcopy.SIGNATURE) and batch.data.endswith(pgcopy.TRAILER)
        part = pgcopy.decode(stream.columns, batch.data)
        assert len(part) == batch.rows
        rows.extend(part)
    return rows


async def copied_rows(pg: PostgresConnector, stream: Stream, batch_rows: int) -> list[Row]:
    return decoded(stream, await collect(pg, stream, batch_rows))


BIG_ROWS = 3000


async def make_big(admin: asyncpg.Connection, *, analyse: bool = True) -> list[Row]:
    await admin.execute(
        f"""
        CREATE TABLE big (id int PRIMARY KEY, payload text) WITH (autovacuum_enabled = false);
        INSERT INTO big SELECT g, repeat('x', 80) || g FROM generate_series(1, {BIG_ROWS}) g;
        """
    )
    if analyse:
        await admin.execute("ANALYZE big")
    return [(i, "x" * 80 + str(i)) for i in range(1, BIG_ROWS + 1)]


@pytest.mark.parametrize("analyse", [True, False])
async def test_a_table_comes_in_several_complete_copy_batches(
    admin: asyncpg.Connection, pg: PostgresConnector, analyse: bool
) -> None:
    expected = await make_big(admin, analyse=analyse)
    stream = await stream_named(pg, "big")
    batches = await collect(pg, stream, 500)
    assert len(batches) > 2
    assert sum(b.rows for b in batches) == BIG_ROWS
    assert all(b.rows > 0 for b in batches)
    assert by_id(decoded(stream, batches)) == expected


async def test_copy_batches_of_every_type_match_read(
    admin: asyncpg.Connection, pg: PostgresConnector
) -> None:
    await admin.execute(EVERYTHING_DDL)
    stream = await stream_named(pg, "everything")
    assert_everything(await copied_rows(pg, stream, 100))


async def test_an_empty_table_gives_no_rows(
    admin: asyncpg.Connection, pg: PostgresConnector
) -> None:
    await admin.execute("CREATE TABLE nothing (id int, name text)")
    stream = await stream_named(pg, "nothing")
    batches = await collect(pg, stream, 100)
    assert sum(b.rows for b in batches) == 0
    assert decoded(stream, batches) == []


async def test_views_and_partitioned_tables_are_read_in_encoded_batches(
    admin: asyncpg.Connection, pg: PostgresConnector
) -> None:
    await admin.execute(
        """
        CREATE TABLE events (id int NOT NULL, kind text, doc json) PARTITION BY RANGE (id);
        CREATE TABLE events_low PARTITION OF events FOR VALUES FROM (0) TO (10);
        CREATE TABLE events_high PARTITION OF events FOR VALUES FROM (10) TO (MAXVALUE);
        INSERT INTO events
            SELECT g, 'k' || g, json_build_object('n', g) FROM generate_series(1, 25) g;
        CREATE VIEW odd_events AS SELECT id, kind, doc FROM events WHERE id % 2 = 1;
        CREATE MATERIALIZED VIEW all_events AS SELECT id, kind FROM events;
        """
    )
    expected = [(i, f"k{i}", {"n": i}) for i in range(1, 26)]
    events = await stream_named(pg, "events")
    batches = await collect(pg, events, 10)
    assert [b.rows for b in batches] == [10, 10, 5]
    assert by_id(decoded(events, batches)) == expected

    view = await stream_named(pg, "odd_events")
    batches = await collect(pg, view, 4)
    assert [b.rows for b in batches] == [4, 4, 4, 1]
    assert by_id(decoded(view, batches)) == [r for r in expected if r[0] % 2 == 1]

    materialized = await stream_named(pg, "all_events")
    assert by_id(await copied_rows(pg, materialized, 10)) == [r[:2] for r in expected]


async def test_a_view_of_every_type_encodes_like_a_table_copies(
    admin: asyncpg.Connection, pg: PostgresConnector
) -> None:
    await admin.execute(EVERYTHING_DDL)
    await admin.execute("CREATE VIEW everything_view AS SELECT * FROM everything")
    view = await stream_named(pg, "everything_view")
    assert view.columns == tuple(
        Column(c.name, c.type, sql_type=c.sql_type) for c in EVERYTHING_COLUMNS
    )
    batches = await collect(pg, view, 1)
    assert [b.rows for b in batches] == [1, 1]
    assert_everything(decoded(view, batches))


async def test_copy_batches_read_one_snapshot(
    admin: asyncpg.Connection, pg: PostgresConnector
) -> None:
    expected = await make_big(admin)
    stream = await stream_named(pg, "big")
    batches = pg.copy_batches(stream, 500)
    first = await anext(batches)
    # Another session changes the table between two batches of the read.
    await admin.execute(
        """
        INSERT INTO big SELECT g, 'late' FROM generate_series(100001, 100300) g;
        DELETE FROM big WHERE id BETWEEN 2501 AND 3000;
        UPDATE big SET payload = 'changed' WHERE id <= 1000;
        """
    )
    rest = [batch async for batch in batches]
    assert rest
    assert by_id(decoded(stream, [first, *rest])) == expected
    assert await admin.fetchval("SELECT count(*) FROM big") == 2500 + 300


# -- write and write_copy: helpers ------------------------------------------------

PEOPLE = (
    Column("id", "bigint", False),
    Column("name", "text"),
    Column("amount", "numeric"),
    Column("doc", "json"),
    Column("seen", "timestamptz"),
)

SAME_TYPES_DDL = (
    "CREATE TABLE people (id bigint PRIMARY KEY, name text, amount numeric, doc jsonb, "
    "seen timestamptz)"
)
# Assignable, not identical: each column needs the INSERT … SELECT path.
OTHER_TYPES_DDL = (
    "CREATE TABLE people (id integer PRIMARY KEY, name varchar(50), amount numeric(10, 2), "
    "doc json, seen timestamptz)"
)

PLUS_TWO = timezone(timedelta(hours=2))


def people(ids: Sequence[int], tag: str = "v1") -> list[Row]:
    return [
        (
            i,
            f"{tag}-{i}",
            Decimal(i) / 4,
            {"n": i, "tag": tag, "list": [1, None]},
            datetime(2024, 1, 1, tzinfo=PLUS_TWO) + timedelta(hours=i),
        )
        for i in ids
    ]


def identity(columns: Sequence[Column]) -> Plan:
    return parse_spec(None).chain_for("people").plan(columns)


def chunks(rows: Sequence[Row], size: int) -> list[list[Row]]:
    return [list(rows[i : i + size]) for i in range(0, len(rows), size)]


async def batches_of(rows: Sequence[Row], size: int = 2) -> AsyncIterator[Batch]:
    for chunk in chunks(rows, size):
        yield chunk


async def parts_of(
    columns: Sequence[Column], rows: Sequence[Row], size: int = 2
) -> AsyncIterator[CopyBatch]:
    for chunk in chunks(rows, size):
        yield CopyBatch(pgcopy.encode(columns, chunk), len(chunk))


class SourceBroke(Exception):
    pass


async def breaking_parts(
    columns: Sequence[Column], rows: Sequence[Row]
) -> AsyncIterator[CopyBatch]:
    yield CopyBatch(pgcopy.encode(columns, rows), len(rows))
    raise SourceBroke("the source went away")


async def breaking_batches(rows: Sequence[Row]) -> AsyncIterator[Batch]:
    yield list(rows)
    raise SourceBroke("the source went away")


async def load(
    pg: PostgresConnector,
    how: str,
    rows: Sequence[Row],
    mode: WriteMode,
    key: Sequence[str] = ("id",),
    *,
    stream: str = "people",
    schema: str | None = None,
    columns: Sequence[Column] = PEOPLE,
    size: int = 2,
) -> int:
    if how == "write":
        batches = batches_of(rows, size)
        return await pg.write(stream, columns, batches, mode, key, schema=schema)
    plan = identity(columns)
    parts = parts_of(columns, rows, size)
    return await pg.write_copy(stream, columns, parts, plan, mode, key, schema=schema)


async def table_rows(admin: asyncpg.Connection, table: str = "people") -> list[Row]:
    return [tuple(r) for r in await admin.fetch(f"SELECT * FROM {table} ORDER BY 1")]


async def column_types(admin: asyncpg.Connection, table: str) -> list[tuple[str, str, bool]]:
    records = await admin.fetch(
        """
        SELECT attname, format_type(atttypid, atttypmod), attnotnull FROM pg_attribute
        WHERE attrelid = $1::regclass AND attnum > 0 AND NOT attisdropped ORDER BY attnum
        """,
        table,
    )
    return [(r[0], r[1], r[2]) for r in records]


async def primary_key(admin: asyncpg.Connection, table: str) -> list[str]:
    records = await admin.fetch(
        """
        SELECT a.attname FROM pg_index i, unnest(i.indkey) WITH ORDINALITY AS k(attnum, n)
        JOIN pg_attribute a ON a.attrelid = $1::regclass AND a.attnum = k.attnum
        WHERE i.indrelid = $1::regclass AND i.indisprimary ORDER BY k.n
        """,
        table,
    )
    return [r[0] for r in records]


HOWS = ["write", "write_copy"]
ALL_MODES = list(WriteMode)

# (mode, ids loaded as "v2" over ids 1-3 as "v1", the table afterwards)
MODE_CASES = [
    (WriteMode.APPEND, [4, 5], people([1, 2, 3]) + people([4, 5], "v2")),
    (WriteMode.OVERWRITE, [2, 3, 4], people([2, 3, 4], "v2")),
    (WriteMode.UPSERT, [2, 3, 4], people([1]) + people([2, 3, 4], "v2")),
    (WriteMode.MERGE, [2, 3, 4], people([2, 3, 4], "v2")),
]


# -- write and write_copy: modes and tables ------------------------------------------


@pytest.mark.parametrize("how", HOWS)
async def test_a_missing_table_is_created_with_its_primary_key(
    admin: asyncpg.Connection, pg: PostgresConnector, how: str
) -> None:
    rows = people(range(1, 6))
    assert await load(pg, how, rows, WriteMode.APPEND) == 5
    assert await column_types(admin, "people") == [
        ("id", "bigint", True),
        ("name", "text", False),
        ("amount", "numeric", False),
        ("doc", "jsonb", False),
        ("seen", "timestamp with time zone", False),
    ]
    assert await primary_key(admin, "people") == ["id"]
    assert await table_rows(admin) == rows


async def test_a_created_table_keeps_the_key_order(
    admin: asyncpg.Connection, pg: PostgresConnector
) -> None:
    columns = (Column("a", "integer"), Column("b", "text"), Column("c", "date"))
    rows = [(1, "x", date(2024, 1, 1)), (1, "y", date(2024, 1, 2))]
    written = await load(
        pg, "write_copy", rows, WriteMode.UPSERT, ("b", "a"), stream="pairs", columns=columns
    )
    assert written == 2
    assert await primary_key(admin, "pairs") == ["b", "a"]
    assert await table_rows(admin, "pairs") == rows


@pytest.mark.parametrize("how", HOWS)
@pytest.mark.parametrize("ddl", [SAME_TYPES_DDL, OTHER_TYPES_DDL], ids=["same", "assignable"])
@pytest.mark.parametrize(("mode", "ids", "expected"), MODE_CASES, ids=[m for m, _, _ in MODE_CASES])
async def test_modes_into_an_existing_table(
    admin: asyncpg.Connection,
    pg: PostgresConnector,
    how: str,
    ddl: str,
    mode: WriteMode,
    ids: list[int],
    expected: list[Row],
) -> None:
    await admin.execute(ddl)
    before = await column_types(admin, "people")
    assert await load(pg, "write_copy", people([1, 2, 3]), WriteMode.APPEND) == 3
    assert await load(pg, how, people(ids, "v2"), mode) == len(ids)
    assert await table_rows(admin) == expected
    # The destination's own types stay, json included (staged as jsonb).
    assert await column_types(admin, "people") == before


@pytest.mark.parametrize("how", HOWS)
async def test_a_table_with_other_column_order_and_extra_columns_takes_the_rows(
    admin: asyncpg.Connection, pg: PostgresConnector, how: str
) -> None:
    await admin.execute(
        "CREATE TABLE people (seen timestamptz, added text DEFAULT 'default', doc jsonb, "
        "amount numeric, name text, id bigint PRIMARY KEY)"
    )
    assert await load(pg, how, people([1, 2]), WriteMode.APPEND) == 2
    records = await admin.fetch("SELECT id, name, amount, doc, seen, added FROM people ORDER BY 1")
    assert [tuple(r) for r in records] == [(*row, "default") for row in people([1, 2])]


async def test_an_existing_json_column_stores_json_text(
    admin: asyncpg.Connection, pg: PostgresConnector
) -> None:
    await admin.execute(OTHER_TYPES_DDL)
    await load(pg, "write_copy", people([1]), WriteMode.APPEND)
    stored = await admin.fetchval("SELECT doc::text FROM people")
    assert stored == '{"n": 1, "tag": "v1", "list": [1, null]}'
    assert await admin.fetchval("SELECT json_typeof(doc) FROM people") == "object"


async def test_a_value_the_target_type_cannot_hold_fails_the_load(
    admin: asyncpg.Connection, pg: PostgresConnector
) -> None:
    await admin.execute(OTHER_TYPES_DDL)
    await load(pg, "write_copy", people([1]), WriteMode.APPEND)
    long_name = [(2, "x" * 51, None, None, None)]
    with pytest.raises(ProviderError, match=r'loading "public"\."people".*too long'):
        await load(pg, "write_copy", long_name, WriteMode.APPEND)
    assert await table_rows(admin) == people([1])


@pytest.mark.parametrize("how", HOWS)
async def test_upsert_keeps_the_last_of_a_key_repeated_in_one_load(
    admin: asyncpg.Connection, pg: PostgresConnector, how: str
) -> None:
    await admin.execute(SAME_TYPES_DDL)
    await load(pg, "write", people([1, 2]), WriteMode.APPEND)
    # Key 2 in two parts, key 5 three times within and across parts.
    loaded = people([2], "first") + people([5], "a") + people([5], "b") + people([2], "last")
    loaded += people([5], "c") + people([6], "v2")
    assert await load(pg, how, loaded, WriteMode.UPSERT, size=2) == len(loaded)
    assert await table_rows(admin) == (
        people([1]) + people([2], "last") + people([5], "c") + people([6], "v2")
    )


async def test_merge_with_a_composite_key_deletes_keys_that_left(
    admin: asyncpg.Connection, pg: PostgresConnector
) -> None:
    await admin.execute("CREATE TABLE pairs (a int, b text, n int, PRIMARY KEY (a, b))")
    await admin.execute("INSERT INTO pairs VALUES (1, 'x', 0), (1, 'y', 0), (2, 'x', 0)")
    columns = (Column("a", "integer"), Column("b", "text"), Column("n", "integer"))
    rows = [(1, "y", 5), (2, "x", 6), (3, "z", 7)]
    written = await load(
        pg, "write_copy", rows, WriteMode.MERGE, ("b", "a"), stream="pairs", columns=columns
    )
    assert written == 3
    assert sorted(await table_rows(admin, "pairs")) == rows


async def test_upsert_of_key_only_rows_inserts_the_new_keys(
    admin: asyncpg.Connection, pg: PostgresConnector
) -> None:
    await admin.execute("CREATE TABLE tags (tag text PRIMARY KEY); INSERT INTO tags VALUES ('a')")
    columns = (Column("tag", "text"),)
    rows = [("a",), ("b",), ("b",)]
    written = await load(
        pg, "write_copy", rows, WriteMode.UPSERT, ("tag",), stream="tags", columns=columns
    )
    assert written == 3
    assert await table_rows(admin, "tags") == [("a",), ("b",)]


# -- write_copy with an operator chain ----------------------------------------------

SPEC = {
    "operators": [
        {"op": "rename", "columns": {"name": "full_name"}},
        {"op": "filter", "where": "amount > 0.5"},
        {"op": "drop", "columns": ["doc"]},
        {"op": "constant", "column": "source", "value": "crm"},
    ]
}


def planned(ids: Sequence[int]) -> list[Row]:
    """people(ids) through SPEC, filter aside."""
    return [(i, name, amount, seen, "crm") for i, name, amount, _, seen in people(ids)]


async def test_a_chain_runs_inside_postgres_into_a_new_table(
    admin: asyncpg.Connection, pg: PostgresConnector
) -> None:
    plan = parse_spec(SPEC).chain_for("people").plan(PEOPLE)
    assert not plan.identity
    parts = parts_of(PEOPLE, people(range(1, 7)))
    assert await pg.write_copy("people", PEOPLE, parts, plan, WriteMode.APPEND, ()) == 4
    assert [name for name, _, _ in await column_types(admin, "people")] == [
        "id",
        "full_name",
        "amount",
        "seen",
        "source",
    ]
    assert await table_rows(admin) == planned(range(3, 7))


@pytest.mark.parametrize("mode", [WriteMode.UPSERT, WriteMode.MERGE])
async def test_a_chain_upserts_by_its_output_key(
    admin: asyncpg.Connection, pg: PostgresConnector, mode: WriteMode
) -> None:
    await admin.execute(
        "CREATE TABLE people (id bigint PRIMARY KEY, full_name varchar(40), amount numeric, "
        "seen timestamptz, source text, untouched text DEFAULT 'kept')"
    )
    await admin.execute(
        "INSERT INTO people (id, full_name) VALUES (1, 'old-1'), (3, 'old-3'), (9, 'old-9')"
    )
    plan = parse_spec(SPEC).chain_for("people").plan(PEOPLE)
    # Rows 1 and 2 are filtered out: merge deletes 1 and 9, upsert keeps them.
    parts = parts_of(PEOPLE, people(range(1, 6)))
    assert await pg.write_copy("people", PEOPLE, parts, plan, mode, ("id",)) == 3
    loaded = [(*row, "kept") for row in planned(range(3, 6))]
    untouched = [(1, "old-1", None, None, None, "kept"), (9, "old-9", None, None, None, "kept")]
    expected = loaded if mode is WriteMode.MERGE else by_id(untouched + loaded)
    assert await table_rows(admin) == expected


# -- errors the user sees -----------------------------------------------------------


@pytest.mark.parametrize("mode", [WriteMode.UPSERT, WriteMode.MERGE])
@pytest.mark.parametrize(
    "index",
    [
        "",
        "CREATE UNIQUE INDEX wider ON people (id, name)",
        "CREATE UNIQUE INDEX partial ON people (id) WHERE id > 0",
        "CREATE UNIQUE INDEX expression ON people (id, lower(name))",
        "ALTER TABLE people ADD CONSTRAINT deferred UNIQUE (id) DEFERRABLE INITIALLY DEFERRED",
    ],
    ids=["none", "wider", "partial", "expression", "deferrable"],
)
async def test_a_key_without_a_usable_unique_index_is_refused(
    admin: asyncpg.Connection, pg: PostgresConnector, mode: WriteMode, index: str
) -> None:
    await admin.execute(
        "CREATE TABLE people (id bigint, name text, amount numeric, doc jsonb, seen timestamptz)"
    )
    if index:
        await admin.execute(index)
    await admin.execute("INSERT INTO people (id, name) VALUES (1, 'old')")
    with pytest.raises(ProviderError, match=r"needs a primary key or unique index on \(id\)"):
        await load(pg, "write_copy", people([1, 2]), mode)
    assert await table_rows(admin) == [(1, "old", None, None, None)]


async def test_a_unique_index_in_another_column_order_serves_the_key(
    admin: asyncpg.Connection, pg: PostgresConnector
) -> None:
    await admin.execute(
        "CREATE TABLE people (id bigint, name text, amount numeric, doc jsonb, seen timestamptz);"
        "CREATE UNIQUE INDEX by_name_id ON people (name, id)"
    )
    assert await load(pg, "write", people([1, 2]), WriteMode.UPSERT, ("id", "name")) == 2
    assert await table_rows(admin) == people([1, 2])


@pytest.mark.parametrize("mode", [WriteMode.UPSERT, WriteMode.MERGE])
async def test_a_keyed_mode_without_a_key_is_a_config_error(
    pg: PostgresConnector, mode: WriteMode
) -> None:
    with pytest.raises(ConfigError, match=f"write mode {mode.value} needs a key"):
        await load(pg, "write_copy", people([1]), mode, ())


@pytest.mark.parametrize("how", HOWS)
async def test_a_missing_destination_column_is_named(
    admin: asyncpg.Connection, pg: PostgresConnector, how: str
) -> None:
    await admin.execute("CREATE TABLE people (id bigint PRIMARY KEY, doc jsonb)")
    await admin.execute("INSERT INTO people VALUES (1, '{}')")
    with pytest.raises(ProviderError, match=r"has no column\(s\) name, amount, seen"):
        await load(pg, how, people([2]), WriteMode.APPEND)
    assert await table_rows(admin) == [(1, {})]


@pytest.mark.parametrize("how", HOWS)
@pytest.mark.parametrize("mode", [WriteMode.APPEND, WriteMode.UPSERT])
async def test_a_schema_the_pipeline_names_is_written_into(
    admin: asyncpg.Connection, pg: PostgresConnector, how: str, mode: WriteMode
) -> None:
    await admin.execute("CREATE SCHEMA archive")
    assert await load(pg, how, people([1, 2]), mode, stream="people", schema="archive") == 2
    assert await table_rows(admin, "archive.people") == people([1, 2])
    assert await admin.fetchval("SELECT to_regclass('public.people')") is None


@pytest.mark.parametrize("how", HOWS)
@pytest.mark.parametrize("stream", ["archive.people", 'archive"."people', '"archive"."people"'])
async def test_a_dotted_or_quoted_stream_is_one_table_in_the_configured_schema(
    admin: asyncpg.Connection, pg: PostgresConnector, how: str, stream: str
) -> None:
    await admin.execute("CREATE SCHEMA archive")
    assert await load(pg, how, people([1, 2]), WriteMode.UPSERT, stream=stream) == 2
    quoted = '"' + stream.replace('"', '""') + '"'
    assert await table_rows(admin, f"public.{quoted}") == people([1, 2])
    assert await admin.fetchval("SELECT count(*) FROM pg_tables WHERE schemaname = 'archive'") == 0


async def test_a_missing_schema_is_a_provider_error(pg: PostgresConnector) -> None:
    with pytest.raises(ProviderError, match="nowhere"):
        await load(pg, "write_copy", people([1]), WriteMode.APPEND, schema="nowhere")


async def test_odd_table_and_column_names_are_quoted(
    admin: asyncpg.Connection, pg: PostgresConnector
) -> None:
    columns = (Column('the "id"', "integer", False), Column("first name", "text"))
    rows = [(1, "a"), (2, "b")]
    await admin.execute('CREATE SCHEMA "odd ""schema"""')
    for how in HOWS:
        written = await load(
            pg,
            how,
            rows,
            WriteMode.OVERWRITE,
            ('the "id"',),
            stream='we"ird',
            schema='odd "schema"',
            columns=columns,
        )
        assert written == 2
    assert await table_rows(admin, '"odd ""schema"""."we""ird"') == rows
    stream = Stream('we"ird', columns, namespace='odd "schema"')
    assert by_id(await copied_rows(pg, stream, 10)) == rows


# -- atomicity --------------------------------------------------------------------

# Not an identity: the load goes through the staging table.
FILTERED = parse_spec({"operators": [{"op": "filter", "where": "id > 0"}]}).chain_for("people")


@pytest.mark.parametrize("path", ["write", "fast copy", "staged copy"])
@pytest.mark.parametrize("mode", ALL_MODES)
async def test_a_failing_source_leaves_the_table_as_it_was(
    admin: asyncpg.Connection, pg: PostgresConnector, mode: WriteMode, path: str
) -> None:
    await admin.execute(SAME_TYPES_DDL)
    await load(pg, "write_copy", people([1, 2, 3]), WriteMode.APPEND)
    before = await table_rows(admin)
    with pytest.raises(SourceBroke):
        if path == "write":
            await pg.write("people", PEOPLE, breaking_batches(people([4, 5])), mode, ("id",))
        else:
            plan = identity(PEOPLE) if path == "fast copy" else FILTERED.plan(PEOPLE)
            parts = breaking_parts(PEOPLE, people([4, 5]))
            await pg.write_copy("people", PEOPLE, parts, plan, mode, ("id",))
    assert await table_rows(admin) == before
    # The connector is still fit for the next load.
    assert await load(pg, "write_copy", people([7]), WriteMode.APPEND) == 1


@pytest.mark.parametrize("how", HOWS)
async def test_a_failed_load_into_a_new_table_leaves_no_table(
    admin: asyncpg.Connection, pg: PostgresConnector, how: str
) -> None:
    with pytest.raises(SourceBroke):
        if how == "write":
            await pg.write("people", PEOPLE, breaking_batches(people([1])), WriteMode.APPEND, ())
        else:
            parts = breaking_parts(PEOPLE, people([1]))
            await pg.write_copy("people", PEOPLE, parts, identity(PEOPLE), WriteMode.APPEND, ())
    assert await admin.fetchval("SELECT to_regclass('people')") is None


@pytest.mark.parametrize("mode", ALL_MODES)
async def test_a_part_whose_row_count_disagrees_is_refused(
    admin: asyncpg.Connection, pg: PostgresConnector, mode: WriteMode
) -> None:
    await admin.execute(SAME_TYPES_DDL)
    await load(pg, "write_copy", people([1]), WriteMode.APPEND)

    async def lying() -> AsyncIterator[CopyBatch]:
        yield CopyBatch(pgcopy.encode(PEOPLE, people([2, 3, 4])), 5)

    with pytest.raises(ProviderError, match="holds 3 rows where its manifest says 5"):
        await pg.write_copy("people", PEOPLE, lying(), identity(PEOPLE), mode, ("id",))
    assert await table_rows(admin) == people([1])


# -- PostgreSQL to PostgreSQL ---------------------------------------------------------


async def test_copy_batches_load_into_another_database_unchanged(
    pg_server_url: str, admin: asyncpg.Connection, pg: PostgresConnector
) -> None:
    await admin.execute(EVERYTHING_DDL)
    source = await stream_named(pg, "everything")
    async with scratch_database(pg_server_url) as other, connected(other) as target:
        plan = parse_spec(None).chain_for("everything").plan(source.columns)
        parts = pg.copy_batches(source, 1)
        written = await target.write_copy(
            "everything", source.columns, parts, plan, WriteMode.UPSERT, source.primary_key
        )
        assert written == 2
        landed = await stream_named(target, "everything")
        assert landed.primary_key == ("id",)
        assert [c.type for c in landed.columns] == [c.type for c in EVERYTHING_COLUMNS]
        assert_everything(await target.preview(landed, 10))


# -- task failures: permanent or transient (docs/errors.md) -------------------

APPEND_FIX = "use write_mode upsert or overwrite, or clear the table"


@pytest.mark.parametrize("how", HOWS)
async def test_a_duplicate_key_under_append_is_permanent_and_names_the_fix(
    admin: asyncpg.Connection, pg: PostgresConnector, how: str
) -> None:
    await load(pg, how, people([1, 2]), WriteMode.APPEND)
    with pytest.raises(PermanentError) as info:
        await load(pg, how, people([2, 3]), WriteMode.APPEND)
    assert not info.value.retryable
    assert APPEND_FIX in str(info.value)
    assert await table_rows(admin) == people([1, 2])


async def test_a_refused_login_is_permanent_and_names_the_fields_to_check(url: str) -> None:
    config = {**postgres_config(url), "user": "nobody_setu_knows", "password": "hunter2-value"}
    with pytest.raises(PermanentError) as info:
        await PROVIDER.connect(config)
    assert info.value.fields == ("config.user", "config.password")
    assert "hunter2-value" not in str(info.value)
    assert "refused the login" in str(info.value)


async def test_a_runtime_names_the_secret_to_check_never_its_value(url: str) -> None:
    config = {
        **postgres_config(url),
        "user": "nobody_setu_knows",
        "password": {"$secret": "PG_PASSWORD"},
    }
    ctx = TaskContext(LeasedTask("t", "j", "migrate", 1, 3, "token"))
    secrets = SecretStore({"PG_PASSWORD": "hunter2-value"})
    with pytest.raises(PermanentError) as info:
        await open_connector(ctx, "postgres", config, secrets, None)
    message = str(info.value)
    assert "check config.user and the secret PG_PASSWORD (config.password)" in message
    assert "hunter2-value" not in message


@pytest.mark.parametrize(
    ("extra", "fix"),
    [
        ({"database": "no_such_database_here"}, "check config.database"),
        ({"schema": "nowhere"}, None),
    ],
)
async def test_a_missing_database_or_schema_is_permanent(
    url: str, extra: dict[str, Any], fix: str | None
) -> None:
    with pytest.raises(PermanentError, match=fix or "the schema does not exist: create it"):
        async with connected(url, **extra) as pg:
            await load(pg, "write_copy", people([1]), WriteMode.APPEND)


@pytest.mark.parametrize("how", HOWS)
async def test_a_destination_column_mismatch_is_permanent(
    admin: asyncpg.Connection, pg: PostgresConnector, how: str
) -> None:
    await admin.execute("CREATE TABLE people (id bigint PRIMARY KEY, doc jsonb)")
    with pytest.raises(PermanentError, match="drop the table so the load creates it"):
        await load(pg, how, people([2]), WriteMode.APPEND)


async def test_a_value_the_column_cannot_hold_is_permanent(
    admin: asyncpg.Connection, pg: PostgresConnector
) -> None:
    await admin.execute("CREATE TABLE people (id bigint, name varchar(2))")
    columns = [Column("id", "bigint", False), Column("name", "text")]
    parts = parts_of(columns, [(1, "far too long")], 10)
    with pytest.raises(PermanentError, match="does not fit its column"):
        await pg.write_copy("people", columns, parts, identity(columns), WriteMode.APPEND, ())


async def test_a_refused_connection_is_transient(closed_port: int) -> None:
    config = {
        "host": "127.0.0.1",
        "port": closed_port,
        "database": "nowhere",
        "user": "reader",
        "ssl": "disable",
        "connect_timeout": 2,
    }
    with pytest.raises(TransientError) as info:
        await PROVIDER.connect(config)
    assert info.value.retryable


async def test_a_refused_first_connect_is_an_outage_that_lost_no_session(
    closed_port: int,
) -> None:
    # The runtime grants it a free retry only in an outage streak (docs/errors.md).
    config = {
        "host": "127.0.0.1",
        "port": closed_port,
        "database": "nowhere",
        "user": "reader",
        "ssl": "disable",
        "connect_timeout": 2,
    }
    with pytest.raises(OutageError) as info:
        await PROVIDER.connect(config)
    assert info.value.lost is False


async def test_a_lock_held_past_the_lock_timeout_is_transient(
    url: str, admin: asyncpg.Connection
) -> None:
    # 55P03 (lock not available) is one of the failures another attempt
    # fixes, like a deadlock or a serialization failure.
    await admin.execute("CREATE TABLE people (id bigint PRIMARY KEY, name text)")
    database = postgres_config(url)["database"]
    await admin.execute(f"ALTER DATABASE \"{database}\" SET lock_timeout = '20ms'")
    async with connected(url) as pg, admin.transaction():
        await admin.execute("LOCK TABLE people IN ACCESS EXCLUSIVE MODE")
        with pytest.raises(TransientError, match="lock") as info:
            columns = [Column("id", "bigint", False), Column("name", "text")]
            parts = parts_of(columns, [(1, "a")], 10)
            await pg.write_copy("people", columns, parts, identity(columns), WriteMode.APPEND, ())
    assert info.value.retryable
