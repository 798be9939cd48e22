"""A closing server refuses new long-polls (WaitJob, WatchJob, LeaseTask)
with UNAVAILABLE and leases nothing more, so clients back off to another
replica instead of spinning on answers that never waited. The server's
stop() is held by its `draining` hook just after it closed the long-polls,
the window in which it still serves while its workers stop."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass

import asyncpg
import grpc
import pytest

from setu_client import RetryPolicy, SetuClient, Unavailable
from setu_client._proto.setu.v1 import agents_pb2 as apb
from setu_client._proto.setu.v1 import agents_pb2_grpc, jobs_pb2, jobs_pb2_grpc
from setu_client.channel import open_channel
from setu_server.models import Job, TaskState
from setu_server.server import Running
from setu_server.store import tasks
from tests.factories import Tenant, make_job, make_task, make_tenant
from tests.servers import count_waits, held_draining, in_process


@dataclass
class Closing:
    server: Running
    tenant: Tenant
    job: Job
    # WaitJob calls that reached the job service.
    waits: list[uuid.UUID]


@pytest.fixture
async def closing(database_url: str, pool: asyncpg.Pool) -> AsyncIterator[Closing]:
    """A server whose stop() has begun and is held while it drains."""
    tenant = await make_tenant(pool)
    job = await make_job(pool, tenant.workspace_id)
    async with in_process(database_url) as server:
        waits: list[uuid.UUID] = []
        count_waits(server, waits)
        async with held_draining(server):
            yield Closing(server, tenant, job, waits)


async def test_a_new_wait_job_is_refused_and_the_sdk_backs_off_instead_of_spinning(
    closing: Closing,
) -> None:
    address = f"127.0.0.1:{closing.server.port}"
    async with open_channel(address, closing.tenant.api_key) as channel:
        stub = jobs_pb2_grpc.JobOrchestrationServiceStub(channel)
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await stub.WaitJob(jobs_pb2.WaitJobRequest(job_id=str(closing.job.id)))
        assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            async for _ in stub.WatchJob(jobs_pb2.WatchJobRequest(job_id=str(closing.job.id))):
                pass
        assert refused.value.code() == grpc.StatusCode.UNAVAILABLE

    # A budget of one second of consecutive failures: the SDK's backoff
    # (0.1 s, doubling) fits a handful of calls in it, then gives up. A
    # server answering non-terminal at once instead resets the budget with
    # every answer, and the SDK would re-issue without pause until timeout.
    policy = RetryPolicy(initial_seconds=0.1, max_seconds=0.5, long_poll_budget_seconds=1.0)
    calls_before = len(closing.waits)
    async with SetuClient(address, closing.tenant.api_key, retry=policy) as client:
        with pytest.raises(Unavailable):
            await client.wait_for_job(str(closing.job.id), timeout=20)
    calls = len(closing.waits) - calls_before
    assert 1 <= calls <= 10, f"{calls} WaitJob calls: the SDK spun on a closing server"


async def test_a_closing_server_refuses_lease_task_and_leases_nothing(
    closing: Closing, pool: asyncpg.Pool
) -> None:
    task = await make_task(pool, closing.tenant)
    address = f"127.0.0.1:{closing.server.port}"
    async with open_channel(address, closing.tenant.agent_token) as channel:
        agent = agents_pb2_grpc.AgentServiceStub(channel)
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await agent.LeaseTask(apb.LeaseTaskRequest(wait_seconds=5), timeout=20)
        assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
    still = await tasks.get_task(pool, task.id)
    assert still is not None and still.state is TaskState.PENDING, "nothing was leased"
