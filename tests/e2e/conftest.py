"""What most e2e tests start from: a tenant (and another one), an in-process
server on the test's own database, and an SDK client of the tenant.

A module changes the server by overriding `clock` (the system clock unless
told) or `server_settings` (the settings every server of the module gets);
one test changes it with `@pytest.mark.server(**settings)`. `client_for`
opens servers with settings of a test's own choosing; `databases` gives a
source and a destination database."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from setu_client import SetuClient
from setu_client.clock import Clock, SystemClock
from setu_server.server import Running
from tests.databases import scratch_database
from tests.factories import Tenant, make_tenant
from tests.servers import in_process


@pytest.fixture
async def tenant(pool: asyncpg.Pool) -> Tenant:
    return await make_tenant(pool)


@pytest.fixture
async def other(pool: asyncpg.Pool) -> Tenant:
    """A second workspace, for what one tenant must not see of another."""
    return await make_tenant(pool)


@pytest.fixture
def clock() -> Clock:
    return SystemClock()


@pytest.fixture
def server_settings() -> dict[str, Any]:
    return {}


@pytest.fixture
async def server(
    database_url: str,
    clock: Clock,
    server_settings: dict[str, Any],
    request: pytest.FixtureRequest,
) -> AsyncIterator[Running]:
    marker = request.node.get_closest_marker("server")
    settings = server_settings | (marker.kwargs if marker else {})
    async with in_process(database_url, clock, **settings) as running:
        yield running


@pytest.fixture
async def client(server: Running, tenant: Tenant) -> AsyncIterator[SetuClient]:
    async with SetuClient(f"127.0.0.1:{server.port}", tenant.api_key) as c:
        yield c


@pytest.fixture
async def browser() -> AsyncIterator[Any]:
    """Debian's Chromium through Playwright (tests/e2e/monitor_helpers.py)."""
    # Here, not at the top: only the monitor's browser tests pay for Playwright.
    from tests.e2e.monitor_helpers import launched_chromium

    async with launched_chromium() as launched:
        yield launched


@pytest.fixture
async def databases(pg_server_url: str) -> AsyncIterator[tuple[str, str]]:
    async with (
        scratch_database(pg_server_url) as source,
        scratch_database(pg_server_url) as destination,
    ):
        yield source, destination


@pytest.fixture
async def client_for(database_url: str, tenant: Tenant, tmp_path: Path) -> AsyncIterator[Any]:
    """Opens an in-process server with the given settings and an SDK client on it."""
    stack: list[Any] = []

    async def open_(**settings: Any) -> tuple[Running, SetuClient]:
        settings = {
            "data_dir": tmp_path / "server",
            "task_retry_backoff_seconds": 0.05,
        } | settings
        server_cm = in_process(database_url, **settings)
        server = await server_cm.__aenter__()
        client = SetuClient(f"127.0.0.1:{server.port}", tenant.api_key)
        await client.__aenter__()
        stack.append((server_cm, client))
        return server, client

    yield open_
    for server_cm, client in reversed(stack):
        await client.__aexit__(None, None, None)
        await server_cm.__aexit__(None, None, None)
