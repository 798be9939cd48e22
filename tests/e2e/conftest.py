"""What most e2e tests start from: a tenant (and another one), an in-process
server on the test's own database, and an SDK client of the tenant.

A module changes the server by overriding `clock` (the system clock unless
told) or `server_settings` (the settings every server of the module gets);
one test changes it with `@pytest.mark.server(**settings)`."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import pytest

from setu_client import SetuClient
from setu_client.clock import Clock, SystemClock
from setu_server.server import Running
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
