"""The session's MariaDB (tests/mariadb.py): a real server of the version
the mysql provider supports, LOCAL INFILE on, one scratch database per use."""

from __future__ import annotations

import re

import asyncmy  # type: ignore[import-untyped,unused-ignore]
import pytest

from tests.mariadb import MariaDB, MySQLDatabase, own_mariadb, scratch_mysql_database


async def test_the_server_is_mariadb_10_11_or_later(mariadb_server: MariaDB) -> None:
    version = await mariadb_server.fetchval("SELECT VERSION()")
    match = re.match(r"(\d+)\.(\d+)\.\d+-MariaDB", version)
    assert match, version
    assert (int(match[1]), int(match[2])) >= (10, 11), version


async def test_local_infile_is_on(mariadb_server: MariaDB) -> None:
    assert await mariadb_server.fetchval("SELECT @@GLOBAL.local_infile") == 1


async def test_scratch_databases_are_distinct_and_dropped(
    mariadb_server: MariaDB, mysql_database: MySQLDatabase
) -> None:
    await mysql_database.execute("CREATE TABLE t (id INT PRIMARY KEY)", "INSERT INTO t VALUES (1)")
    async with scratch_mysql_database(mariadb_server) as other:
        assert other.name != mysql_database.name
        assert await other.fetchval("SHOW TABLES") is None
        await other.execute("CREATE TABLE t (id INT PRIMARY KEY)", "INSERT INTO t VALUES (2)")
        assert await other.fetchval("SELECT id FROM t") == 2
    assert await mysql_database.fetchval("SELECT id FROM t") == 1
    dropped = await mariadb_server.fetchval(
        "SELECT COUNT(*) FROM information_schema.schemata WHERE schema_name = %s", [other.name]
    )
    assert dropped == 0


def test_config_is_the_mysql_providers(mysql_database: MySQLDatabase) -> None:
    server = mysql_database.server
    assert mysql_database.config() == {
        "host": "127.0.0.1" if server.socket else server.host,
        "port": server.port,
        "database": mysql_database.name,
        "user": server.user,
        "password": server.password,
    }


async def test_own_mariadb_restarts_under_a_connection() -> None:
    async with own_mariadb() as own:
        conn = await own.server.connect()
        try:
            await own.restart()
            async with conn.cursor() as cursor:
                with pytest.raises(asyncmy.errors.OperationalError):
                    await cursor.execute("SELECT 1")
        finally:
            conn.close()
        assert await own.server.fetchval("SELECT 1") == 1
        await own.kill()
        with pytest.raises(asyncmy.errors.OperationalError):
            await own.server.fetchval("SELECT 1")
        await own.start()
        assert await own.server.fetchval("SELECT 1") == 1
