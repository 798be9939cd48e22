"""SetuClient against real servers: retries, budgets, closing."""

from __future__ import annotations

import asyncio
import signal
import uuid
from pathlib import Path

import asyncpg
import pytest

from setu_client import ClientClosed, RetryPolicy, SetuClient
from setu_client._proto.setu.v1 import common_pb2
from setu_client.errors import Unavailable
from setu_server.models import JobState
from setu_server.store import jobs
from tests.factories import make_job, make_tenant
from tests.servers import free_port, in_process, server_process, wait_healthy


async def test_wait_for_job_rides_out_a_server_restart(
    database_url: str, pool: asyncpg.Pool, tmp_path: Path
) -> None:
    tenant = await make_tenant(pool)
    job = await make_job(pool, tenant.workspace_id)
    port = free_port()
    env = {"SETU_DATABASE_URL": database_url}
    async with SetuClient(
        f"127.0.0.1:{port}", tenant.api_key, retry=RetryPolicy(max_seconds=0.5)
    ) as client:
        with server_process(env, tmp_path / "first.log", port=port) as (first, _):
            await wait_healthy(port)
            waiting = asyncio.create_task(client.wait_for_job(str(job.id)))
            first.send_signal(signal.SIGKILL)
            await asyncio.to_thread(first.wait)
        with server_process(env, tmp_path / "second.log", port=port):
            await wait_healthy(port)
            await jobs.transition_job(pool, job.id, JobState.RUNNING, now=None, message="r")
            await jobs.transition_job(pool, job.id, JobState.SUCCEEDED, now=None, message="d")
            answer = await asyncio.wait_for(waiting, 60)
    assert answer.state == common_pb2.JOB_STATE_SUCCEEDED


@pytest.mark.looptime(noop_cycles=5000)
async def test_an_unreachable_server_exhausts_the_retry_budget() -> None:
    loop = asyncio.get_running_loop()
    port = free_port()  # nothing listens here
    policy = RetryPolicy(initial_seconds=0.5, max_seconds=5, budget_seconds=120)
    async with SetuClient(f"127.0.0.1:{port}", "setu_ak_x", retry=policy) as client:
        started = loop.time()
        with pytest.raises(Unavailable):
            await client.wait_for_job(str(uuid.uuid4()))
        assert loop.time() - started > 119.99


async def test_closing_the_client_ends_parked_waits_cleanly(
    database_url: str, pool: asyncpg.Pool
) -> None:
    tenant = await make_tenant(pool)
    job = await make_job(pool, tenant.workspace_id)
    parked = asyncio.Event()

    async def mark(job_id: uuid.UUID) -> None:
        parked.set()

    async with in_process(database_url) as server:
        server.jobs.hooks.after_read = mark
        client = SetuClient(f"127.0.0.1:{server.port}", tenant.api_key)
        waiting = asyncio.create_task(client.wait_for_job(str(job.id)))
        await parked.wait()
        await client.close()
        with pytest.raises(ClientClosed):
            await asyncio.wait_for(waiting, 10)
        with pytest.raises(ClientClosed):
            await client.get_job(str(job.id))
