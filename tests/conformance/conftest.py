"""The conformance suite's fixture: `place`, one scratch destination of each
provider in turn (tests/conformance/harness.py). A provider not registered
yet (setu_engine.providers.NAMES) skips its params."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests import mariadb
from tests.conformance.harness import (
    HARNESSES,
    Harness,
    Place,
    duckdb_objects,
    folder_objects,
    mysql_objects,
    postgres_place,
    sqlite_objects,
)
from tests.databases import scratch_database


@pytest.fixture(params=HARNESSES, ids=[h.id for h in HARNESSES])
async def place(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Place]:
    harness: Harness = request.param
    if not harness.registered:
        pytest.skip(f"provider {harness.provider} not registered yet")
    if harness.provider == "postgres":
        async with scratch_database(request.getfixturevalue("pg_server_url")) as url:
            yield postgres_place(harness, url)
    elif harness.provider == "sqlite":
        path = tmp_path / "db" / "scratch.sqlite"
        path.parent.mkdir()
        yield Place(harness, {"path": str(path), "create": True}, sqlite_objects(path))
    elif harness.provider == "file":
        folder = tmp_path / "files"
        folder.mkdir()
        config = {"url": str(folder), "format": harness.id.removeprefix("file-")}
        yield Place(harness, config, folder_objects(folder))
    elif harness.provider == "mysql":
        server: mariadb.MariaDB = request.getfixturevalue("mariadb_server")
        async with mariadb.scratch_mysql_database(server) as database:
            config = database.config()
            stored = {**config, "password": {"$secret": "MYSQL_PASSWORD"}}
            objects = mysql_objects(database)
            yield Place(harness, config, objects, {"database": database}, stored)
    elif harness.provider == "duckdb":
        path = tmp_path / "db" / "scratch.duckdb"
        path.parent.mkdir()
        yield Place(harness, {"path": str(path), "create": True}, duckdb_objects(path))
    else:
        raise AssertionError(f"no harness for {harness.provider}")
