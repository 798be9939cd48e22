"""An agent's progress counts, over real gRPC, as a hostile agent may send
them: a count past the bound answers INVALID_ARGUMENT naming the field (the
TaskProgress / StreamProgress rules), a sum that would leave a bigint
answers INVALID_ARGUMENT too (the store's backstop for SQLSTATE 22003), never
INTERNAL, and the run is left as it was; a heartbeat's stream names merge into
the run's stream progress only where they are the run's own streams
(heartbeat_task in tasks.sql)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import asyncpg
import grpc
import pytest

from setu_client._proto.setu.v1 import agents_pb2 as pb
from setu_client._proto.setu.v1 import agents_pb2_grpc, common_pb2
from setu_client.channel import open_channel
from setu_server.models import (
    Job,
    JobKind,
    JobState,
    RunPlacement,
    RunSnapshot,
    TaskKind,
    WriteMode,
)
from setu_server.server import Running
from setu_server.store import jobs
from tests.factories import Tenant, make_task

Code = grpc.StatusCode
OWN = ("orders", "users")


@pytest.fixture
async def agent(server: Running, tenant: Tenant) -> AsyncIterator[agents_pb2_grpc.AgentServiceStub]:
    async with open_channel(f"127.0.0.1:{server.port}", tenant.agent_token) as channel:
        yield agents_pb2_grpc.AgentServiceStub(channel)


async def running_run(pool: asyncpg.Pool, tenant: Tenant, streams: tuple[str, ...]) -> Job:
    """A running run of `streams` (none: every stream the source offers),
    both stages on the tenant's agent."""
    taken = RunSnapshot(
        pipeline_name="p",
        source_connection_id=uuid.uuid4(),
        destination_connection_id=uuid.uuid4(),
        streams=streams,
        spec={},
        write_mode=WriteMode.APPEND,
        placement=RunPlacement(tenant.agent_id, tenant.agent_id),
    )
    return await jobs.insert_job(
        pool,
        id=uuid.uuid4(),
        workspace_id=tenant.workspace_id,
        kind=JobKind.RUN,
        state=JobState.RUNNING,
        now=None,
        params=taken.to_json(),
    )


async def leased(
    agent: agents_pb2_grpc.AgentServiceStub,
    pool: asyncpg.Pool,
    tenant: Tenant,
    job: Job,
    kind: TaskKind,
    payload: dict[str, object] | None = None,
) -> dict[str, str]:
    task = await make_task(pool, tenant, job=job, kind=kind, payload=payload)
    answer = await agent.LeaseTask(pb.LeaseTaskRequest(wait_seconds=5))
    assert answer.task.id == str(task.id)
    return {"task_id": answer.task.id, "lease_token": answer.task.lease_token}


async def refusal(call: object) -> grpc.aio.AioRpcError:
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await call  # type: ignore[misc]
    return info.value


async def the_run(pool: asyncpg.Pool, tenant: Tenant, job: Job) -> Job:
    found = await jobs.get_job(pool, job.id, tenant.workspace_id)
    assert found is not None
    return found


def beats(names: list[str]) -> list[common_pb2.StreamProgress]:
    return [common_pb2.StreamProgress(stream=n, rows_extracted=1, rows_loaded=1) for n in names]


async def test_counts_past_the_bound_answer_invalid_argument_and_leave_the_run_as_it_was(
    agent: agents_pb2_grpc.AgentServiceStub, pool: asyncpg.Pool, tenant: Tenant
) -> None:
    job = await running_run(pool, tenant, OWN)
    ids = await leased(agent, pool, tenant, job, TaskKind.LOAD, {"stream": "users"})
    await agent.Heartbeat(pb.HeartbeatRequest(**ids, progress=pb.TaskProgress(rows_written=7)))
    before = await the_run(pool, tenant, job)
    assert before.rows_loaded == 7

    huge = 2**62  # twice that leaves a bigint
    sent = [
        (pb.TaskProgress(rows_written=huge), "progress.rows_written"),
        (pb.TaskProgress(rows_written=huge, streams=beats(["users"])), "progress.rows_written"),
        (pb.TaskProgress(rows_read=-1), "progress.rows_read"),
        (
            pb.TaskProgress(streams=[common_pb2.StreamProgress(stream="users", rows_loaded=huge)]),
            "progress.streams[0].rows_loaded",
        ),
    ]
    for progress, field in sent * 2:
        error = await refusal(agent.Heartbeat(pb.HeartbeatRequest(**ids, progress=progress)))
        assert error.code() == Code.INVALID_ARGUMENT, error.details()
        assert field in (error.details() or "")
    after = await the_run(pool, tenant, job)
    assert (after.rows_loaded, after.stream_progress, after.version) == (
        7,
        before.stream_progress,
        before.version,
    )


async def test_a_sum_past_a_bigint_answers_invalid_argument_not_internal(
    agent: agents_pb2_grpc.AgentServiceStub, pool: asyncpg.Pool, tenant: Tenant
) -> None:
    """Counts within their bounds whose sum with what the run's books hold
    would leave a bigint (books written before the bounds): the store's
    backstop answers INVALID_ARGUMENT."""
    job = await running_run(pool, tenant, OWN)
    await pool.execute(
        "INSERT INTO job_output (job_id, stream, rows_loaded, updated_at, loaded_at)"
        " VALUES ($1, 'orders', $2, now(), now())",
        job.id,
        2**63 - 1,
    )
    ids = await leased(agent, pool, tenant, job, TaskKind.LOAD, {"stream": "users"})
    progress = pb.TaskProgress(rows_written=10**15)
    error = await refusal(agent.Heartbeat(pb.HeartbeatRequest(**ids, progress=progress)))
    assert error.code() == Code.INVALID_ARGUMENT, error.details()
    assert "out of range" in (error.details() or "")
    assert (await the_run(pool, tenant, job)).rows_loaded == 0


async def test_made_up_stream_names_leave_only_the_runs_own_streams(
    agent: agents_pb2_grpc.AgentServiceStub, pool: asyncpg.Pool, tenant: Tenant
) -> None:
    made_up = [f"made-up-{i}" for i in range(200)]
    job = await running_run(pool, tenant, OWN)
    extract = await leased(agent, pool, tenant, job, TaskKind.EXTRACT)
    # A runtime names a source's stream qualified: public.users is the run's users.
    names = ["orders", *made_up, "public.users", "users.x"]
    progress = pb.TaskProgress(rows_read=2, streams=beats(names))
    await agent.Heartbeat(pb.HeartbeatRequest(**extract, progress=progress))
    assert set((await the_run(pool, tenant, job)).stream_progress) == {"orders", "public.users"}

    # A load moves one stream: another of the run's, or made-up ones, are not its.
    other = await running_run(pool, tenant, OWN)
    load = await leased(agent, pool, tenant, other, TaskKind.LOAD, {"stream": "users"})
    progress = pb.TaskProgress(rows_written=1, streams=beats([*made_up, "orders", "users"]))
    await agent.Heartbeat(pb.HeartbeatRequest(**load, progress=progress))
    assert set((await the_run(pool, tenant, other)).stream_progress) == {"users"}


async def test_a_run_of_every_stream_keeps_at_most_a_thousand_names(
    agent: agents_pb2_grpc.AgentServiceStub, pool: asyncpg.Pool, tenant: Tenant
) -> None:
    job = await running_run(pool, tenant, ())
    ids = await leased(agent, pool, tenant, job, TaskKind.EXTRACT)
    for beat in range(3):
        names = [f"s{beat}-{i}" for i in range(1000)]
        progress = pb.TaskProgress(rows_read=1, streams=beats(names))
        await agent.Heartbeat(pb.HeartbeatRequest(**ids, progress=progress))
    kept = (await the_run(pool, tenant, job)).stream_progress
    assert set(kept) == {f"s0-{i}" for i in range(1000)}
