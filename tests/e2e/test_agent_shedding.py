"""An agent whose target names several replicas moves to the next one as
soon as its replica refuses LeaseTask for shutting down, and leases there
at once: the closing replica hears one LeaseTask from it, not one per
backoff while it drains (setu_agent/runtime/grpc_source.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import asyncpg
import grpc
import pytest

from setu_agent.runtime.grpc_source import GrpcTaskSource
from setu_client.channel import open_channel
from setu_client.errors import ServerClosing
from setu_server.models import Task
from setu_server.server import Running
from tests.factories import make_task, make_tenant
from tests.servers import held_draining, in_process


@pytest.fixture
async def a_draining_and_b(database_url: str) -> AsyncIterator[tuple[Running, Running, list[str]]]:
    """Replica A with its stop() begun and held while it drains, replica B
    serving, and the runtimes that asked A for a lease meanwhile."""
    async with in_process(database_url) as a, in_process(database_url) as b:
        asked: list[str] = []
        lease_many = a.tasks.lease_many

        async def counted(runtime: str, wait_seconds: float, max_tasks: int) -> list[Task]:
            asked.append(runtime)
            return await lease_many(runtime, wait_seconds, max_tasks)

        a.tasks.lease_many = counted  # type: ignore[method-assign]
        async with held_draining(a):
            yield a, b, asked


@pytest.mark.parametrize("moves", [True, False], ids=["several addresses", "one address"])
async def test_an_agent_leases_from_the_next_replica_when_its_own_is_closing(
    a_draining_and_b: tuple[Running, Running, list[str]], pool: asyncpg.Pool, moves: bool
) -> None:
    a, b, asked = a_draining_and_b
    tenant = await make_tenant(pool)
    task = await make_task(pool, tenant)
    target = f"ipv4:127.0.0.1:{a.port},127.0.0.1:{b.port}" if moves else f"127.0.0.1:{a.port}"

    def reconnect(to: str) -> grpc.aio.Channel:
        return open_channel(to, tenant.agent_token)

    async with open_channel(target, tenant.agent_token) as channel:
        source = GrpcTaskSource(channel, target=target, reconnect=reconnect)
        try:
            if moves:
                leased = await source.lease(wait_seconds=5)
                assert [t.id for t in leased] == [str(task.id)], "leased from B at once"
            else:
                with pytest.raises(ServerClosing):  # nowhere to go: the loop backs off
                    await source.lease(wait_seconds=5)
        finally:
            await source.close()
    assert len(asked) == 1, "A heard one LeaseTask from the agent"
    assert asked == [str(tenant.agent_id)]
