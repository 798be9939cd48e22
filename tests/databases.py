"""Scratch PostgreSQL databases for data-flow tests (sources and
destinations), on the session's server, and the provider config that
reaches them."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator
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
