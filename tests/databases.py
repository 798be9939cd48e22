"""Scratch PostgreSQL databases for data-flow tests (sources and
destinations), on the session's server, and the provider config that
reaches them."""

from __future__ import annotations

import asyncio
import contextlib
import tempfile
import uuid
import warnings
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import asyncpg

from tests.conftest import with_database


@contextlib.asynccontextmanager
async def scratch_database(server_url: str, prefix: str = "setu_data") -> AsyncIterator[str]:
    name = f"{prefix}_{uuid.uuid4().hex[:12]}"
    admin = await asyncpg.connect(server_url)
    try:
        await admin.execute(f"CREATE DATABASE {name}")
    finally:
        await admin.close()
    try:
        yield with_database(server_url, name)
    finally:
        admin = await asyncpg.connect(server_url)
        try:
            await admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        finally:
            await admin.close()


def postgres_config(url: str) -> dict[str, Any]:
    """The `postgres` provider's config for a URL without a password (the
    embedded server trusts local connections)."""
    parts = urlsplit(url)
    host = parse_qs(parts.query).get("host", [parts.hostname or "localhost"])[0]
    config: dict[str, Any] = {
        "host": host,
        "database": parts.path.lstrip("/"),
        "user": parts.username or "postgres",
    }
    if parts.port:
        config["port"] = parts.port
    return config


class OwnPostgres:
    """A PostgreSQL server of the test's own (pgserver, in a folder of its
    own), which the test may restart under a run: `pg_ctl restart -m fast`
    ends every session with AdminShutdown, and refuses connections until it
    is back."""

    def __init__(self, server: Any) -> None:
        self._server = server
        self.url: str = server.get_uri("postgres")

    async def restart(self) -> None:
        from pgserver._commands import pg_ctl  # type: ignore[import-untyped]

        def restart() -> None:
            pg_ctl(
                ["-w", "-m", "fast", "restart"],
                pgdata=self._server.pgdata,
                user=self._server.system_user,
                timeout=60,
            )

        await asyncio.to_thread(restart)


@contextlib.asynccontextmanager
async def own_postgres() -> AsyncIterator[OwnPostgres]:
    """A fresh PostgreSQL server for one test, deleted after it."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import pgserver  # type: ignore[attr-defined,unused-ignore]

    folder = Path(tempfile.mkdtemp(prefix="setu-test-own-pg-"))
    server = await asyncio.to_thread(
        pgserver.get_server,  # type: ignore[attr-defined]
        folder / "pg",
        cleanup_mode="delete",
    )
    try:
        yield OwnPostgres(server)
    finally:
        await asyncio.to_thread(server.cleanup)
