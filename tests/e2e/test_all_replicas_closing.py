"""When every replica a target names is shutting down, the SDK moves from
one to the next once each, then backs off as it does for one closing
server: it never spins between them (setu_client/_client.py, moves)."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator

import asyncpg
import pytest

from setu_client import RetryPolicy, SetuClient, Unavailable
from setu_server.models import JobState
from setu_server.server import Running
from tests.factories import make_job, make_tenant
from tests.servers import count_waits, held_draining, in_process


@contextlib.asynccontextmanager
async def draining(database_url: str, waits: list[uuid.UUID]) -> AsyncIterator[Running]:
    """A server whose stop() has begun and is held while it drains; the
    WaitJob calls that reach it are added to `waits`."""
    async with in_process(database_url) as server:
        count_waits(server, waits)
        async with held_draining(server):
            yield server


async def test_every_replica_closing_is_tried_once_each_then_backed_off_from(
    database_url: str, pool: asyncpg.Pool
) -> None:
    tenant = await make_tenant(pool)
    job = await make_job(pool, tenant.workspace_id, state=JobState.RUNNING)
    waits: list[uuid.UUID] = []
    async with draining(database_url, waits) as a, draining(database_url, waits) as b:
        target = f"ipv4:127.0.0.1:{a.port},127.0.0.1:{b.port}"
        # One second of consecutive failures: a handful of backed-off calls.
        policy = RetryPolicy(initial_seconds=0.1, max_seconds=0.5, long_poll_budget_seconds=1.0)
        async with SetuClient(target, tenant.api_key, retry=policy) as client:
            with pytest.raises(Unavailable):
                await client.wait_for_job(str(job.id), timeout=20)
    assert 2 <= len(waits) <= 30, f"{len(waits)} WaitJob calls: the SDK spun between replicas"
