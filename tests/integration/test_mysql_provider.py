"""The mysql provider's connector on a real MariaDB server (tests/mariadb.py):
connecting without ambient credentials, TLS modes, the egress policy,
discovery and its exact type mapping, every type's values read back
exactly, reads in key batches in one snapshot, resumed reads, incremental
reads by cursor, preview, errors classified from real server errors, and a
round trip through the write side (write.py, tested on its own in
test_mysql_writes.py).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import ipaddress
import uuid
from collections.abc import AsyncIterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from setu_engine.errors import (
    ConfigError,
    OutageError,
    PermanentError,
    TransientError,
    ValueFault,
)
from setu_engine.kinds import WriteMode
from setu_engine.providers import get_provider
from setu_engine.providers.mysql.connector import MysqlConnector
from setu_engine.providers.mysql.failures import mysql_error
from setu_engine.support.egress import AddressPolicy
from setu_engine.values.special import JSON_NULL
from setu_engine.values.types import Batch, Column, Stream
from setu_engine.values.window import Since
from tests.mariadb import MySQLDatabase

pytestmark = pytest.mark.asyncio

UTC = dt.UTC
LOOPBACK = AddressPolicy(allow=(ipaddress.ip_network("127.0.0.0/8"),))


async def connect(db: MySQLDatabase, **overrides: Any) -> MysqlConnector:
    connector = await get_provider("mysql").connect(db.config() | overrides)
    assert isinstance(connector, MysqlConnector)
    return connector


async def stream_of(connector: MysqlConnector, name: str) -> Stream:
    found = {s.name: s for s in await connector.discover()}
    return found[name]


async def aclose(reader: Any) -> None:
    """Closes a reader midway, as a transfer that stops does."""
    await reader.aclose()


async def read_all(connector: MysqlConnector, stream: Stream, batch_rows: int = 1000) -> Batch:
    rows: Batch = []
    async for batch in connector.read(stream, batch_rows):
        rows.extend(batch)
    return rows


# -- connecting ---------------------------------------------------------------


async def test_test_names_flavour_version_place_and_tables(mysql_database: MySQLDatabase) -> None:
    db = mysql_database
    await db.execute("CREATE TABLE a (id int PRIMARY KEY)", "CREATE TABLE b (id int)")
    connector = await connect(db)
    try:
        said = await connector.test()
    finally:
        await connector.close()
    host, port = db.server.host, db.server.port
    assert said.startswith("MariaDB 10.")
    assert f"at {host}:{port}/{db.name} (2 tables)" in said
    assert connector.flavour == "mariadb" and connector.version >= (10, 11, 0)


async def test_the_session_is_utc_utf8mb4_strict_and_not_autocommit(
    mysql_database: MySQLDatabase,
) -> None:
    connector = await connect(mysql_database)
    try:
        async with connector.conn.cursor() as cursor:
            await cursor.execute(
                "SELECT @@session.time_zone, @@character_set_client, @@autocommit, "
                "@@session.sql_mode"
            )
            zone, charset, autocommit, mode = await cursor.fetchone()
    finally:
        await connector.close()
    assert (zone, charset, autocommit) == ("+00:00", "utf8mb4", 0)
    assert "STRICT_ALL_TABLES" in mode and "NO_ZERO_DATE" in mode


async def test_no_ambient_credentials_mysql_pwd_and_my_cnf_are_never_read(
    mysql_database: MySQLDatabase, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The right password in MYSQL_PWD and in ~/.my.cnf (user and password):
    a config without a password is still refused by the server."""
    db = mysql_database
    server = db.server
    monkeypatch.setenv("MYSQL_PWD", server.password)
    monkeypatch.setenv("HOME", str(tmp_path))
    options = f"[client]\nuser={server.user}\npassword={server.password}\n"
    (tmp_path / ".my.cnf").write_text(options)
    (tmp_path / ".mylogin.cnf").write_text(options)
    config = {k: v for k, v in db.config().items() if k != "password"}
    with pytest.raises(PermanentError) as caught:
        await get_provider("mysql").connect(config)
    assert "1045" in str(caught.value)
    assert caught.value.fields == ("config.user", "config.password")
    # With the password in the config, the same connection passes.
    connector = await connect(db)
    await connector.close()


async def test_a_wrong_password_is_permanent_naming_the_login_fields(
    mysql_database: MySQLDatabase,
) -> None:
    with pytest.raises(PermanentError) as caught:
        await connect(mysql_database, password="not-the-password")
    assert "check config.user and the password" in str(caught.value)
    assert caught.value.fields == ("config.user", "config.password")
    assert "not-the-password" not in str(caught.value)


async def test_an_unknown_database_is_permanent_naming_config_database(
    mysql_database: MySQLDatabase,
) -> None:
    with pytest.raises(PermanentError, match=r"1049.*check config\.database"):
        await connect(mysql_database, database="no_such_database")


async def test_a_refused_connection_is_an_outage_of_a_first_connect(
    mysql_database: MySQLDatabase,
) -> None:
    import socket

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(OutageError) as caught:
        await connect(mysql_database, port=port, connect_timeout=5)
    assert caught.value.lost is False
    assert f"127.0.0.1:{port}" in str(caught.value)


async def test_ssl_prefer_falls_back_to_plain_and_require_refuses_a_server_without_tls(
    mysql_database: MySQLDatabase,
) -> None:
    db = mysql_database
    assert await db.fetchval("SELECT @@have_ssl") != "YES"  # the test server has no TLS
    connector = await connect(db, ssl="prefer")
    try:
        assert (await connector.test()).startswith("MariaDB")
    finally:
        await connector.close()
    for mode in ("require", "verify-ca", "verify-full"):
        with pytest.raises(PermanentError) as caught:
            await connect(db, ssl=mode)
        assert "config.ssl" in str(caught.value), mode
    plain = await connect(db, ssl="disable")
    await plain.close()


async def test_the_cloud_connects_only_to_an_address_egress_vetted(
    mysql_database: MySQLDatabase,
) -> None:
    db = mysql_database
    provider = get_provider("mysql")
    # The default policy refuses loopback, in any spelling.
    for host in ("127.0.0.1", "localhost", "127.1"):
        with pytest.raises(ConfigError, match=r"config\.host"):
            await provider.connect(db.config(host=host), AddressPolicy())

    class Pinned:
        """Answers one vetted address for any name, as a DNS pin would."""

        asked: list[tuple[str, int, str]] = []

        async def address(self, host: str, port: int, field: str) -> str:
            self.asked.append((host, port, field))
            return "127.0.0.1"

    pinned = Pinned()
    # A name that resolves nowhere: only the vetted address is dialled.
    config = db.config(host="mysql.invalid")
    connector = await provider.connect(config, pinned)
    try:
        assert "mysql.invalid" in await connector.test()
    finally:
        await connector.close()
    assert pinned.asked == [("mysql.invalid", db.server.port, "config.host")]
    allowed = await provider.connect(db.config(host="localhost"), LOOPBACK)
    await allowed.close()


# -- discover ---------------------------------------------------------------

EVERY_TYPE = """
CREATE TABLE every_type (
    id int NOT NULL,
    flag tinyint(1) NULL,
    tiny tinyint NOT NULL DEFAULT 0,
    utiny tinyint unsigned NULL,
    small smallint NULL,
    usmall smallint unsigned NULL,
    medium mediumint NULL,
    umedium mediumint unsigned NULL,
    whole int NULL,
    uwhole int unsigned NULL,
    big bigint NULL,
    ubig bigint unsigned NULL,
    amount decimal(12,2) NULL,
    wide decimal(65,30) NULL,
    plain_decimal decimal NULL,
    ratio float NULL,
    exact double NULL,
    name varchar(20) NOT NULL DEFAULT '',
    code char(5) NULL,
    bin_text varchar(20) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL,
    body longtext NULL,
    mood enum('sad','ok','happy') NULL,
    tags set('a','b','c') NULL,
    raw varbinary(16) NULL,
    fixed binary(4) NULL,
    blobby blob NULL,
    bit1 bit(1) NULL,
    bits bit(10) NULL,
    born date NULL,
    alarm time NULL,
    alarm6 time(6) NULL,
    seen datetime(6) NULL,
    seen0 datetime NULL,
    stamp timestamp(6) NULL DEFAULT NULL,
    yr year NULL,
    doc json NULL,
    ident uuid NULL,
    addr inet6 NULL,
    PRIMARY KEY (id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4
"""

EXPECTED_COLUMNS = (
    Column("id", "integer", False),
    Column("flag", "boolean", True),
    Column("tiny", "smallint", False),
    Column("utiny", "smallint", True),
    Column("small", "smallint", True),
    Column("usmall", "integer", True),
    Column("medium", "integer", True),
    Column("umedium", "integer", True),
    Column("whole", "integer", True),
    Column("uwhole", "bigint", True),
    Column("big", "bigint", True),
    Column("ubig", "numeric", True, "numeric(20,0)"),
    Column("amount", "numeric", True, "numeric(12,2)"),
    Column("wide", "numeric", True, "numeric(65,30)"),
    Column("plain_decimal", "numeric", True, "numeric(10,0)"),
    Column("ratio", "real", True),
    Column("exact", "double", True),
    Column("name", "text", False, "character varying(20)"),
    Column("code", "text", True, "character(5)"),
    Column("bin_text", "text", True, "character varying(20)"),
    Column("body", "text", True),
    Column("mood", "text", True),
    Column("tags", "text", True),
    Column("raw", "bytes", True),
    Column("fixed", "bytes", True),
    Column("blobby", "bytes", True),
    Column("bit1", "boolean", True),
    Column("bits", "bytes", True),
    Column("born", "date", True),
    Column("alarm", "time", True, "time(0) without time zone"),
    Column("alarm6", "time", True, "time(6) without time zone"),
    Column("seen", "timestamp", True, "timestamp(6) without time zone"),
    Column("seen0", "timestamp", True, "timestamp(0) without time zone"),
    Column("stamp", "timestamptz", True, "timestamp(6) with time zone"),
    Column("yr", "smallint", True),
    Column("doc", "json", True),
    Column("ident", "uuid", True),
    Column("addr", "text", True),
)


async def test_discover_maps_every_type_exactly(mysql_database: MySQLDatabase) -> None:
    db = mysql_database
    await db.execute(EVERY_TYPE)
    connector = await connect(db)
    try:
        stream = await stream_of(connector, "every_type")
    finally:
        await connector.close()
    assert stream.columns == EXPECTED_COLUMNS
    assert stream.primary_key == ("id",)
    assert stream.namespace == db.name


async def test_discover_offers_views_keys_in_key_order_and_skips_setus_own_tables(
    mysql_database: MySQLDatabase,
) -> None:
    db = mysql_database
    await db.execute(
        "CREATE TABLE pairs (a int NOT NULL, b varchar(10) NOT NULL, v int, PRIMARY KEY (b, a))",
        "CREATE VIEW pair_view AS SELECT a, v FROM pairs",
        "CREATE TABLE `_setu_loads` (run_id varchar(64) PRIMARY KEY)",
        "CREATE TABLE `_setu_stage_0123456789abcdef0123` (x int)",
        "CREATE TABLE `we``ird name` (`col ``x``` int)",
    )
    connector = await connect(db)
    try:
        streams = {s.name: s for s in await connector.discover()}
        assert set(streams) == {"pairs", "pair_view", "we`ird name"}
        assert streams["pairs"].primary_key == ("b", "a")
        assert streams["pair_view"].primary_key == ()
        assert [c.name for c in streams["pair_view"].columns] == ["a", "v"]
        await db.execute("INSERT INTO `we``ird name` VALUES (7)")
        assert await read_all(connector, streams["we`ird name"]) == [(7,)]
    finally:
        await connector.close()


# -- values -------------------------------------------------------------------

SCRIPTS = "Latin é, Ελληνικά, Кириллица, العربية, עברית, 中文字, हिन्दी, 🎉👩‍💻"
WIDE_MAX = Decimal("99999999999999999999999999999999999.999999999999999999999999999999")
# Negated by hand: Decimal's context (28 digits) would round -WIDE_MAX.
WIDE_MIN = Decimal("-" + str(WIDE_MAX))
UBIG_MAX = 18446744073709551615


async def every_type_rows(db: MySQLDatabase) -> None:
    await db.execute(EVERY_TYPE)
    conn = await db.connect()
    try:
        async with conn.cursor() as cursor:
            # Inserted at +05:30: a timestamp is stored in UTC and reads as UTC.
            await cursor.execute("SET time_zone = '+05:30'")
            await cursor.execute(
                "INSERT INTO every_type VALUES (1, 1, -128, 255, -32768, 65535, -8388608, "
                "16777215, -2147483648, 4294967295, -9223372036854775808, %s, -9999999999.99, "
                "%s, 1234567890, 0.1, 1.7976931348623157e308, %s, 'ab', 'Ab ', %s, 'happy', "
                "'a,c', x'00ff10', 'ab', x'deadbeef', b'1', b'1010101010', '1000-01-01', "
                "'23:59:59', '23:59:59.999999', '9999-12-31 23:59:59.999999', "
                "'1000-01-01 00:00:00', '2024-03-01 05:30:00.123456', 2155, "
                '\'{"a": [1, 2.5, "x"], "n": null, "big": 12345678901234567890}\', '
                "'0b5c1a1e-2f8a-4c4e-9b1a-5d6c7e8f9a0b', '2001:db8::1')",
                (UBIG_MAX, str(WIDE_MAX), SCRIPTS[:20], SCRIPTS * 500),
            )
            await cursor.execute(
                "INSERT INTO every_type (id, flag, tiny, utiny, big, ubig, wide, ratio, exact, "
                "name, body, bit1, born, alarm, seen, stamp, doc) VALUES (2, 0, 127, 0, "
                "9223372036854775807, 0, %s, -0.0, -2.2250738585072014e-308, '', '', b'0', "
                "'9999-12-31', '00:00:00', '1000-01-01 00:00:00', '1970-01-01 05:30:01', 'null')",
                (str(WIDE_MIN),),
            )
            await cursor.execute("INSERT INTO every_type (id) VALUES (3)")
    finally:
        conn.close()
        await conn.ensure_closed()


async def test_every_types_values_read_back_exactly(mysql_database: MySQLDatabase) -> None:
    db = mysql_database
    await every_type_rows(db)
    # Whatever the server's own zone: its global zone moved too.
    await db.server.execute("SET GLOBAL time_zone = '-07:00'")
    try:
        connector = await connect(db)
        try:
            stream = await stream_of(connector, "every_type")
            rows = await read_all(connector, stream)
        finally:
            await connector.close()
    finally:
        await db.server.execute("SET GLOBAL time_zone = 'SYSTEM'")
    names = [c.name for c in stream.columns]
    first, second, third = (dict(zip(names, row, strict=True)) for row in rows)
    assert first == {
        "id": 1,
        "flag": True,
        "tiny": -128,
        "utiny": 255,
        "small": -32768,
        "usmall": 65535,
        "medium": -8388608,
        "umedium": 16777215,
        "whole": -2147483648,
        "uwhole": 4294967295,
        "big": -9223372036854775808,
        "ubig": Decimal(UBIG_MAX),
        "amount": Decimal("-9999999999.99"),
        "wide": WIDE_MAX,
        "plain_decimal": Decimal(1234567890),
        # The float4 nearest 0.1, exactly (as PostgreSQL's real reads).
        "ratio": 0.10000000149011612,
        "exact": 1.7976931348623157e308,
        "name": SCRIPTS[:20],
        "code": "ab",
        "bin_text": "Ab ",
        "body": SCRIPTS * 500,
        "mood": "happy",
        "tags": "a,c",
        "raw": b"\x00\xff\x10",
        "fixed": b"ab\x00\x00",
        "blobby": b"\xde\xad\xbe\xef",
        "bit1": True,
        "bits": b"\x02\xaa",
        "born": dt.date(1000, 1, 1),
        "alarm": dt.time(23, 59, 59),
        "alarm6": dt.time(23, 59, 59, 999999),
        "seen": dt.datetime(9999, 12, 31, 23, 59, 59, 999999),
        "seen0": dt.datetime(1000, 1, 1),
        "stamp": dt.datetime(2024, 3, 1, 0, 0, 0, 123456, tzinfo=UTC),
        "yr": 2155,
        "doc": {"a": [1, 2.5, "x"], "n": None, "big": 12345678901234567890},
        "ident": uuid.UUID("0b5c1a1e-2f8a-4c4e-9b1a-5d6c7e8f9a0b"),
        "addr": "2001:db8::1",
    }
    assert type(first["flag"]) is bool and type(first["bit1"]) is bool
    assert second["flag"] is False and second["bit1"] is False
    assert second["wide"] == WIDE_MIN and second["ubig"] == Decimal(0)
    assert second["big"] == 9223372036854775807 and second["utiny"] == 0
    # MariaDB stores -0.0 as 0 (checked with its own client): zero it is.
    assert second["ratio"] == 0.0
    assert second["exact"] == -2.2250738585072014e-308
    assert (second["name"], second["body"]) == ("", "")
    assert second["born"] == dt.date(9999, 12, 31) and second["alarm"] == dt.time(0)
    assert second["stamp"] == dt.datetime(1970, 1, 1, 0, 0, 1, tzinfo=UTC)
    assert second["doc"] is JSON_NULL
    # A row of defaults and NULLs: NULL is None in every type.
    assert {k: v for k, v in third.items() if v is not None} == {"id": 3, "tiny": 0, "name": ""}


async def test_zero_dates_read_as_null_where_the_column_takes_null(
    mysql_database: MySQLDatabase,
) -> None:
    db = mysql_database
    await db.execute(
        "SET SESSION sql_mode = ''",
        "CREATE TABLE z (id int PRIMARY KEY, d date NULL, t datetime NULL, s timestamp NULL, "
        "strict_d date NOT NULL)",
        "SET SESSION sql_mode = ''",
    )
    conn = await db.connect()
    try:
        async with conn.cursor() as cursor:
            await cursor.execute("SET SESSION sql_mode = ''")
            await cursor.execute(
                "INSERT INTO z VALUES (1, '0000-00-00', '0000-00-00 00:00:00', "
                "'0000-00-00 00:00:00', '2020-01-02'), (2, '2020-00-10', '2020-01-00 10:00:00', "
                "NULL, '2020-01-03')"
            )
            await cursor.execute("INSERT INTO z VALUES (3, NULL, NULL, NULL, '0000-00-00')")
    finally:
        conn.close()
        await conn.ensure_closed()
    connector = await connect(db)
    try:
        stream = await stream_of(connector, "z")
        batches = connector.read(stream, 2)
        assert await anext(batches) == [
            (1, None, None, None, dt.date(2020, 1, 2)),
            (2, None, None, None, dt.date(2020, 1, 3)),
        ]
        with pytest.raises(ValueFault) as caught:
            await anext(batches)
    finally:
        await connector.close()
    message = str(caught.value)
    assert "stream 'z'" in message and "column 'strict_d'" in message and "row 3" in message
    assert "zero date" in message


async def test_a_float_reads_as_exactly_its_float4_at_its_edges(
    mysql_database: MySQLDatabase,
) -> None:
    """The text protocol prints a float with 6 digits (3.40282e38): the read
    asks for the double of its exact value instead."""
    import struct

    edges = [3.4028234663852886e38, -3.4028234663852886e38, 1.1754943508222875e-38, 1.4e-45, 0.1]
    db = mysql_database
    await db.execute("CREATE TABLE f (id int PRIMARY KEY, x float)")
    conn = await db.connect()
    try:
        async with conn.cursor() as cursor:
            for index, value in enumerate(edges):
                await cursor.execute("INSERT INTO f VALUES (%s, %s)", (index, value))
    finally:
        conn.close()
        await conn.ensure_closed()
    connector = await connect(db)
    try:
        rows = await read_all(connector, await stream_of(connector, "f"))
    finally:
        await connector.close()
    f4 = struct.Struct("<f")
    assert [x for _, x in rows] == [f4.unpack(f4.pack(v))[0] for v in edges]


@pytest.mark.parametrize(
    ("ddl", "value", "words"),
    [
        ("tinyint(1)", "2", "neither 0 nor 1"),
        ("tinyint(1)", "-1", "neither 0 nor 1"),
        ("time", "'-00:00:01'", "not a time of day"),
        ("time", "'24:00:00'", "not a time of day"),
        ("time", "'838:59:59'", "not a time of day"),
    ],
)
async def test_a_value_the_neutral_type_cannot_hold_is_a_value_fault(
    mysql_database: MySQLDatabase, ddl: str, value: str, words: str
) -> None:
    db = mysql_database
    await db.execute(
        f"CREATE TABLE v (id int PRIMARY KEY, x {ddl})",
        f"INSERT INTO v VALUES (1, NULL), (2, {value})",
    )
    connector = await connect(db)
    try:
        stream = await stream_of(connector, "v")
        with pytest.raises(ValueFault) as caught:
            await read_all(connector, stream)
    finally:
        await connector.close()
    message = str(caught.value)
    assert "stream 'v'" in message and "column 'x'" in message and "row 2" in message
    assert words in message


# -- reads in batches, one snapshot, resumed ------------------------------------


async def numbered(db: MySQLDatabase, rows: int, table: str = "n") -> None:
    await db.execute(
        f"CREATE TABLE {table} (grp int NOT NULL, id int NOT NULL, v varchar(10), "
        "PRIMARY KEY (grp, id))",
        f"INSERT INTO {table} SELECT seq % 3, seq, concat('v', seq) FROM seq_1_to_{rows}",
    )


def expected(rows: int) -> list[tuple[Any, ...]]:
    return sorted((i % 3, i, f"v{i}") for i in range(1, rows + 1))


async def test_a_keyed_table_reads_in_batches_in_key_order(mysql_database: MySQLDatabase) -> None:
    db = mysql_database
    await numbered(db, 25)
    connector = await connect(db)
    try:
        stream = await stream_of(connector, "n")
        sizes, rows = [], []
        async for batch in connector.read(stream, 10):
            sizes.append(len(batch))
            rows.extend(batch)
        assert sizes == [10, 10, 5]
        assert rows == expected(25)
        assert connector.rows_read == 25
    finally:
        await connector.close()


async def test_a_read_after_a_position_gives_exactly_the_rest(
    mysql_database: MySQLDatabase,
) -> None:
    db = mysql_database
    await numbered(db, 25)
    connector = await connect(db)
    try:
        stream = await stream_of(connector, "n")
        assert await connector.resumes(stream)
        first: list[tuple[Batch, str]] = []
        async for batch, position in connector.read_after(stream, 7, None):
            first.append((batch, position))
        assert [len(b) for b, _ in first] == [7, 7, 7, 4]
        # Resume after the second batch, as a retried extract would.
        rest: Batch = []
        async for batch, _ in connector.read_after(stream, 7, first[1][1]):
            rest.extend(batch)
        assert rest == expected(25)[14:]
        with pytest.raises(PermanentError, match="resume position"):
            async for _ in connector.read_after(stream, 7, '[1, "1 OR 1=1", 3]'):
                pass
    finally:
        await connector.close()


@pytest.mark.parametrize(
    ("ddl", "values"),
    [
        ("varchar(20) COLLATE utf8mb4_nopad_bin", ["a", "a ", "A", "b'c", "z\\", "ä", "🎉"]),
        ("varbinary(8)", [b"\x00", b"\x00\x01", b"'", b"\xff"]),
        ("decimal(30,10)", [Decimal("-1.5"), Decimal("0"), Decimal("12345678901234567890.1")]),
        ("datetime(6)", [dt.datetime(2020, 1, 1), dt.datetime(2020, 1, 1, 0, 0, 0, 1)]),
        ("bigint unsigned", [1, 2**63, 2**64 - 1]),
        ("double", [-1.5, 0.1, 1e300]),
    ],
)
async def test_a_resumed_read_continues_after_a_key_of_any_type(
    mysql_database: MySQLDatabase, ddl: str, values: list[Any]
) -> None:
    db = mysql_database
    await db.execute(f"CREATE TABLE k (id {ddl} NOT NULL PRIMARY KEY)")
    conn = await db.connect()
    try:
        async with conn.cursor() as cursor:
            for value in values:
                await cursor.execute("INSERT INTO k VALUES (%s)", (value,))
    finally:
        conn.close()
        await conn.ensure_closed()
    connector = await connect(db)
    try:
        stream = await stream_of(connector, "k")
        seen: Batch = []
        position = None
        while True:  # one row per read, each resumed after the last
            batches = connector.read_after(stream, 1, position)
            try:
                batch, position = await anext(batches)
            except StopAsyncIteration:
                break
            finally:
                await aclose(batches)
            seen.extend(batch)
            assert len(seen) <= len(values)
        assert len(seen) == len(values)
        assert len(set(seen)) == len(values)
    finally:
        await connector.close()


async def test_a_key_of_an_enum_is_read_whole_in_its_own_order_never_by_ranges(
    mysql_database: MySQLDatabase,
) -> None:
    """An enum orders by its place in the declaration ('z' before 'a') but
    `>` compares it as text: a key range after 'z' would lose 'a'."""
    db = mysql_database
    await db.execute(
        "CREATE TABLE e (k enum('z','m','a') NOT NULL PRIMARY KEY, v int)",
        "INSERT INTO e VALUES ('a', 1), ('z', 2), ('m', 3)",
    )
    connector = await connect(db)
    try:
        stream = await stream_of(connector, "e")
        assert not await connector.resumes(stream)
        batches = [batch async for batch in connector.read(stream, 1)]
    finally:
        await connector.close()
    assert sorted(row for batch in batches for row in batch) == [("a", 1), ("m", 3), ("z", 2)]


async def test_a_read_sees_one_snapshot_whatever_commits_between_batches(
    mysql_database: MySQLDatabase,
) -> None:
    db = mysql_database
    await numbered(db, 30)
    connector = await connect(db)
    try:
        # Whatever the session's own isolation: a consistent snapshot needs
        # REPEATABLE READ, which the read asks for itself.
        async with connector.conn.cursor() as cursor:
            await cursor.execute("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")
        stream = await stream_of(connector, "n")
        batches = connector.read(stream, 10)
        rows = list(await anext(batches))
        # Between batches, another session commits an insert beyond the
        # read's position, a delete and an update ahead of it.
        await db.execute(
            "INSERT INTO n VALUES (2, 1000, 'new')",
            "DELETE FROM n WHERE grp = 2 AND id = 29",
            "UPDATE n SET v = 'changed' WHERE grp = 1",
        )
        async for batch in batches:
            rows.extend(batch)
        assert rows == expected(30)
        # A new read sees them.
        now = await read_all(connector, stream)
        assert (2, 1000, "new") in now and (2, 29, "v29") not in now
    finally:
        await connector.close()


async def test_a_table_without_a_key_streams_in_batches(mysql_database: MySQLDatabase) -> None:
    db = mysql_database
    await db.execute(
        "CREATE TABLE loose (v int)", "INSERT INTO loose SELECT seq FROM seq_1_to_2500"
    )
    connector = await connect(db)
    try:
        stream = await stream_of(connector, "loose")
        assert not await connector.resumes(stream)
        sizes: list[int] = []
        values: list[int] = []
        async for batch in connector.read(stream, 1000):
            sizes.append(len(batch))
            values.extend(v for (v,) in batch)
        assert sizes == [1000, 1000, 500]
        assert sorted(values) == list(range(1, 2501))
    finally:
        await connector.close()


async def test_a_read_closed_mid_way_leaves_the_session_usable(
    mysql_database: MySQLDatabase,
) -> None:
    db = mysql_database
    await db.execute(
        "CREATE TABLE loose (v int)", "INSERT INTO loose SELECT seq FROM seq_1_to_5000"
    )
    await numbered(db, 50)
    connector = await connect(db)
    try:
        for name in ("loose", "n"):
            stream = await stream_of(connector, name)
            batches = connector.read(stream, 10)
            assert len(await anext(batches)) == 10
            await aclose(batches)
        assert len(await read_all(connector, await stream_of(connector, "n"))) == 50
        async with connector.conn.cursor() as cursor:
            await cursor.execute("SELECT @@in_transaction")
            assert (await cursor.fetchone())[0] == 0
    finally:
        await connector.close()


async def test_preview_gives_neutral_values_up_to_the_limit(
    mysql_database: MySQLDatabase,
) -> None:
    db = mysql_database
    await numbered(db, 25)
    connector = await connect(db)
    try:
        stream = await stream_of(connector, "n")
        assert await connector.preview(stream, 4) == expected(25)[:4]
        assert await connector.preview(stream, 0) == []
    finally:
        await connector.close()


# -- incremental by cursor -----------------------------------------------------


async def test_an_incremental_read_takes_the_window_and_reports_its_high(
    mysql_database: MySQLDatabase,
) -> None:
    db = mysql_database
    await db.execute(
        "CREATE TABLE ev (id bigint PRIMARY KEY, at datetime(6) NOT NULL, big bigint NOT NULL)",
        "INSERT INTO ev VALUES (1, '2024-01-01 00:00:00', 9007199254740993), "
        "(2, '2024-01-02 00:00:00.5', 9007199254740994), (3, '2024-01-03 00:00:00', "
        "9007199254740995)",
    )
    connector = await connect(db)
    try:
        stream = await stream_of(connector, "ev")
        first = Since("at", "timestamp")
        high, count = await connector.cursor_high(_with(stream, first))
        assert (high, count) == ("2024-01-03 00:00:00.000000", 3)
        window = Since("at", "timestamp", "2024-01-02 00:00:00.5", high=high, inclusive=False)
        assert [r[0] for r in await read_all(connector, _with(stream, window))] == [3]
        window = Since("at", "timestamp", "2024-01-02 00:00:00.5", high=high)
        assert [r[0] for r in await read_all(connector, _with(stream, window))] == [2, 3]
        # An integer past 2**53 compares as an integer, not as a double.
        big = Since("big", "bigint", "9007199254740993", inclusive=False)
        high, count = await connector.cursor_high(_with(stream, big))
        assert (high, count) == ("9007199254740995", 2)
        bounded = Since("big", "bigint", "9007199254740993", high="9007199254740994")
        assert [r[0] for r in await read_all(connector, _with(stream, bounded))] == [1, 2]
        empty = Since("big", "bigint", "9007199254740995", inclusive=False, empty=True)
        assert await read_all(connector, _with(stream, empty)) == []
        assert not await connector.resumes(_with(stream, window))
    finally:
        await connector.close()


def _with(stream: Stream, since: Since) -> Stream:
    import dataclasses

    return dataclasses.replace(stream, since=since)


# -- errors ------------------------------------------------------------------


async def test_a_missing_table_is_permanent_naming_discover(mysql_database: MySQLDatabase) -> None:
    db = mysql_database
    await db.execute("CREATE TABLE gone (id int PRIMARY KEY)")
    connector = await connect(db)
    try:
        stream = await stream_of(connector, "gone")
        await db.execute("DROP TABLE gone")
        with pytest.raises(PermanentError, match=r"1146.*run discover"):
            await connector.preview(stream, 1)
        with pytest.raises(PermanentError, match="1146"):
            await read_all(connector, stream)
    finally:
        await connector.close()


async def test_a_real_deadlock_and_lock_wait_timeout_are_transient(
    mysql_database: MySQLDatabase,
) -> None:
    db = mysql_database
    await db.execute(
        "CREATE TABLE locks (id int PRIMARY KEY, v int)", "INSERT INTO locks VALUES (1, 0), (2, 0)"
    )
    a, b = await db.connect(), await db.connect()
    try:
        async with a.cursor() as ca, b.cursor() as cb:
            for cursor in (ca, cb):
                await cursor.execute("SET SESSION innodb_lock_wait_timeout = 1")
                await cursor.execute("BEGIN")
            await ca.execute("UPDATE locks SET v = 1 WHERE id = 1")
            await cb.execute("UPDATE locks SET v = 2 WHERE id = 2")
            # Each asks for the other's row: whichever order the server sees
            # the two requests in, the second closes the cycle and InnoDB
            # picks a victim; the other then gets its row.
            outcomes = await asyncio.gather(
                ca.execute("UPDATE locks SET v = 1 WHERE id = 2"),
                cb.execute("UPDATE locks SET v = 2 WHERE id = 1"),
                return_exceptions=True,
            )
            errors = [e for e in outcomes if isinstance(e, BaseException)]
            codes = [e.args[0] for e in errors]
            assert 1213 in codes, codes
            for exc in errors:
                assert isinstance(mysql_error(exc, "mysql: writing"), TransientError)
            await ca.execute("ROLLBACK")
            await cb.execute("ROLLBACK")
            # A lock wait timeout: b holds the row, a waits a second for it.
            await cb.execute("BEGIN")
            await cb.execute("UPDATE locks SET v = 3 WHERE id = 1")
            await ca.execute("BEGIN")
            with pytest.raises(Exception) as caught:
                await ca.execute("UPDATE locks SET v = 4 WHERE id = 1")
            assert caught.value.args[0] == 1205
            assert isinstance(mysql_error(caught.value, "mysql: writing"), TransientError)
            await cb.execute("ROLLBACK")
    finally:
        for conn in (a, b):
            conn.close()
            await conn.ensure_closed()


async def test_a_duplicate_key_under_append_is_permanent_with_postgres_hint(
    mysql_database: MySQLDatabase,
) -> None:
    db = mysql_database
    await db.execute("CREATE TABLE t (id bigint PRIMARY KEY, name longtext)")
    await db.execute("INSERT INTO t VALUES (1, 'a')")
    connector = await connect(db)
    columns = [Column("id", "bigint", False), Column("name", "text")]
    try:
        with pytest.raises(PermanentError) as caught:
            await connector.write("t", columns, _batches([(1, "again")]), WriteMode.APPEND, [])
    finally:
        await connector.close()
    assert "1062" in str(caught.value)
    assert "a row repeats a unique key of the destination table: use write_mode upsert" in str(
        caught.value
    )
    assert await db.fetch("SELECT * FROM t") == [(1, "a")]


async def _batches(*parts: Batch) -> AsyncIterator[Batch]:
    for part in parts:
        yield part


# -- a round trip: read side -> write side -> read side ------------------------


async def test_a_round_trip_through_the_write_side_keeps_every_value(
    mysql_database: MySQLDatabase,
) -> None:
    db = mysql_database
    await every_type_rows(db)
    connector, writer = await connect(db), await connect(db)
    try:
        source = await stream_of(connector, "every_type")
        rows = await read_all(connector, source, 2)

        async def batches() -> AsyncIterator[Batch]:
            async for batch in connector.read(source, 2):
                yield batch

        # Read by one session while another writes, as a run does.
        written = await writer.write("copy", source.columns, batches(), WriteMode.UPSERT, ["id"])
        assert written == 3
        copied = await stream_of(connector, "copy")
        assert [c.name for c in copied.columns] == [c.name for c in source.columns]
        assert copied.primary_key == ("id",)
        again = await read_all(connector, copied)
    finally:
        await connector.close()
        await writer.close()
    # Every column lands as the type it was read as: a timestamptz (in a
    # datetime(6) holding UTC) and a uuid (a char(36)) by their comments.
    assert [c.type for c in copied.columns] == [c.type for c in source.columns]
    names = [c.name for c in source.columns]
    for before, after in zip(rows, again, strict=True):
        for name, b, a in zip(names, before, after, strict=True):
            assert (name, a) == (name, b)


# -- a staged extract resumes after its stored parts (setu_engine/movement/transfer.py)


class Books:
    """A reporter that keeps the run's books as a runtime would."""

    def __init__(self) -> None:
        self.stored_parts: list[Any] = []
        self.notes: list[str] = []
        self.extracted_rows = 0

    async def extracted(self, stream: str, rows: int) -> None:
        self.extracted_rows += rows

    async def loaded(self, stream: str, rows: int) -> None:
        pass

    def stored(self, part: Any) -> None:
        self.stored_parts.append(part)

    async def note(self, stream: str, message: str) -> None:
        self.notes.append(message)


async def test_a_staged_extract_resumes_after_the_last_key_it_stored(
    mysql_database: MySQLDatabase, tmp_path: Path
) -> None:
    from setu_engine.movement import transfer
    from setu_engine.staged import pgcopy, staging
    from setu_engine.staged.blob import LocalBlobStore

    db = mysql_database
    await numbered(db, 1000)
    connector = await connect(db)
    try:
        streams = [await stream_of(connector, "n")]
        blob = LocalBlobStore(tmp_path / "blob")
        first = Books()
        await transfer.stage(connector, streams, blob, "run/", first, 100)
        assert connector.rows_read == 1000 and len(first.stored_parts) == 10
        again = Books()
        manifest = await transfer.stage(
            connector, streams, blob, "run/", again, 100, earlier=first.stored_parts[:6]
        )
        assert connector.rows_read - 1000 == 400  # only the rows after part 5's last key
        assert [p.number for p in again.stored_parts] == [6, 7, 8, 9]
        assert any("resuming the extract at part 6" in n for n in again.notes), again.notes
        stream = manifest.streams[0]
        rows = []
        async for part in staging.read_parts(blob, "run/", stream):
            rows += pgcopy.decode(stream.stream.columns, part.data)
        assert rows == expected(1000)
    finally:
        await connector.close()


async def test_an_existing_datetime_column_takes_a_timestamptz_stream_in_utc(
    mysql_database: MySQLDatabase,
) -> None:
    """MySQL's datetime is where instants are kept (its timestamp ends in
    2038): a table of the user's own with one takes a timestamptz, in UTC."""
    from setu_engine.planning.destination_plan import takes

    db = mysql_database
    await db.execute("CREATE TABLE ev (id int PRIMARY KEY, at datetime(6) NOT NULL)")
    connector = await connect(db)
    at = Column("at", "timestamptz", False)
    try:
        shape = await connector.inspect_table("ev", None)
        assert shape.columns is not None
        existing = {c.name: c for c in shape.columns}["at"]
        assert takes(existing, at) and takes(existing, Column("at", "timestamp", False))
        assert not takes(existing, Column("at", "boolean", False))
        moment = dt.datetime(2024, 5, 1, 12, 0, tzinfo=dt.timezone(dt.timedelta(hours=5)))
        id_ = Column("id", "integer", False)
        await connector.write("ev", [id_, at], _batches([(1, moment)]), WriteMode.UPSERT, ["id"])
    finally:
        await connector.close()
    assert await db.fetch("SELECT at FROM ev") == [(dt.datetime(2024, 5, 1, 7, 0),)]


# -- TLS, on a MariaDB of this module's own with a certificate ------------------


@pytest.fixture(scope="module")
def tls_mariadb(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """A MariaDB serving TLS with a certificate of a private CA for
    127.0.0.1 and localhost (tests/certs.py); the session's has no TLS."""
    import subprocess
    import time

    from tests import mariadb
    from tests.certs import make_pki

    if mariadb.mariadbd_binary() is None:
        pytest.skip("MariaDB is not installed: run scripts/ensure_test_tools.sh")
    folder = tmp_path_factory.mktemp("tls-mariadb")
    pki = make_pki(folder / "pki")
    own = mariadb.OwnMariaDB(folder / "server")
    own.install()
    command = [
        str(mariadb.mariadbd_binary()),
        "--no-defaults",
        *own._as_root(),
        f"--datadir={own.data}",
        f"--socket={own.socket}",
        f"--port={own.port}",
        "--bind-address=127.0.0.1",
        f"--init-file={own.folder / 'init.sql'}",
        "--skip-name-resolve",
        "--skip-log-bin",
        f"--ssl-cert={pki.server.cert}",
        f"--ssl-key={pki.server.key}",
        f"--ssl-ca={pki.ca}",
    ]
    with own.log.open("ab") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + mariadb.START_DEADLINE
        while not mariadb._run(mariadb._answers(own.server)):
            assert process.poll() is None, f"mariadbd exited; see {own.log}"
            assert time.monotonic() < deadline, f"mariadbd did not answer; see {own.log}"
            time.sleep(0.05)  # server startup, not a test's wait
        yield own.server, pki.ca
    finally:
        process.terminate()
        process.wait(mariadb.STOP_DEADLINE)


class _Pinned:
    """An egress that vets any name to 127.0.0.1, as the cloud's would."""

    async def address(self, host: str, port: int, field: str) -> str:
        return "127.0.0.1"


async def test_tls_modes_on_a_server_with_tls_and_the_configured_name_is_verified(
    tls_mariadb: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    server, ca = tls_mariadb
    provider = get_provider("mysql")
    base = {
        "host": "127.0.0.1",
        "port": server.port,
        "user": server.user,
        "password": server.password,
        "database": "mysql",
    }

    async def cipher(config: dict[str, Any], egress: Any = None) -> str:
        connector = await provider.connect(config, egress)
        assert isinstance(connector, MysqlConnector)
        try:
            async with connector.conn.cursor() as cursor:
                await cursor.execute("SHOW SESSION STATUS LIKE 'Ssl_version'")
                return str((await cursor.fetchone())[1])
        finally:
            await connector.close()

    assert await cipher(base | {"ssl": "disable"}) == ""
    assert (await cipher(base | {"ssl": "prefer"})).startswith("TLS")
    assert (await cipher(base | {"ssl": "require"})).startswith("TLS")
    # An unknown CA is refused by the verifying modes, naming config.ssl.
    with pytest.raises(PermanentError) as caught:
        await cipher(base | {"ssl": "verify-ca"})
    assert caught.value.fields == ("config.ssl",)
    monkeypatch.setenv("SSL_CERT_FILE", str(ca))  # the operator's trust store
    assert (await cipher(base | {"ssl": "verify-ca"})).startswith("TLS")
    # Through a vetted address, the configured name is what is verified:
    # the certificate names localhost and 127.0.0.1, not wrong.example.
    named = base | {"ssl": "verify-full", "host": "localhost"}
    assert (await cipher(named, _Pinned())).startswith("TLS")
    with pytest.raises(PermanentError, match=r"config\.ssl"):
        await cipher(named | {"host": "wrong.example"}, _Pinned())
