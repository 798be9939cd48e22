"""ReleaseTask over real gRPC: a drain or an outage hands a task back
without spending an attempt; a stale token is refused; outages are free only
up to outage_free_retries."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import asyncpg
import grpc
import pytest

from setu_client._proto.setu.v1 import agents_pb2 as pb
from setu_client._proto.setu.v1 import agents_pb2_grpc
from setu_client.channel import open_channel
from setu_server.models import JobState, TaskState
from setu_server.server import Running
from setu_server.store import jobs, tasks
from tests.factories import Tenant, make_task

Code = grpc.StatusCode
DRAIN = pb.RELEASE_REASON_DRAIN
OUTAGE = pb.RELEASE_REASON_OUTAGE


@pytest.fixture
async def agent(server: Running, tenant: Tenant) -> AsyncIterator[agents_pb2_grpc.AgentServiceStub]:
    async with open_channel(f"127.0.0.1:{server.port}", tenant.agent_token) as channel:
        yield agents_pb2_grpc.AgentServiceStub(channel)


async def _lease(agent: agents_pb2_grpc.AgentServiceStub) -> pb.Task:
    answer = await agent.LeaseTask(pb.LeaseTaskRequest(wait_seconds=10), timeout=30)
    assert answer.HasField("task")
    return answer.task


async def _code(call: object) -> grpc.StatusCode:
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await call  # type: ignore[misc]
    return info.value.code()


async def test_a_drained_task_is_pending_at_once_with_its_attempt_unspent(
    server: Running, agent: agents_pb2_grpc.AgentServiceStub, pool: asyncpg.Pool, tenant: Tenant
) -> None:
    task = await make_task(pool, tenant, max_attempts=2)
    for _ in range(3):  # more hand-backs than attempts: none is spent
        leased = await _lease(agent)
        assert leased.attempt == 1
        answer = await agent.ReleaseTask(
            pb.ReleaseTaskRequest(
                task_id=leased.id,
                lease_token=leased.lease_token,
                reason=DRAIN,
                checkpoint="extract of events, part 7",
                message="edge stopping",
            )
        )
        assert answer.free and answer.will_retry
        row = await tasks.get_task(pool, task.id)
        assert row is not None and row.state is TaskState.PENDING
        assert row.attempt == 1 and row.lease_token is None and row.run_after <= row.updated_at
    events = [e.message for e in await jobs.list_job_events(pool, task.job_id, after=0, limit=100)]
    assert (
        "edge stopping: task test handed back at extract of events, part 7; it runs again "
        "at once, no attempt spent (attempt 1 of 2)"
    ) in events
    job = await jobs.get_job(pool, task.job_id, tenant.workspace_id)
    assert job is not None and job.state is JobState.RUNNING


async def test_a_hand_back_with_a_stale_token_or_again_is_refused(
    server: Running, agent: agents_pb2_grpc.AgentServiceStub, pool: asyncpg.Pool, tenant: Tenant
) -> None:
    await make_task(pool, tenant)
    leased = await _lease(agent)
    stale = pb.ReleaseTaskRequest(task_id=leased.id, lease_token=str(uuid.uuid4()), reason=DRAIN)
    assert await _code(agent.ReleaseTask(stale)) == Code.FAILED_PRECONDITION
    live = pb.ReleaseTaskRequest(task_id=leased.id, lease_token=leased.lease_token, reason=DRAIN)
    await agent.ReleaseTask(live)
    assert await _code(agent.ReleaseTask(live)) == Code.FAILED_PRECONDITION
    # Its old token completes nothing either, nor fails it.
    ids = {"task_id": leased.id, "lease_token": leased.lease_token}
    assert await _code(agent.FailTask(pb.FailTaskRequest(**ids, error_message="late"))) == (
        Code.FAILED_PRECONDITION
    )
    no_reason = pb.ReleaseTaskRequest(task_id=leased.id, lease_token=leased.lease_token)
    assert await _code(agent.ReleaseTask(no_reason)) == Code.INVALID_ARGUMENT


@pytest.mark.server(task_retry_backoff_seconds=0.01, outage_free_retries=2)
async def test_outages_are_free_up_to_the_setting_then_spend_an_attempt(
    server: Running, agent: agents_pb2_grpc.AgentServiceStub, pool: asyncpg.Pool, tenant: Tenant
) -> None:
    task = await make_task(pool, tenant, max_attempts=3)
    answers = []
    for _ in range(3):
        leased = await _lease(agent)
        answer = await agent.ReleaseTask(
            pb.ReleaseTaskRequest(
                task_id=leased.id,
                lease_token=leased.lease_token,
                reason=OUTAGE,
                checkpoint="load of events, 3,000 rows written",
                message="postgres: connection refused",
            )
        )
        answers.append((leased.attempt, answer.free, answer.will_retry))
    assert answers == [(1, True, True), (1, True, True), (1, False, True)]
    row = await tasks.get_task(pool, task.id)
    assert row is not None and row.attempt == 2 and row.free_retries == 2
    events = [e.message for e in await jobs.list_job_events(pool, task.job_id, after=0, limit=100)]
    assert any(
        m.startswith("Task test lost its database on agent:")
        and "without spending an attempt (free retry 2 of 2; attempt 1 of 3)" in m
        for m in events
    ), events
    assert any(
        "postgres: connection refused (its 2 free retries for outages are spent)" in m
        and "(attempt 2 of 3)" in m
        for m in events
    ), events


@pytest.mark.server(task_retry_backoff_seconds=0.01)
async def test_a_task_leased_again_after_an_outage_carries_its_free_retries(
    server: Running, agent: agents_pb2_grpc.AgentServiceStub, pool: asyncpg.Pool, tenant: Tenant
) -> None:
    # The runtime reads it to tell an outage still going on from a wrong address.
    await make_task(pool, tenant, max_attempts=3)
    first = await _lease(agent)
    await agent.ReleaseTask(
        pb.ReleaseTaskRequest(
            task_id=first.id,
            lease_token=first.lease_token,
            reason=OUTAGE,
            message="postgres: connection refused",
        )
    )
    again = await _lease(agent)
    assert (first.free_retries, again.free_retries) == (0, 1)
    assert again.attempt == 1


async def test_a_hand_back_of_a_run_asked_to_cancel_ends_it(
    server: Running, agent: agents_pb2_grpc.AgentServiceStub, pool: asyncpg.Pool, tenant: Tenant
) -> None:
    task = await make_task(pool, tenant)
    leased = await _lease(agent)
    await pool.execute("UPDATE job SET cancel_requested = true WHERE id = $1", task.job_id)
    answer = await agent.ReleaseTask(
        pb.ReleaseTaskRequest(task_id=leased.id, lease_token=leased.lease_token, reason=DRAIN)
    )
    assert not answer.free and not answer.will_retry
    row = await tasks.get_task(pool, task.id)
    assert row is not None and row.state in (TaskState.FAILED, TaskState.CANCELLED)
