"""A tenant's DuckDB file in the cloud (a files root): a hard link at the
database's path or beside it is refused (a hard link passes every check of
where a path leads, and may be another workspace's file), and a view that
reads DuckDB's own settings or catalog (which name the runtime's paths) is
refused at read; at an agent (no root) both behave as before."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import duckdb
import pytest

from setu_engine.errors import ConfigError, PermanentError
from setu_engine.providers import get_provider
from setu_engine.providers.duckdb import connector as duck_connector
from setu_engine.values.types import Column, Stream

pytestmark = pytest.mark.asyncio

VICTIM = b"another workspace's data\n"


def make_file(path: Path, *statements: str) -> None:
    with duckdb.connect(str(path)) as made:
        made.execute("CREATE TABLE t (x integer)")
        made.execute("INSERT INTO t VALUES (1)")
        for statement in statements:
            made.execute(statement)


def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "workspace"
    root.mkdir()
    return root


async def connect(path: Path, root: Path | None, **extra: Any) -> Any:
    return await get_provider("duckdb").connect({"path": str(path)} | extra, root=root)


# -- hard links


@pytest.mark.parametrize("create", [False, True])
async def test_a_hard_link_at_the_database_path_is_refused(tmp_path: Path, create: bool) -> None:
    root = workspace(tmp_path)
    theirs = tmp_path / "elsewhere.duckdb"
    make_file(theirs)
    os.link(theirs, root / "mine.duckdb")
    with pytest.raises(ConfigError, match="hard link"):
        await connect(root / "mine.duckdb", root, create=create)


@pytest.mark.parametrize("suffix", [".wal", ".wal.checkpoint", ".wal.recovery"])
async def test_a_hard_link_beside_the_database_is_refused_and_its_target_kept(
    tmp_path: Path, suffix: str
) -> None:
    root = workspace(tmp_path)
    path = root / "mine.duckdb"
    make_file(path)
    victim = tmp_path / "elsewhere"
    victim.write_bytes(VICTIM)
    os.link(victim, root / f"mine.duckdb{suffix}")
    with pytest.raises(ConfigError, match=f"mine.duckdb{suffix}"):
        await connect(path, root, create=True)
    assert victim.read_bytes() == VICTIM


async def test_a_hard_link_made_while_the_file_opens_is_caught_after_the_open(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The race the check after the open is for: the link appears between
    # the checks of the path and DuckDB's open of it.
    root = workspace(tmp_path)
    path = root / "mine.duckdb"
    make_file(path)
    victim = tmp_path / "elsewhere"
    victim.write_bytes(VICTIM)
    real_open = duck_connector._open

    def open_after_a_link(at: Path, read_only: bool) -> duckdb.DuckDBPyConnection:
        os.link(victim, root / "mine.duckdb.wal")
        return real_open(at, read_only)

    monkeypatch.setattr(duck_connector, "_open", open_after_a_link)
    with pytest.raises(ConfigError, match=r"mine\.duckdb\.wal"):
        await connect(path, root)
    assert victim.read_bytes() == VICTIM


async def test_a_hard_link_made_before_the_reopen_for_writing_is_refused(tmp_path: Path) -> None:
    root = workspace(tmp_path)
    path = root / "mine.duckdb"
    make_file(path)
    connector = await connect(path, root)  # read-only until its first write
    try:
        victim = tmp_path / "elsewhere"
        victim.write_bytes(VICTIM)
        os.link(victim, root / "mine.duckdb.wal")
        with pytest.raises(ConfigError, match=r"mine\.duckdb\.wal"):
            await connector.create_schema("more")
    finally:
        await connector.close()
    assert victim.read_bytes() == VICTIM


async def test_hard_links_are_the_owners_business_at_an_agent(tmp_path: Path) -> None:
    path = tmp_path / "mine.duckdb"
    make_file(path)
    os.link(path, tmp_path / "also-mine.duckdb")
    connector = await connect(path, None)
    await connector.close()


# -- views that show the runtime

VIEWS = {
    "settings": "CREATE VIEW v AS SELECT name, value FROM duckdb_settings()",
    "quoted": 'CREATE VIEW v AS SELECT path FROM "duckdb_databases"()',
    "current_setting": "CREATE VIEW v AS SELECT current_setting('temp_directory') AS value",
    "pg_settings": "CREATE VIEW v AS SELECT name, setting FROM pg_catalog.pg_settings",
    "query": ("CREATE VIEW v AS SELECT * FROM query('SELECT value FROM duck' || 'db_settings()')"),
    "through-a-view": (
        "CREATE VIEW inner_v AS SELECT value FROM duckdb_settings();"
        "CREATE VIEW v AS SELECT * FROM inner_v"
    ),
    "through-a-macro": (
        "CREATE MACRO paths() AS TABLE SELECT value FROM duckdb_settings();"
        "CREATE VIEW v AS SELECT * FROM paths()"
    ),
}


def view_stream(path: Path) -> Stream:
    with duckdb.connect(str(path), read_only=True) as made:
        names = [
            str(n)
            for (n,) in made.execute(
                "SELECT column_name FROM duckdb_columns() WHERE table_name = 'v'"
            ).fetchall()
        ]
    columns = tuple(Column(n, "text") for n in names)
    return Stream(name="v", columns=columns, locator={"schema": "main", "table": "v"})


@pytest.mark.parametrize("definition", list(VIEWS.values()), ids=list(VIEWS))
async def test_a_view_that_reads_the_sessions_settings_is_refused_in_the_cloud(
    tmp_path: Path, definition: str
) -> None:
    root = workspace(tmp_path)
    path = root / "mine.duckdb"
    make_file(path, definition)
    stream = view_stream(path)
    connector = await connect(path, root)
    try:
        with pytest.raises(PermanentError, match="'v' is a view"):
            await connector.preview(stream, 10)
        with pytest.raises(PermanentError, match="'v' is a view"):
            async for _ in connector.read(stream, 100):
                pass
    finally:
        await connector.close()


async def test_a_generated_column_that_reads_a_setting_is_refused_in_the_cloud(
    tmp_path: Path,
) -> None:
    root = workspace(tmp_path)
    path = root / "mine.duckdb"
    make_file(
        path,
        "CREATE TABLE g (x integer, "
        "p VARCHAR GENERATED ALWAYS AS (current_setting('temp_directory')) VIRTUAL)",
        "INSERT INTO g (x) VALUES (1)",
    )
    stream = Stream(
        name="g",
        columns=(Column("x", "integer"), Column("p", "text")),
        locator={"schema": "main", "table": "g"},
    )
    connector = await connect(path, root)
    try:
        with pytest.raises(PermanentError, match="'g' is a view"):
            await connector.preview(stream, 10)
    finally:
        await connector.close()


async def test_what_such_a_view_shows_and_that_plain_views_still_read(tmp_path: Path) -> None:
    root = workspace(tmp_path)
    path = root / "mine.duckdb"
    make_file(
        path,
        VIEWS["settings"],
        "CREATE VIEW plain AS SELECT x, x * 2 AS twice, 'a query' AS query FROM t",
    )
    # At an agent (no root) the view reads, and shows the file's full path:
    # what the cloud refuses it for.
    stream = view_stream(path)
    agent = await connect(path, None)
    try:
        rows = await agent.preview(stream, 1000)
        assert any(str(path) in str(value) for _, value in rows)
    finally:
        await agent.close()
    plain = Stream(
        name="plain",
        columns=(Column("x", "integer"), Column("twice", "integer"), Column("query", "text")),
        locator={"schema": "main", "table": "plain"},
    )
    cloud = await connect(path, root)
    try:
        assert await cloud.preview(plain, 10) == [(1, 2, "a query")]
    finally:
        await cloud.close()
