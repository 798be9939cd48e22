"""The mysql provider's write side (setu_engine/providers/mysql/write.py) on
a real MariaDB server (tests/mariadb.py): every write mode with its exact
counts, all or nothing (rows and shape), load markers, the LOAD DATA and
INSERT paths, the LOCAL INFILE guard, refused values, hostile names and
cancellation.

The writer here is the MysqlWrites mixin over a connection set up as the
connector sets its own up (UTC, utf8mb4, strict sql_mode, autocommit off).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import uuid
from collections.abc import AsyncIterator
from decimal import Decimal
from typing import Any

import pytest

from setu_engine.errors import PermanentError, ValueFault
from setu_engine.kinds import RowChanges, WriteMode, changes_of
from setu_engine.planning.destination_plan import SchemaChanges
from setu_engine.providers.mysql import infile
from setu_engine.providers.mysql.write import MysqlWrites
from setu_engine.staged.markers import LoadMarker
from setu_engine.values.types import Batch, Column
from tests.mariadb import MySQLDatabase

pytestmark = pytest.mark.asyncio

SESSION = (
    "SET time_zone = '+00:00'",
    "SET NAMES utf8mb4",
    "SET SESSION sql_mode = 'STRICT_ALL_TABLES,NO_ZERO_DATE,NO_ZERO_IN_DATE,"
    "NO_ENGINE_SUBSTITUTION,ERROR_FOR_DIVISION_BY_ZERO'",
)


class Writer(MysqlWrites):
    def __init__(self, conn: Any, database: str, version: str, local_infile: bool) -> None:
        self.conn = conn
        self.database = database
        self.flavour = "mariadb" if "mariadb" in version.lower() else "mysql"
        self.version = tuple(int(p) for p in version.split("-")[0].split(".")[:3])
        self.local_infile = local_infile


async def writer(db: MySQLDatabase, *, local_infile: bool = True) -> Writer:
    if local_infile:
        assert infile.install_guard()
    conn = await db.server.connect(db.name, local_infile=local_infile)
    await conn.autocommit(False)
    async with conn.cursor() as cursor:
        for statement in SESSION:
            await cursor.execute(statement)
        await cursor.execute("SELECT VERSION()")
        (version,) = await cursor.fetchone()
    await conn.commit()
    return Writer(conn, db.name, str(version), local_infile)


async def close(w: Writer) -> None:
    w.conn.close()
    await w.conn.ensure_closed()


async def batches(*parts: Batch) -> AsyncIterator[Batch]:
    for part in parts:
        yield part


ID = Column("id", "bigint", False)
NAME = Column("name", "text", True)
COLUMNS = [ID, NAME]


async def rows_of(db: MySQLDatabase, table: str = "t") -> list[tuple[Any, ...]]:
    return await db.fetch(f"SELECT * FROM `{table}` ORDER BY 1")


async def columns_of(db: MySQLDatabase, table: str = "t") -> list[str]:
    found = await db.fetch(
        "SELECT COLUMN_NAME FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = %s "
        "AND TABLE_NAME = %s ORDER BY ORDINAL_POSITION",
        (db.name, table),
    )
    return [r[0] for r in found]


async def tables_of(db: MySQLDatabase) -> set[str]:
    found = await db.fetch(
        "SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s", (db.name,)
    )
    return {r[0] for r in found}


@pytest.mark.parametrize("local_infile", [True, False], ids=["load-data", "insert"])
async def test_every_mode_counts_exactly(mysql_database: MySQLDatabase, local_infile: bool) -> None:
    db = mysql_database
    w = await writer(db, local_infile=local_infile)
    try:
        first = await w.write(
            "t", COLUMNS, batches([(1, "a"), (2, "b")], [(3, "c")]), WriteMode.APPEND, ["id"]
        )
        assert first == 3 and changes_of(first) == RowChanges(3)
        # 1 unchanged, 2 changed, 4 new.
        up = await w.write(
            "t", COLUMNS, batches([(1, "a"), (2, "B"), (4, "d")]), WriteMode.UPSERT, ["id"]
        )
        assert changes_of(up) == RowChanges(1, 1, 1)
        assert await rows_of(db) == [(1, "a"), (2, "B"), (3, "c"), (4, "d")]
        # 3 and 4 leave; 1 unchanged, 2 changed, 5 new.
        merged = await w.write(
            "t", COLUMNS, batches([(1, "a"), (2, "b2"), (5, None)]), WriteMode.MERGE, ["id"]
        )
        assert changes_of(merged) == RowChanges(1, 1, 1, 2)
        assert await rows_of(db) == [(1, "a"), (2, "b2"), (5, None)]
        over = await w.write("t", COLUMNS, batches([(9, "z")]), WriteMode.OVERWRITE, [])
        assert changes_of(over) == RowChanges(1)
        assert await rows_of(db) == [(9, "z")]
        # Nothing of the writes' own tables is left behind, nor their registrations.
        assert await tables_of(db) == {"t", "_setu_loads"}
        assert await db.fetch("SELECT part FROM _setu_loads") == []
    finally:
        await close(w)


async def test_text_keys_differing_in_case_or_trailing_space_are_rows_of_their_own(
    mysql_database: MySQLDatabase,
) -> None:
    db = mysql_database
    w = await writer(db)
    code = Column("code", "text", False)
    try:
        keys = [("a",), ("A",), ("a ",), ("ä",)]
        await w.write("t", [code], batches(keys), WriteMode.APPEND, ["code"])
        up = await w.write("t", [code], batches(keys), WriteMode.UPSERT, ["code"])
        assert changes_of(up) == RowChanges(0, 0, 4)
        assert sorted(r[0] for r in await db.fetch("SELECT code FROM t")) == ["A", "a", "a ", "ä"]
    finally:
        await close(w)


async def test_failure_on_a_later_batch_leaves_rows_and_shape(
    mysql_database: MySQLDatabase,
) -> None:
    db = mysql_database
    await db.execute("CREATE TABLE t (id bigint PRIMARY KEY, name longtext)")
    await db.execute("INSERT INTO t VALUES (1, 'a')")
    score = Column("score", "double", True)
    w = await writer(db)
    try:
        changes = SchemaChanges("t", columns=(score,))
        good = [(i, "x", 1.5) for i in range(2, 100)]
        with pytest.raises(ValueFault) as caught:
            await w.write(
                "t",
                [ID, NAME, score],
                batches(good, [(100, "y", float("nan"))]),
                WriteMode.UPSERT,
                ["id"],
                changes=changes,
            )
        message = str(caught.value)
        assert "'t'" in message and "'score'" in message and "row 99" in message
        assert await rows_of(db) == [(1, "a")]
        assert await columns_of(db) == ["id", "name"]
        assert await tables_of(db) == {"t", "_setu_loads"}
    finally:
        await close(w)


async def test_failure_in_the_apply_takes_the_added_columns_back(
    mysql_database: MySQLDatabase,
) -> None:
    db = mysql_database
    await db.execute("CREATE TABLE t (id bigint PRIMARY KEY, name longtext)")
    await db.execute("INSERT INTO t VALUES (1, 'a')")
    extra = Column("extra", "text", True)
    w = await writer(db)
    try:
        # Duplicate key under append: the apply's INSERT fails after the
        # column was added.
        with pytest.raises(PermanentError):
            await w.write(
                "t",
                [ID, NAME, extra],
                batches([(2, "b", "e"), (1, "dup", "e")]),
                WriteMode.APPEND,
                [],
                changes=SchemaChanges("t", columns=(extra,)),
            )
        assert await rows_of(db) == [(1, "a")]
        assert await columns_of(db) == ["id", "name"]
    finally:
        await close(w)


async def test_a_failed_first_write_leaves_no_table(mysql_database: MySQLDatabase) -> None:
    db = mysql_database
    w = await writer(db)
    try:
        with pytest.raises(PermanentError):
            await w.write("t", COLUMNS, batches([(1, "a"), (1, "b")]), WriteMode.APPEND, ["id"])
        assert "t" not in await tables_of(db)
    finally:
        await close(w)


async def test_schema_evolution_adds_the_column(mysql_database: MySQLDatabase) -> None:
    db = mysql_database
    await db.execute("CREATE TABLE t (id bigint PRIMARY KEY, name longtext)")
    await db.execute("INSERT INTO t VALUES (1, 'a')")
    extra = Column("extra", "integer", True)
    w = await writer(db)
    try:
        written = await w.write(
            "t",
            [ID, NAME, extra],
            batches([(2, "b", 7)]),
            WriteMode.APPEND,
            [],
            changes=SchemaChanges("t", columns=(extra,)),
        )
        assert written == 1
        assert await rows_of(db) == [(1, "a", None), (2, "b", 7)]
    finally:
        await close(w)


async def test_a_marked_write_writes_nothing_the_second_time(
    mysql_database: MySQLDatabase,
) -> None:
    db = mysql_database
    w = await writer(db)
    marker = LoadMarker(uuid.uuid4().hex, "t")
    try:
        first = await w.write(
            "t", COLUMNS, batches([(1, "a"), (2, "b")]), WriteMode.APPEND, [], marker=marker
        )
        again = await w.write(
            "t", COLUMNS, batches([(3, "c")]), WriteMode.APPEND, [], marker=marker
        )
        assert first == 2 and again == 2
        assert await rows_of(db) == [(1, "a"), (2, "b")]
        assert await w.marked(marker) == 2
        # Streams 't' and 't ' are two streams: their markers are two.
        assert await w.marked(LoadMarker(marker.run_id, "t ")) is None
        over = LoadMarker(marker.run_id, "t", "")
        over = LoadMarker(uuid.uuid4().hex, "t")
        await w.write("t", COLUMNS, batches([(5, "e")]), WriteMode.OVERWRITE, [], marker=over)
        assert await w.write("t", COLUMNS, batches([]), WriteMode.OVERWRITE, [], marker=over) == 1
        assert await rows_of(db) == [(5, "e")]
    finally:
        await close(w)


@pytest.mark.parametrize(
    "rows",
    [[(1, "abc"), (2, "abcd")], [(1, "abc"), (2, None)], [(3, "abc"), (1, "dup")]],
    ids=["too-long", "null", "duplicate"],
)
async def test_an_append_into_an_existing_table_refuses_what_it_cannot_hold(
    mysql_database: MySQLDatabase, rows: list[tuple[Any, ...]]
) -> None:
    # LOAD DATA LOCAL straight into the target only warns of a value cut
    # short, a NULL made a default or a row skipped for its key: the write
    # must fail on it and keep nothing, marker included.
    db = mysql_database
    await db.execute("CREATE TABLE t (id bigint PRIMARY KEY, name varchar(3) NOT NULL)")
    await db.execute("INSERT INTO t VALUES (1, 'a')")
    w = await writer(db)
    marker = LoadMarker(uuid.uuid4().hex, "t")
    try:
        with pytest.raises(PermanentError) as caught:
            await w.write(
                "t", COLUMNS, batches([(9, "x")], rows), WriteMode.APPEND, [], marker=marker
            )
        assert "'name'" in str(caught.value) or "1062" in str(caught.value)
        assert await rows_of(db) == [(1, "a")]
        assert await w.marked(marker) is None
    finally:
        await close(w)


async def test_an_append_into_an_existing_table_failing_on_a_later_batch_keeps_nothing(
    mysql_database: MySQLDatabase,
) -> None:
    # More rows than one LOAD DATA takes (write.LOAD_ROWS): pieces load while
    # the next renders; a refused value later rolls all of them back.
    db = mysql_database
    await db.execute("CREATE TABLE t (id bigint PRIMARY KEY, name longtext, score double)")
    await db.execute("INSERT INTO t VALUES (1, 'a', NULL)")
    score = Column("score", "double", True)
    w = await writer(db)
    marker = LoadMarker(uuid.uuid4().hex, "t")
    try:
        good = [(i, "x", 1.5) for i in range(2, 30_002)]
        with pytest.raises(ValueFault) as caught:
            await w.write(
                "t",
                [ID, NAME, score],
                batches([(40_000, "y", 2.5)], [*good, (40_001, "z", float("nan"))]),
                WriteMode.APPEND,
                [],
                marker=marker,
            )
        message = str(caught.value)
        assert "'t'" in message and "'score'" in message and "row 30002" in message
        assert await rows_of(db) == [(1, "a", None)]
        assert await w.marked(marker) is None
    finally:
        await close(w)


EVERY = [
    Column("id", "integer", False),
    Column("flag", "boolean", True),
    Column("small", "smallint", True),
    Column("big", "bigint", True),
    Column("r", "real", True),
    Column("d", "double", True),
    Column("n", "numeric", True, "numeric(20,5)"),
    Column("wide", "numeric", True),
    Column("txt", "text", True),
    Column("vc", "text", True, "character varying(20)"),
    Column("bin", "bytes", True),
    Column("day", "date", True),
    Column("at", "time", True),
    Column("ts", "timestamp", True),
    Column("tstz", "timestamptz", True),
    Column("u", "uuid", True),
    Column("doc", "json", True),
]
NASTY = "tab\there\nnewline\\back\r\0nul 日本語 ελληνικά عربى 🎉 'q' \"dq\" `bt`"
ROW = (
    1,
    True,
    -32768,
    -9223372036854775808,
    1.5,
    -0.1,
    Decimal("-123456789012345.12345"),
    Decimal("12345678901234567890123456789012345.123456789012345678901234567891"),
    NASTY,
    "short",
    b"\x00\t\n\\\xff\xfe",
    dt.date(1000, 1, 1),
    dt.time(23, 59, 59, 999999),
    dt.datetime(9999, 12, 31, 23, 59, 59, 999999),
    dt.datetime(2024, 3, 1, 12, 0, 0, 1, tzinfo=dt.timezone(dt.timedelta(hours=5, minutes=30))),
    uuid.UUID("12345678-1234-5678-1234-567812345678"),
    {"a": [1, "日本", None], "b": {"c": True}},
)
EMPTY = (2, *(None for _ in EVERY[1:]))
BLANK = (
    3,
    False,
    0,
    0,
    0.0,
    0.0,
    Decimal(0),
    Decimal(0),
    "",
    "",
    b"",
    None,
    None,
    None,
    None,
    None,
    "",
)


@pytest.mark.parametrize("local_infile", [True, False], ids=["load-data", "insert"])
async def test_values_land_exactly(mysql_database: MySQLDatabase, local_infile: bool) -> None:
    db = mysql_database
    w = await writer(db, local_infile=local_infile)
    try:
        await w.write("t", EVERY, batches([ROW, EMPTY, BLANK]), WriteMode.APPEND, [])
    finally:
        await close(w)
    got = await db.fetch(
        "SELECT id, flag, small, big, r, d, n, wide, txt, vc, bin, day, at, ts, tstz, u, doc "
        "FROM t ORDER BY id"
    )
    first = got[0]
    assert first[1] == 1 and first[2] == -32768 and first[3] == ROW[3]
    assert first[4] == 1.5 and first[5] == -0.1
    assert first[6] == ROW[6]
    assert first[7] == ROW[7]
    assert first[8] == NASTY and first[9] == "short"
    assert first[10] == ROW[10]
    assert first[11] == ROW[11]
    assert first[12] == dt.timedelta(hours=23, minutes=59, seconds=59, microseconds=999999)
    assert first[13] == ROW[13]
    assert first[14] == dt.datetime(2024, 3, 1, 6, 30, 0, 1)  # the instant, in UTC
    assert first[15] == str(ROW[15])
    import json

    assert json.loads(first[16]) == ROW[16]
    assert got[1] == EMPTY
    assert got[2][8] == "" and got[2][10] == b"" and json.loads(got[2][16]) == ""


@pytest.mark.parametrize(
    ("column", "value"),
    [
        (Column("v", "double", True), float("nan")),
        (Column("v", "double", True), float("inf")),
        (Column("v", "real", True), float("-inf")),
        (Column("v", "numeric", True), Decimal("NaN")),
        (Column("v", "numeric", True), Decimal("Infinity")),
        (Column("v", "numeric", True, "numeric(5,2)"), Decimal("1.234")),
        (Column("v", "numeric", True, "numeric(5,2)"), Decimal("1234.5")),
        (Column("v", "numeric", True), Decimal("1e-31")),
        (Column("v", "text", True), "lone \ud800 surrogate"),
        (Column("v", "json", True), {"k": "\udfff"}),
    ],
    ids=[
        "nan",
        "inf",
        "-inf",
        "dec-nan",
        "dec-inf",
        "rounds",
        "too-big",
        "too-fine",
        "surrogate",
        "json-surrogate",
    ],
)
async def test_values_mysql_cannot_hold_fail_naming_them(
    mysql_database: MySQLDatabase, column: Column, value: Any
) -> None:
    db = mysql_database
    w = await writer(db)
    try:
        with pytest.raises(ValueFault) as caught:
            await w.write("t", [ID, column], batches([(1, None), (2, value)]), WriteMode.APPEND, [])
        message = str(caught.value)
        assert "'t'" in message and "'v'" in message and "row 2" in message
        assert "t" not in await tables_of(db)
    finally:
        await close(w)


async def test_infinite_dates_are_refused(mysql_database: MySQLDatabase) -> None:
    from setu_engine.values.special import INFINITY

    w = await writer(mysql_database)
    try:
        with pytest.raises(ValueFault, match="infinity"):
            await w.write(
                "t", [ID, Column("d", "date", True)], batches([(1, INFINITY)]), WriteMode.APPEND, []
            )
    finally:
        await close(w)


@pytest.mark.parametrize(
    "name", ["we`ird", "a.b", "it's", 'q"uote', "50%off", "`; DROP TABLE x; --"]
)
async def test_hostile_names(mysql_database: MySQLDatabase, name: str) -> None:
    db = mysql_database
    w = await writer(db)
    column = Column(name, "text", True)
    try:
        for mode in (WriteMode.APPEND, WriteMode.UPSERT, WriteMode.MERGE, WriteMode.OVERWRITE):
            await w.write(name, [column], batches([("v1",), ("v2",)]), mode, [name])
        found = await db.fetch(
            f"SELECT `{name.replace('`', '``')}` FROM `{name.replace('`', '``')}`"
        )
        assert sorted(r[0] for r in found) == ["v1", "v2"]
    finally:
        await close(w)


async def test_the_guard_refuses_a_file_nobody_registered(
    mysql_database: MySQLDatabase, tmp_path: Any
) -> None:
    """A server that asks for a client file (here: our own LOAD naming one)
    gets nothing unless the write registered that very path."""
    db = mysql_database
    await db.execute("CREATE TABLE x (line longtext)")
    w = await writer(db)
    try:
        with pytest.raises(infile.RefusedFile):
            await w._sql("LOAD DATA LOCAL INFILE '/etc/hostname' INTO TABLE x")
        await w.conn.rollback()
        assert await db.fetch("SELECT * FROM x") == []
        # The connection is still in step, and a registered file does load.
        mine = tmp_path / "mine.tsv"
        mine.write_text("hello\n")
        with infile.allow(w.conn, str(mine)):
            await w._sql(f"LOAD DATA LOCAL INFILE '{mine}' INTO TABLE x")
        # Registered for another path: still refused.
        with infile.allow(w.conn, str(mine)), pytest.raises(infile.RefusedFile):
            await w._sql("LOAD DATA LOCAL INFILE '/etc/hostname' INTO TABLE x")
        await w.conn.commit()
        assert await db.fetch("SELECT * FROM x") == [("hello",)]
    finally:
        await close(w)


async def test_a_file_asked_for_on_a_read_is_refused_classified(
    mysql_database: MySQLDatabase,
) -> None:
    """A hostile server may answer any query (a read's SELECT) with a LOCAL
    INFILE request: refused, as a PermanentError (reads classify only the
    driver's own errors), and the session stays in step."""
    db = mysql_database
    await db.execute("CREATE TABLE x (line longtext)")
    w = await writer(db)
    try:
        with pytest.raises(PermanentError, match="did not offer"):
            await w._one("LOAD DATA LOCAL INFILE '/etc/hostname' INTO TABLE x")
        await w.conn.rollback()
        assert await w._one("SELECT COUNT(*) FROM x") == 0
    finally:
        await close(w)


async def test_server_without_local_infile_uses_inserts(mysql_database: MySQLDatabase) -> None:
    """With the client's local_infile off, a write never sends LOAD DATA
    LOCAL (the server would refuse it), and still lands every row."""
    db = mysql_database
    w = await writer(db, local_infile=False)
    try:
        rows = [(i, f"r{i}") for i in range(12000)]
        written = await w.write("t", COLUMNS, batches(rows), WriteMode.APPEND, [])
        assert written == 12000
        assert await db.fetchval("SELECT COUNT(*) FROM t") == 12000
    finally:
        await close(w)


async def test_cancelled_write_leaves_nothing(mysql_database: MySQLDatabase) -> None:
    db = mysql_database
    await db.execute("CREATE TABLE t (id bigint PRIMARY KEY, name longtext)")
    await db.execute("INSERT INTO t VALUES (1, 'a')")
    w = await writer(db)
    first_sent = asyncio.Event()
    never = asyncio.Event()

    async def slow() -> AsyncIterator[Batch]:
        yield [(2, "b")]
        first_sent.set()
        await never.wait()
        yield [(3, "c")]

    try:
        task = asyncio.create_task(w.write("t", COLUMNS, slow(), WriteMode.MERGE, ["id"]))
        await first_sent.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert await rows_of(db) == [(1, "a")]
        assert await tables_of(db) == {"t", "_setu_loads"}
    finally:
        await close(w)


async def test_staged_parts_resume_and_apply_once(mysql_database: MySQLDatabase) -> None:
    """The StagingDestination protocol (setu_engine/staged/resumable.py):
    parts copied with their markers, a part copied again is skipped, the
    apply lands every part at once with the stream's marker and drops the
    staging table and its markers."""
    from types import SimpleNamespace

    from setu_engine.staged.markers import LoadIdentity
    from setu_engine.staged.resumable import part_marker, stage_marker, stage_table

    db = mysql_database
    await db.execute("CREATE TABLE t (id bigint PRIMARY KEY, name longtext)")
    await db.execute("INSERT INTO t VALUES (1, 'old'), (7, 'gone')")
    identity = LoadIdentity(uuid.uuid4().hex)
    stage = stage_table(identity.run_id, "t")
    registered = stage_marker(identity.run_id, "t")
    parts = [[(1, "a"), (2, "b")], [(3, "c")], [(4, "d")]]
    w = await writer(db)
    try:
        await w.prepare_stage(stage, COLUMNS, None, registered)
        assert await w.stage_part(stage, COLUMNS, parts[0], part_marker(identity, "t", 0), None)
        # A retry after a crash: the same part again is skipped.
        assert not await w.stage_part(stage, COLUMNS, parts[0], part_marker(identity, "t", 0), None)
        await w.prepare_stage(stage, COLUMNS, None, registered)
        for index, part in enumerate(parts[1:], 1):
            assert await w.stage_part(stage, COLUMNS, part, part_marker(identity, "t", index), None)
        assert await db.fetchval(f"SELECT COUNT(*) FROM `{stage}`") == 4
        assert await rows_of(db) == [(1, "old"), (7, "gone")]  # nothing applied yet
        # Another run sees this staging table as fresh, not stale.
        assert await w.stale_stages(uuid.uuid4().hex, dt.timedelta(hours=1)) == []
        target = SimpleNamespace(
            table="t", schema=None, mode=WriteMode.MERGE, key=("id",), changes=None
        )
        heard: list[str] = []

        async def before_commit() -> None:
            heard.append("committing")

        final = identity.marker("t")
        written = await w.apply_stage(stage, COLUMNS, target, final, before_commit)
        assert written == 4 and changes_of(written) == RowChanges(3, 1, 0, 1)
        assert heard == ["committing"]
        assert await rows_of(db) == [(1, "a"), (2, "b"), (3, "c"), (4, "d")]
        assert stage not in await tables_of(db)
        left = await db.fetch("SELECT part FROM _setu_loads WHERE run_id = %s", (identity.run_id,))
        assert left == [("",)]
        # Applied once: a second apply finds the marker.
        assert await w.apply_stage(stage, COLUMNS, target, final, before_commit) == 4
    finally:
        await close(w)


async def test_a_cancel_at_the_last_word_rolls_the_apply_back(
    mysql_database: MySQLDatabase,
) -> None:
    from types import SimpleNamespace

    from setu_engine.staged.markers import LoadIdentity
    from setu_engine.staged.resumable import part_marker, stage_marker, stage_table

    db = mysql_database
    identity = LoadIdentity(uuid.uuid4().hex)
    stage = stage_table(identity.run_id, "t")
    w = await writer(db)
    try:
        await w.prepare_stage(stage, COLUMNS, None, stage_marker(identity.run_id, "t"))
        await w.stage_part(stage, COLUMNS, [(1, "a")], part_marker(identity, "t", 0), None)
        target = SimpleNamespace(
            table="t", schema=None, mode=WriteMode.APPEND, key=("id",), changes=None
        )

        async def cancel() -> None:
            raise asyncio.CancelledError

        with pytest.raises(asyncio.CancelledError):
            await w.apply_stage(stage, COLUMNS, target, identity.marker("t"), cancel)
        # The target the apply created is gone again; the staging table stays for a retry.
        assert "t" not in await tables_of(db)
        assert await db.fetchval(f"SELECT COUNT(*) FROM `{stage}`") == 1
        await w.drop_stage(stage, stage_marker(identity.run_id, "t"))
        assert stage not in await tables_of(db)
        assert await db.fetch("SELECT part FROM _setu_loads") == []
    finally:
        await close(w)


async def test_stale_staging_tables_of_other_runs_are_found(mysql_database: MySQLDatabase) -> None:
    from setu_engine.staged.resumable import stage_marker, stage_table

    db = mysql_database
    old_run = uuid.uuid4().hex
    w = await writer(db)
    try:
        await w.prepare_stage(stage_table(old_run, "t"), COLUMNS, None, stage_marker(old_run, "t"))
        await db.execute("UPDATE _setu_loads SET loaded_at = UTC_TIMESTAMP(6) - INTERVAL 2 DAY")
        found = await w.stale_stages(uuid.uuid4().hex, dt.timedelta(days=1))
        assert found == [stage_marker(old_run, "t")]
        assert await w.stale_stages(old_run, dt.timedelta(days=1)) == []
    finally:
        await close(w)


async def test_inspect_table_reads_the_shape(mysql_database: MySQLDatabase) -> None:
    db = mysql_database
    await db.execute(
        "CREATE TABLE t (id int NOT NULL, code varchar(20) NOT NULL DEFAULT 'x', "
        "amount decimal(10,2), flag tinyint(1) NOT NULL, PRIMARY KEY (id), UNIQUE KEY (code, flag))"
    )
    w = await writer(db)
    try:
        shape = await w.inspect_table("t", None)
        assert shape.columns is not None
        assert [(c.name, c.neutral, c.required) for c in shape.columns] == [
            ("id", "integer", True),
            ("code", "text", False),
            ("amount", "numeric", False),
            ("flag", "boolean", True),
        ]
        assert set(shape.unique_keys) == {frozenset({"id"}), frozenset({"code", "flag"})}
        assert (await w.inspect_table("missing", None)).columns is None
        assert (await w.inspect_table("t", "no_such_db_x")).missing_schema == "no_such_db_x"
        await w.add_columns("t", None, [Column("more", "text", True)])
        assert await columns_of(db) == ["id", "code", "amount", "flag", "more"]
    finally:
        await close(w)


async def test_a_lock_wait_timeout_is_transient(mysql_database: MySQLDatabase) -> None:
    """A real 1205: another connection holds the row lock, the write's
    session waits innodb_lock_wait_timeout=1 second for it."""
    from setu_engine.errors import TransientError

    db = mysql_database
    await db.execute("CREATE TABLE t (id bigint PRIMARY KEY, name longtext)")
    await db.execute("INSERT INTO t VALUES (1, 'a')")
    holder = await db.connect()
    w = await writer(db)
    try:
        await holder.autocommit(False)
        async with holder.cursor() as cursor:
            await cursor.execute("SELECT * FROM t WHERE id = 1 FOR UPDATE")
        await w._sql("SET SESSION innodb_lock_wait_timeout = 1")
        with pytest.raises(TransientError):
            await w.write("t", COLUMNS, batches([(1, "b")]), WriteMode.UPSERT, ["id"])
        await holder.rollback()
        assert await rows_of(db) == [(1, "a")]
    finally:
        holder.close()
        await holder.ensure_closed()
        await close(w)


async def test_inserts_stay_under_max_allowed_packet(mysql_database: MySQLDatabase) -> None:
    """Three 6 MB values: one INSERT of all three would pass the server's
    16 MB max_allowed_packet (error 1153); the writer splits them."""
    db = mysql_database
    assert await db.fetchval("SELECT @@max_allowed_packet") < 18 * 1024 * 1024
    w = await writer(db, local_infile=False)
    big = "x" * (6 * 1024 * 1024)
    try:
        rows = [(1, big), (2, big), (3, big)]
        assert await w.write("t", COLUMNS, batches(rows), WriteMode.APPEND, ["id"]) == 3
        assert await db.fetchval("SELECT SUM(LENGTH(name)) FROM t") == 3 * len(big)
    finally:
        await close(w)


async def test_a_write_that_died_before_its_clean_up_leaves_a_stage_the_next_load_drops(
    mysql_database: MySQLDatabase, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A write's staging table is registered as a resumable load's is, so
    when its process dies before dropping it (here: the drop skipped), the
    engine's stale-stage clean-up (resumable.drop_stale_stages) finds and
    drops it."""
    from setu_engine.staged.resumable import drop_stale_stages

    db = mysql_database
    w = await writer(db)
    try:

        async def died(staged: str, marker: LoadMarker) -> None:
            return None

        monkeypatch.setattr(w, "_drop_registered", died)
        await w.write("t", COLUMNS, batches([(1, "a")]), WriteMode.APPEND, ["id"])
        left = [n for n in await tables_of(db) if n.startswith("_setu_stage_")]
        assert len(left) == 1
        monkeypatch.undo()
        dropped = await drop_stale_stages(w, uuid.uuid4().hex, dt.timedelta(0), None)
        assert dropped == left
        assert await tables_of(db) == {"t", "_setu_loads"}
        assert await db.fetch("SELECT part FROM _setu_loads WHERE part <> ''") == []
    finally:
        await close(w)


async def test_a_schema_is_a_database_of_its_own(mysql_database: MySQLDatabase) -> None:
    db = mysql_database
    other = f"{db.name}_x"
    w = await writer(db)
    try:
        await w.create_schema(other)
        for mode in (WriteMode.APPEND, WriteMode.MERGE, WriteMode.OVERWRITE):
            await w.write("t", COLUMNS, batches([(1, "a")]), mode, ["id"], schema=other)
        assert await db.server.fetch("SELECT * FROM t", database=other) == [(1, "a")]
        assert "t" not in await tables_of(db)
        assert await tables_of(db) == {"_setu_loads"}
    finally:
        await close(w)
        await db.server.execute(f"DROP DATABASE IF EXISTS `{other}`")


async def test_a_long_text_key_fits_when_the_target_takes_it(mysql_database: MySQLDatabase) -> None:
    db = mysql_database
    await db.execute("CREATE TABLE t (code varchar(700) PRIMARY KEY, name longtext)")
    long = "k" * 700
    code = Column("code", "text", False)
    w = await writer(db)
    try:
        for mode in (WriteMode.APPEND, WriteMode.UPSERT, WriteMode.MERGE):
            await w.write("t", [code, NAME], batches([(long, mode.value)]), mode, ["code"])
        assert await rows_of(db) == [(long, "merge")]
    finally:
        await close(w)
