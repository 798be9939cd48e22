"""The sqlite provider on real SQLite files: discovery, reads with their type
conversions, the four write modes, atomicity, and the errors a user sees."""

from __future__ import annotations

import asyncio
import sqlite3
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, date, datetime, time, timedelta, timezone
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from setu_engine.errors import ConfigError, PermanentError, ProviderError, TransientError
from setu_engine.kinds import WriteMode
from setu_engine.providers import get_provider
from setu_engine.providers.base import Connector
from setu_engine.providers.sqlite.connector import PROVIDER, SqliteConnector
from setu_engine.values.types import Batch, Column, Stream

ALL_TYPES_DDL = """
CREATE TABLE everything (
    id INTEGER PRIMARY KEY,
    flag BOOLEAN,
    small SMALLINT,
    whole INT NOT NULL,
    big BIGINT,
    ratio REAL,
    amount DECIMAL(12, 2),
    name VARCHAR(20),
    blob BLOB,
    born DATE,
    alarm TIME,
    seen DATETIME,
    stamped TIMESTAMPTZ,
    ident UUID,
    doc JSON,
    anything
)
"""

EVERYTHING_TYPES = [
    ("id", "bigint"),
    ("flag", "boolean"),
    ("small", "smallint"),
    ("whole", "bigint"),
    ("big", "bigint"),
    ("ratio", "double"),
    ("amount", "numeric"),
    ("name", "text"),
    ("blob", "bytes"),
    ("born", "date"),
    ("alarm", "time"),
    ("seen", "timestamp"),
    ("stamped", "timestamptz"),
    ("ident", "uuid"),
    ("doc", "json"),
    ("anything", "text"),
]

UID = uuid.UUID("12345678-1234-5678-1234-567812345678")


def make_db(
    path: Path, *statements: str, rows: dict[str, list[tuple[Any, ...]]] | None = None
) -> Path:
    conn = sqlite3.connect(path)
    try:
        for statement in statements:
            conn.execute(statement)
        for table, values in (rows or {}).items():
            marks = ", ".join("?" for _ in values[0])
            conn.executemany(f"INSERT INTO {table} VALUES ({marks})", values)
        conn.commit()
    finally:
        conn.close()
    return path


def table_rows(path: Path, sql: str) -> list[tuple[Any, ...]]:
    conn = sqlite3.connect(path)
    try:
        return conn.execute(sql).fetchall()
    finally:
        conn.close()


async def connect(path: Path, **extra: Any) -> Connector:
    return await PROVIDER.connect({"path": str(path), **extra})


async def batches_of(*batches: Batch) -> AsyncIterator[Batch]:
    for batch in batches:
        yield batch


async def failing_after(*batches: Batch) -> AsyncIterator[Batch]:
    for batch in batches:
        yield batch
    raise RuntimeError("cancelled midway")


@pytest.fixture
def everything_db(tmp_path: Path) -> Path:
    return make_db(
        tmp_path / "src.db",
        ALL_TYPES_DDL,
        "CREATE TABLE pairs (a TEXT, b INTEGER, c TEXT, PRIMARY KEY (b, a))",
        "CREATE VIEW named AS SELECT id, name FROM everything",
        rows={
            "everything": [
                (
                    1,
                    1,
                    -5,
                    7,
                    2**62,
                    1.25,
                    "12.50",
                    "héllo",
                    b"\x00\x01",
                    "2024-02-29",
                    "23:59:59.5",
                    "2024-01-02 03:04:05",
                    "2024-01-02T03:04:05+02:00",
                    str(UID),
                    '{"a": [1, "x"]}',
                    42,
                ),
                (2, 0, None, 0, None, 3, 0.1, None, None, None, None, None, None, None, None, None),
                (
                    3,
                    "true",
                    1,
                    1,
                    1,
                    1.0,
                    7,
                    "x",
                    None,
                    None,
                    "08:00",
                    "2024-01-02T03:04:05Z",
                    "2024-01-02 03:04:05",
                    UID.bytes,
                    "5",
                    "s",
                ),
            ]
        },
    )


async def test_the_registry_finds_the_provider() -> None:
    assert get_provider("sqlite") is PROVIDER
    assert PROVIDER.name == "sqlite"


async def test_test_names_version_path_and_table_count(everything_db: Path) -> None:
    conn = await connect(everything_db)
    try:
        description = await conn.test()
    finally:
        await conn.close()
    assert description == f"SQLite {sqlite3.sqlite_version} at {everything_db} (2 tables)"


async def test_discover_maps_types_keys_and_nullability(everything_db: Path) -> None:
    conn = await connect(everything_db)
    try:
        streams = {s.name: s for s in await conn.discover()}
    finally:
        await conn.close()
    assert sorted(streams) == ["everything", "named", "pairs"]
    everything = streams["everything"]
    assert [(c.name, c.type) for c in everything.columns] == EVERYTHING_TYPES
    assert everything.primary_key == ("id",)
    assert everything.row_estimate == 3
    assert everything.namespace == ""
    nullable = {c.name: c.nullable for c in everything.columns}
    assert nullable["id"] is False  # the rowid
    assert nullable["whole"] is False
    assert nullable["name"] is True
    assert streams["pairs"].primary_key == ("b", "a")
    assert streams["named"].row_estimate == 0
    assert [c.name for c in streams["named"].columns] == ["id", "name"]


async def test_read_converts_every_type(everything_db: Path) -> None:
    conn = await connect(everything_db)
    try:
        stream = next(s for s in await conn.discover() if s.name == "everything")
        rows = [row async for batch in conn.read(stream, 10) for row in batch]
    finally:
        await conn.close()
    assert rows[0] == (
        1,
        True,
        -5,
        7,
        2**62,
        1.25,
        Decimal("12.50"),
        "héllo",
        b"\x00\x01",
        date(2024, 2, 29),
        time(23, 59, 59, 500000),
        datetime(2024, 1, 2, 3, 4, 5),
        datetime(2024, 1, 2, 1, 4, 5, tzinfo=UTC),
        UID,
        {"a": [1, "x"]},
        "42",
    )
    assert rows[1] == (2, False, None, 0, None, 3.0, Decimal("0.1")) + (None,) * 9
    assert rows[2][1] is True
    assert rows[2][6] == Decimal(7)
    assert rows[2][10] == time(8, 0)
    # An offset in a naive column keeps the instant, in UTC; a naive value in
    # a timestamptz column is UTC, as SQLite's own clock functions write it.
    assert rows[2][11] == datetime(2024, 1, 2, 3, 4, 5)
    assert rows[2][12] == datetime(2024, 1, 2, 3, 4, 5, tzinfo=UTC)
    assert rows[2][13] == UID
    assert rows[2][14] == 5
    assert all(type(row[5]) is float for row in rows)
    assert rows[0][12].tzinfo is UTC


async def test_read_honours_the_batch_size(tmp_path: Path) -> None:
    path = make_db(
        tmp_path / "n.db",
        "CREATE TABLE n (i INTEGER)",
        rows={"n": [(i,) for i in range(10)]},
    )
    conn = await connect(path)
    try:
        stream = (await conn.discover())[0]
        batches = [batch async for batch in conn.read(stream, 4)]
        preview = await conn.preview(stream, 3)
    finally:
        await conn.close()
    assert [len(b) for b in batches] == [4, 4, 2]
    assert [r for b in batches for r in b] == [(i,) for i in range(10)]
    assert preview == [(0,), (1,), (2,)]


async def test_a_value_that_does_not_convert_names_table_column_and_value(tmp_path: Path) -> None:
    path = make_db(
        tmp_path / "bad.db",
        "CREATE TABLE events (id INTEGER, at DATETIME)",
        rows={"events": [(1, "2024-01-01"), (2, "yesterday")]},
    )
    conn = await connect(path)
    try:
        stream = (await conn.discover())[0]
        bad = r"column 'at', row 2: sqlite table 'events'.*'yesterday'"
        with pytest.raises(ProviderError, match=bad):
            await conn.preview(stream, 10)
    finally:
        await conn.close()


async def test_a_source_is_opened_read_only(everything_db: Path) -> None:
    conn = await connect(everything_db)
    try:
        assert isinstance(conn, SqliteConnector)
        with pytest.raises(ProviderError, match="readonly"):
            await conn._run("probe", lambda c: c.execute("DELETE FROM pairs"))
    finally:
        await conn.close()


# --- writes ------------------------------------------------------------------------

WRITE_COLUMNS = [
    Column("id", "bigint", nullable=False),
    Column("flag", "boolean"),
    Column("amount", "numeric"),
    Column("born", "date"),
    Column("alarm", "time"),
    Column("seen", "timestamp"),
    Column("stamped", "timestamptz"),
    Column("ident", "uuid"),
    Column("doc", "json"),
    Column("blob", "bytes"),
    Column("ratio", "real"),
    Column("small", "smallint"),
    Column("count", "integer"),
    Column("name", "text"),
]

FIRST_ROW = (
    1,
    True,
    Decimal("123456789012345678901234567890.1230"),
    date(1999, 12, 31),
    time(12, 30, 0, 5),
    datetime(2024, 1, 2, 3, 4, 5, 6),
    datetime(2024, 1, 2, 12, 0, tzinfo=timezone(timedelta(hours=9))),
    UID,
    {"k": ["é", 1.5, None]},
    b"\xff\x00",
    0.5,
    -3,
    2**31 - 1,
    "first",
)
SECOND_ROW = (2, False) + (None,) * 12


async def test_write_creates_the_table_and_round_trips_every_type(tmp_path: Path) -> None:
    path = tmp_path / "dest.db"
    conn = await connect(path, create=True)
    try:
        written = await conn.write(
            "out", WRITE_COLUMNS, batches_of([FIRST_ROW], [SECOND_ROW]), WriteMode.APPEND, []
        )
        stream = next(s for s in await conn.discover() if s.name == "out")
        rows = [row async for batch in conn.read(stream, 100) for row in batch]
    finally:
        await conn.close()
    assert written == 2
    assert [(c.name, c.type) for c in stream.columns] == [(c.name, c.type) for c in WRITE_COLUMNS]
    assert stream.columns[0].nullable is False
    assert rows == [FIRST_ROW, SECOND_ROW]
    stored = table_rows(
        path, "SELECT flag, amount, seen, stamped, ident, doc FROM out WHERE id = 1"
    )
    assert stored == [
        (
            1,
            "123456789012345678901234567890.1230",
            "2024-01-02 03:04:05.000006",
            "2024-01-02 03:00:00+00:00",
            str(UID),
            '{"k":["é",1.5,null]}',
        )
    ]


KEYED = [Column("id", "bigint"), Column("name", "text")]


def keyed_db(tmp_path: Path) -> Path:
    return make_db(
        tmp_path / "keyed.db",
        "CREATE TABLE people (id INTEGER PRIMARY KEY, name TEXT, extra TEXT DEFAULT 'kept')",
        rows={"people": [(1, "ann", "x"), (2, "bob", "y"), (3, "cy", "z")]},
    )


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        (
            WriteMode.APPEND,
            [
                (1, "ann", "x"),
                (2, "bob", "y"),
                (3, "cy", "z"),
                (4, "dee", "kept"),
                (5, "eve", "kept"),
            ],
        ),
        (WriteMode.OVERWRITE, [(4, "dee", "kept"), (5, "eve", "kept")]),
        (
            WriteMode.UPSERT,
            [(1, "ann", "x"), (2, "BOB", "y"), (3, "cy", "z"), (4, "dee", "kept")],
        ),
        (WriteMode.MERGE, [(2, "BOB", "y"), (4, "dee", "kept")]),
    ],
)
async def test_write_modes(tmp_path: Path, mode: WriteMode, expected: list[Any]) -> None:
    path = keyed_db(tmp_path)
    if mode in (WriteMode.APPEND, WriteMode.OVERWRITE):
        batches = batches_of([(4, "dee")], [(5, "eve")])
        key: list[str] = []
    else:
        # id 2 twice across batches: the last one wins, and it counts twice.
        batches = batches_of([(2, "bob?"), (4, "dee")], [(2, "BOB")])
        key = ["id"]
    conn = await connect(path)
    try:
        written = await conn.write("people", KEYED, batches, mode, key)
    finally:
        await conn.close()
    assert written == (2 if not key else 3)
    assert table_rows(path, "SELECT id, name, extra FROM people ORDER BY id") == expected


async def test_merge_on_a_composite_text_key(tmp_path: Path) -> None:
    path = make_db(
        tmp_path / "pairs.db",
        "CREATE TABLE pairs (a TEXT, b INTEGER, c TEXT, UNIQUE (a, b))",
        rows={"pairs": [("x", 1, "old"), ("x", 2, "old"), ("y", 1, "old")]},
    )
    columns = [Column("a", "text"), Column("b", "bigint"), Column("c", "text")]
    conn = await connect(path)
    try:
        await conn.write(
            "pairs",
            columns,
            batches_of([("x", 2, "new"), ("z", 9, "new")]),
            WriteMode.MERGE,
            ["b", "a"],
        )
    finally:
        await conn.close()
    assert table_rows(path, "SELECT a, b, c FROM pairs ORDER BY a, b") == [
        ("x", 2, "new"),
        ("z", 9, "new"),
    ]


@pytest.mark.parametrize("mode", list(WriteMode))
async def test_a_failing_batch_stream_leaves_the_table_as_it_was(
    tmp_path: Path, mode: WriteMode
) -> None:
    path = keyed_db(tmp_path)
    before = table_rows(path, "SELECT * FROM people ORDER BY id")
    key = ["id"] if mode.needs_key else []
    conn = await connect(path)
    try:
        with pytest.raises(RuntimeError, match="cancelled midway"):
            await conn.write("people", KEYED, failing_after([(8, "new"), (9, "new")]), mode, key)
        # The connector stays usable after the rollback.
        written = await conn.write("people", KEYED, batches_of([(10, "ok")]), WriteMode.APPEND, [])
    finally:
        await conn.close()
    assert written == 1
    assert table_rows(path, "SELECT * FROM people ORDER BY id") == [*before, (10, "ok", "kept")]


async def test_a_cancelled_write_rolls_back(tmp_path: Path) -> None:
    path = keyed_db(tmp_path)
    consumed = asyncio.Event()

    async def stalls_after_one_batch() -> AsyncIterator[Batch]:
        yield [(8, "new")]
        consumed.set()  # the first batch is in the open transaction now
        await asyncio.Event().wait()
        yield []

    conn = await connect(path)
    try:
        write = asyncio.create_task(
            conn.write("people", KEYED, stalls_after_one_batch(), WriteMode.OVERWRITE, [])
        )
        await consumed.wait()
        write.cancel()
        with pytest.raises(asyncio.CancelledError):
            await write
        # Rolled back, not merely left open: the connector can write again.
        await conn.write("people", KEYED, batches_of([(10, "ok")]), WriteMode.APPEND, [])
    finally:
        await conn.close()
    assert table_rows(path, "SELECT id FROM people ORDER BY id") == [(1,), (2,), (3,), (10,)]


async def test_a_failed_write_does_not_leave_a_created_table(tmp_path: Path) -> None:
    path = tmp_path / "new.db"
    conn = await connect(path, create=True)
    try:
        with pytest.raises(RuntimeError):
            await conn.write("fresh", KEYED, failing_after([(1, "a")]), WriteMode.APPEND, [])
        assert await conn.discover() == []
    finally:
        await conn.close()


async def test_a_bad_value_fails_the_write_naming_its_column(tmp_path: Path) -> None:
    path = keyed_db(tmp_path)
    columns = [Column("id", "bigint"), Column("extra", "timestamptz")]
    conn = await connect(path)
    try:
        with pytest.raises(ProviderError, match=r"column 'extra'.*aware datetime"):
            await conn.write(
                "people", columns, batches_of([(7, datetime(2024, 1, 1))]), WriteMode.APPEND, []
            )
    finally:
        await conn.close()
    assert len(table_rows(path, "SELECT * FROM people")) == 3


async def test_writing_a_column_the_table_lacks_is_refused(tmp_path: Path) -> None:
    path = keyed_db(tmp_path)
    conn = await connect(path)
    try:
        with pytest.raises(ProviderError, match="table 'people' has no column 'email'"):
            await conn.write(
                "people",
                [*KEYED, Column("email", "text")],
                batches_of([(9, "x", "x@y")]),
                WriteMode.APPEND,
                [],
            )
    finally:
        await conn.close()


async def test_upsert_needs_a_unique_index_on_exactly_the_key(tmp_path: Path) -> None:
    path = keyed_db(tmp_path)
    conn = await connect(path)
    try:
        with pytest.raises(ProviderError, match=r"unique index on exactly \(name\)"):
            await conn.write("people", KEYED, batches_of([(1, "a")]), WriteMode.UPSERT, ["name"])
    finally:
        await conn.close()


@pytest.mark.parametrize("mode", [WriteMode.UPSERT, WriteMode.MERGE])
async def test_keyed_modes_need_a_key(tmp_path: Path, mode: WriteMode) -> None:
    conn = await connect(keyed_db(tmp_path))
    try:
        with pytest.raises(ConfigError, match="needs a key"):
            await conn.write("people", KEYED, batches_of(), mode, [])
        with pytest.raises(ConfigError, match=r"key column.*nope"):
            await conn.write("people", KEYED, batches_of(), mode, ["nope"])
    finally:
        await conn.close()


async def test_upsert_into_a_new_table_creates_its_primary_key(tmp_path: Path) -> None:
    path = tmp_path / "up.db"
    conn = await connect(path, create=True)
    try:
        for name in ("first", "second"):
            await conn.write("t", KEYED, batches_of([(1, name)]), WriteMode.UPSERT, ["id"])
        stream = (await conn.discover())[0]
    finally:
        await conn.close()
    assert stream.primary_key == ("id",)
    assert table_rows(path, "SELECT id, name FROM t") == [(1, "second")]


# --- config and files ----------------------------------------------------------------


async def test_a_missing_file_is_a_provider_error(tmp_path: Path) -> None:
    missing = tmp_path / "nope.db"
    with pytest.raises(ProviderError, match=f"no SQLite database at {missing}"):
        await connect(missing)
    assert not missing.exists()


async def test_a_file_that_is_not_a_database_fails_its_test(tmp_path: Path) -> None:
    path = tmp_path / "notes.db"
    path.write_text("just some text, long enough to look like a header" * 10)
    conn = await connect(path)
    try:
        with pytest.raises(ProviderError, match="sqlite: test: file is not a database"):
            await conn.test()
    finally:
        await conn.close()


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({}, "config.path: required"),
        ({"path": ""}, "config.path: required"),
        ({"path": 5}, "config.path: required"),
        ({"path": "a.db", "create": "yes"}, "config.create: must be true or false"),
        ({"path": "a.db", "host": "x", "user": "y"}, "unknown key.*host, user"),
    ],
)
def test_config_errors_name_the_field(config: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        PROVIDER.validate_config(config)


def test_a_good_config_validates() -> None:
    PROVIDER.validate_config({"path": "relative/file.db", "create": True})


async def test_a_confined_connection_opens_no_file_outside_its_root(tmp_path: Path) -> None:
    root = (tmp_path / "workspace").resolve()
    root.mkdir()
    outside = tmp_path / "outside.db"
    sqlite3.connect(outside).close()
    inside = await PROVIDER.connect({"path": str(root / "mine.db"), "create": True}, root=root)
    await inside.close()
    with pytest.raises(ConfigError, match="may only use files under"):
        await PROVIDER.connect({"path": str(outside)}, root=root)
    (root / "link.db").symlink_to(outside)
    with pytest.raises(ConfigError, match="may only use files under"):
        await PROVIDER.connect({"path": str(root / "link.db")}, root=root)


@pytest.mark.parametrize(
    ("stream", "schema", "table"),
    [("main.people", None, "main.people"), ('a"."b', None, 'a"."b'), ("t", "temp", "temp.t")],
)
async def test_a_landing_name_is_one_table_of_the_file(
    tmp_path: Path, stream: str, schema: str | None, table: str
) -> None:
    # SQLite has no schemas to land in; "main." or "temp." must not pick one.
    path = tmp_path / "out.db"
    conn = await connect(path, create=True)
    try:
        rows = batches_of([(1, "a")])
        await conn.write(stream, KEYED, rows, WriteMode.APPEND, [], schema=schema)
    finally:
        await conn.close()
    assert table_rows(path, "SELECT name FROM sqlite_master WHERE type = 'table'") == [(table,)]


# -- task failures: permanent or transient (docs/errors.md) -------------------

ID_NAME = [Column("id", "bigint", False), Column("name", "text")]


async def test_a_duplicate_key_under_append_is_permanent_and_names_the_fix(
    tmp_path: Path,
) -> None:
    path = make_db(tmp_path / "d.db", "CREATE TABLE t (id INTEGER PRIMARY KEY, name TEXT)")
    conn = await connect(path)
    try:
        await conn.write("t", ID_NAME, batches_of([(1, "a")]), WriteMode.APPEND, [])
        with pytest.raises(PermanentError) as info:
            await conn.write("t", ID_NAME, batches_of([(1, "b")]), WriteMode.APPEND, [])
    finally:
        await conn.close()
    assert not info.value.retryable
    assert "use write_mode upsert or overwrite, or clear the table" in str(info.value)
    assert table_rows(path, "SELECT * FROM t") == [(1, "a")]


async def test_a_missing_table_or_file_is_permanent(tmp_path: Path) -> None:
    path = make_db(tmp_path / "d.db", "CREATE TABLE t (id INTEGER PRIMARY KEY, name TEXT)")
    conn = await connect(path)
    try:
        gone = Stream(name="gone", namespace=None, columns=tuple(ID_NAME))
        with pytest.raises(PermanentError, match=r"no such table.*run discover"):
            await conn.preview(gone, 5)
    finally:
        await conn.close()
    with pytest.raises(PermanentError, match=r"check config\.path"):
        await connect(tmp_path / "nope.db")


async def test_a_database_locked_by_another_writer_is_transient(tmp_path: Path) -> None:
    path = make_db(tmp_path / "d.db", "CREATE TABLE t (id INTEGER PRIMARY KEY, name TEXT)")
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    conn = await connect(path)
    try:
        with pytest.raises(TransientError, match="database is locked") as info:
            await conn.write("t", ID_NAME, batches_of([(1, "a")]), WriteMode.APPEND, [])
    finally:
        await conn.close()
        holder.rollback()
        holder.close()
    assert info.value.retryable
