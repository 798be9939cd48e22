"""LeaseTask's max_tasks and CompleteTask's eager lease (lease_next), over
real gRPC: a task handed out in a completion's answer is fenced, counted and
cancellable like any other."""

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
Stub = agents_pb2_grpc.AgentServiceStub


@pytest.fixture
async def agent(server: Running, tenant: Tenant) -> AsyncIterator[Stub]:
    async with open_channel(f"127.0.0.1:{server.port}", tenant.agent_token) as channel:
        yield agents_pb2_grpc.AgentServiceStub(channel)


async def _error(call: object) -> grpc.aio.AioRpcError:
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await call  # type: ignore[misc]
    return info.value


def _done(task: pb.Task, *, lease_next: bool = True, token: str = "") -> pb.CompleteTaskRequest:
    return pb.CompleteTaskRequest(
        task_id=task.id,
        lease_token=token or task.lease_token,
        test=pb.TestResult(ok=True),
        lease_next=lease_next,
    )


async def _one(agent: Stub) -> pb.Task:
    answer = await agent.LeaseTask(pb.LeaseTaskRequest(wait_seconds=5))
    assert answer.HasField("task")
    return answer.task


# -- max_tasks


async def test_max_tasks_leases_up_to_that_many_oldest_first(
    server: Running, agent: Stub, pool: asyncpg.Pool, tenant: Tenant
) -> None:
    made = [await make_task(pool, tenant) for _ in range(3)]
    first = await agent.LeaseTask(pb.LeaseTaskRequest(wait_seconds=0, max_tasks=2))
    assert not first.HasField("task"), "a caller that asks for many reads `tasks`"
    assert len(first.tasks) == 2
    rest = await agent.LeaseTask(pb.LeaseTaskRequest(wait_seconds=0, max_tasks=64))
    assert len(rest.tasks) == 1
    leased = [t.id for t in [*first.tasks, *rest.tasks]]
    assert sorted(leased) == sorted(str(t.id) for t in made), "each once, none twice"
    assert len({t.lease_token for t in [*first.tasks, *rest.tasks]}) == 3, "a token each"
    empty = await agent.LeaseTask(pb.LeaseTaskRequest(wait_seconds=0, max_tasks=4))
    assert list(empty.tasks) == [] and not empty.HasField("task")


async def test_a_lease_without_max_tasks_takes_one_in_task(
    server: Running, agent: Stub, pool: asyncpg.Pool, tenant: Tenant
) -> None:
    for _ in range(2):
        await make_task(pool, tenant)
    answer = await agent.LeaseTask(pb.LeaseTaskRequest(wait_seconds=0))
    assert answer.HasField("task") and list(answer.tasks) == []
    left = await pool.fetchval("SELECT count(*) FROM task WHERE state = 'pending'")
    assert left == 1, "a runtime that predates max_tasks gets one task"


@pytest.mark.parametrize("asked", [0, -1, 65])
async def test_max_tasks_outside_1_to_64_is_refused(
    server: Running, agent: Stub, pool: asyncpg.Pool, tenant: Tenant, asked: int
) -> None:
    await make_task(pool, tenant)
    error = await _error(agent.LeaseTask(pb.LeaseTaskRequest(wait_seconds=0, max_tasks=asked)))
    assert error.code() == Code.INVALID_ARGUMENT
    assert "max_tasks" in (error.details() or "")
    assert await pool.fetchval("SELECT count(*) FROM task WHERE state = 'leased'") == 0


# -- the eager lease


async def test_a_completion_hands_out_the_next_task_with_a_live_lease(
    server: Running, agent: Stub, pool: asyncpg.Pool, tenant: Tenant
) -> None:
    first_task = await make_task(pool, tenant)
    second_task = await make_task(pool, tenant)
    first = await _one(agent)
    assert first.id == str(first_task.id)
    answer = await agent.CompleteTask(_done(first))
    assert answer.HasField("next") and answer.next.id == str(second_task.id)
    beat = await agent.Heartbeat(
        pb.HeartbeatRequest(task_id=answer.next.id, lease_token=answer.next.lease_token)
    )
    assert not beat.cancel_requested, "the eager lease is live"
    moved = await jobs.get_job(pool, second_task.job_id, tenant.workspace_id)
    assert moved is not None and moved.state is JobState.RUNNING
    last = await agent.CompleteTask(_done(answer.next))
    assert not last.HasField("next"), "nothing left to hand out"
    plain = await agent.CompleteTask(_done(answer.next, lease_next=False))
    assert not plain.HasField("next")


async def test_a_refused_completion_hands_out_nothing_and_tokens_stay_fenced(
    server: Running, agent: Stub, pool: asyncpg.Pool, tenant: Tenant
) -> None:
    await make_task(pool, tenant)
    waiting = await make_task(pool, tenant)
    first = await _one(agent)
    stale = await _error(agent.CompleteTask(_done(first, token=str(uuid.uuid4()))))
    assert stale.code() == Code.FAILED_PRECONDITION
    row = await tasks.get_task(pool, waiting.id)
    assert row is not None and row.state is TaskState.PENDING, "nothing leased for a refusal"

    answer = await agent.CompleteTask(_done(first))
    handed = answer.next
    assert handed.id == str(waiting.id) and handed.lease_token != first.lease_token
    # The completed lease's token cannot speak for the task handed out.
    borrowed = pb.HeartbeatRequest(task_id=handed.id, lease_token=first.lease_token)
    assert (await _error(agent.Heartbeat(borrowed))).code() == Code.FAILED_PRECONDITION
    wrong = await _error(agent.CompleteTask(_done(handed, token=first.lease_token)))
    assert wrong.code() == Code.FAILED_PRECONDITION
    await agent.CompleteTask(_done(handed, lease_next=False))
    row = await tasks.get_task(pool, waiting.id)
    assert row is not None and row.state is TaskState.SUCCEEDED


async def test_a_retried_task_handed_out_eagerly_counts_its_attempt(
    server: Running, agent: Stub, pool: asyncpg.Pool, tenant: Tenant
) -> None:
    retried = await make_task(pool, tenant)
    other = await make_task(pool, tenant)
    first = await _one(agent)
    assert first.id == str(retried.id) and first.attempt == 1
    await agent.FailTask(
        pb.FailTaskRequest(
            task_id=first.id, lease_token=first.lease_token, error_message="x", retryable=True
        )
    )
    second = await _one(agent)  # the retry waits out its backoff
    assert second.id == str(other.id)
    # Eligible again now rather than after its backoff.
    await pool.execute("UPDATE task SET run_after = created_at WHERE id = $1", retried.id)
    answer = await agent.CompleteTask(_done(second))
    assert answer.next.id == str(retried.id)
    assert (answer.next.attempt, answer.next.max_attempts) == (2, retried.max_attempts)


async def test_a_cancel_reaches_a_task_handed_out_eagerly(
    server: Running, agent: Stub, pool: asyncpg.Pool, tenant: Tenant
) -> None:
    await make_task(pool, tenant)
    eager = await make_task(pool, tenant)
    first = await _one(agent)
    handed = (await agent.CompleteTask(_done(first))).next
    assert handed.id == str(eager.id)
    await server.jobs.cancel(tenant.workspace_id, eager.job_id, "enough")
    live = {"task_id": handed.id, "lease_token": handed.lease_token}
    beat = await agent.Heartbeat(pb.HeartbeatRequest(**live))
    assert beat.cancel_requested, "the runtime holding it learns of the cancel"
    await agent.FailTask(pb.FailTaskRequest(**live, error_message="cancelled", retryable=True))
    job = await jobs.get_job(pool, eager.job_id, tenant.workspace_id)
    assert job is not None and job.state is JobState.CANCELLED
