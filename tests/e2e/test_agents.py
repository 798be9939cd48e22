"""Real setu-agent processes against a real setu-server process."""

from __future__ import annotations

import asyncio
import signal
import uuid
from pathlib import Path

import asyncpg
import grpc
import pytest

from setu_client import SetuClient
from setu_client._proto.setu.v1 import agents_pb2 as pb
from setu_client._proto.setu.v1 import agents_pb2_grpc, common_pb2
from setu_client.channel import open_channel
from setu_server.models import JobState, TaskState
from setu_server.store import jobs, tasks
from tests.factories import Tenant, make_task
from tests.servers import (
    agent_process,
    agent_with_stderr,
    free_port,
    line_with,
    server_process,
    wait_healthy,
)

# Short leases and a brisk reaper, so a dead agent's task comes back in seconds.
FAST = {
    "SETU_LEASE_TTL_SECONDS": "2",
    "SETU_REAPER_INTERVAL_SECONDS": "0.2",
    "SETU_TASK_RETRY_BACKOFF_SECONDS": "0.05",
}


async def _until_running(client: SetuClient, job_id: uuid.UUID) -> None:
    async for snapshot in client.watch_job(str(job_id)):
        if snapshot.state == common_pb2.JOB_STATE_RUNNING:
            return
    raise AssertionError("the job ended before it ran")


async def test_kill_9_mid_task_is_reaped_and_finished_by_another_agent_exactly_once(
    database_url: str, pool: asyncpg.Pool, tenant: Tenant, tmp_path: Path
) -> None:
    task = await make_task(pool, tenant, payload={"mode": "hold"})
    env = {"SETU_DATABASE_URL": database_url, **FAST}
    with server_process(env, tmp_path / "server.log") as (_, port):
        await wait_healthy(port)
        async with SetuClient(f"127.0.0.1:{port}", tenant.api_key) as client:
            with agent_process(port, tenant.agent_token, tmp_path / "a.log") as first:
                await asyncio.wait_for(_until_running(client, task.job_id), 60)
                held = await tasks.get_task(pool, task.id)
                assert held is not None and held.state is TaskState.LEASED
                first.send_signal(signal.SIGKILL)
                await asyncio.to_thread(first.wait)
            with agent_process(port, tenant.agent_token, tmp_path / "b.log"):
                outcome = await asyncio.wait_for(client.wait_for_job(str(task.job_id)), 60)
        assert outcome.state == common_pb2.JOB_STATE_SUCCEEDED

        done = await tasks.get_task(pool, task.id)
        assert done is not None and done.state is TaskState.SUCCEEDED and done.attempt == 2
        assert done.result == {"kind": "test", "ok": True, "message": "done on attempt 2"}
        timeline = await jobs.list_job_events(pool, task.job_id, after=0, limit=50)
        events = [e.message for e in timeline]
        assert sum("succeeded" in m for m in events) == 1
        assert any("stopped heartbeating; requeued (attempt 2 of 3)" in m for m in events)

        # The dead agent's lease can report nothing any more.
        async with open_channel(f"127.0.0.1:{port}", tenant.agent_token) as channel:
            stub = agents_pb2_grpc.AgentServiceStub(channel)
            with pytest.raises(grpc.aio.AioRpcError) as info:
                await stub.CompleteTask(
                    pb.CompleteTaskRequest(task_id=str(task.id), lease_token=str(held.lease_token))
                )
        assert info.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert "lease lost" in (info.value.details() or "")


async def test_an_agent_started_before_its_server_backs_off_then_works(
    database_url: str, pool: asyncpg.Pool, tenant: Tenant, tmp_path: Path
) -> None:
    task = await make_task(pool, tenant)
    port = free_port()
    agent = await agent_with_stderr(port, tenant.agent_token)
    try:
        # Nothing listens yet: the agent says it is backing off.
        await asyncio.wait_for(line_with(agent, "backing off"), 60)
        with server_process({"SETU_DATABASE_URL": database_url}, tmp_path / "s.log", port):
            await wait_healthy(port)
            async with SetuClient(f"127.0.0.1:{port}", tenant.api_key) as client:
                outcome = await asyncio.wait_for(client.wait_for_job(str(task.job_id)), 90)
    finally:
        agent.kill()
        await agent.wait()
    assert outcome.state == common_pb2.JOB_STATE_SUCCEEDED


async def test_sigterm_hands_a_running_task_back(
    database_url: str, pool: asyncpg.Pool, tenant: Tenant, tmp_path: Path
) -> None:
    task = await make_task(pool, tenant, payload={"mode": "hold"})
    env = {"SETU_DATABASE_URL": database_url, **FAST}
    with server_process(env, tmp_path / "server.log") as (_, port):
        await wait_healthy(port)
        agent = await agent_with_stderr(port, tenant.agent_token, SETU_GRACE_SECONDS="0.2")
        try:
            # The agent's own word that its handler runs the task.
            await asyncio.wait_for(line_with(agent, "task started"), 60)
            agent.send_signal(signal.SIGTERM)
            assert await asyncio.wait_for(agent.wait(), 30) == 0
        finally:
            if agent.returncode is None:
                agent.kill()
                await agent.wait()
        handed_back = await tasks.get_task(pool, task.id)
        assert handed_back is not None
        # A drain is not a failure: pending again at once, no attempt spent.
        assert (handed_back.state, handed_back.attempt) == (TaskState.PENDING, 1)
        assert handed_back.run_after <= handed_back.updated_at
        assert "stopping" in handed_back.error_message
        events = await jobs.list_job_events(pool, task.job_id, after=0, limit=100)
        assert any("handed back at" in e.message for e in events), [e.message for e in events]


async def test_cancel_reaches_the_agent_through_its_heartbeat(
    database_url: str, pool: asyncpg.Pool, tenant: Tenant, tmp_path: Path
) -> None:
    task = await make_task(pool, tenant, payload={"mode": "until_cancelled"})
    env = {"SETU_DATABASE_URL": database_url, **FAST}
    with server_process(env, tmp_path / "server.log") as (_, port):
        await wait_healthy(port)
        async with SetuClient(f"127.0.0.1:{port}", tenant.api_key) as client:
            with agent_process(port, tenant.agent_token, tmp_path / "a.log"):
                await asyncio.wait_for(_until_running(client, task.job_id), 60)
                requested = await client.cancel_job(str(task.job_id), "stop please")
                assert requested.cancel_requested
                outcome = await asyncio.wait_for(client.wait_for_job(str(task.job_id)), 60)
    assert outcome.state == common_pb2.JOB_STATE_CANCELLED
    assert outcome.error_message == "cancelled: stop please"
    job = await jobs.get_job(pool, task.job_id, tenant.workspace_id)
    assert job is not None and job.state is JobState.CANCELLED
