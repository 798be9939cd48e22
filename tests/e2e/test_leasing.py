"""LeaseTask, Heartbeat, CompleteTask and FailTask over real gRPC."""

from __future__ import annotations

import asyncio
import uuid
from collections import Counter
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import asyncpg
import grpc
import pytest

from setu_client._proto.setu.v1 import admin_pb2, admin_pb2_grpc, agents_pb2_grpc
from setu_client._proto.setu.v1 import agents_pb2 as pb
from setu_client.channel import open_channel
from setu_client.clock import FakeClock
from setu_server.models import JobState, TaskKind, TaskState
from setu_server.server import Running
from setu_server.store import jobs, tasks
from tests.factories import Tenant, make_task, make_tenant
from tests.servers import ADMIN_TOKEN, in_process, server_process, wait_healthy

Code = grpc.StatusCode


@pytest.fixture
async def agent(server: Running, tenant: Tenant) -> AsyncIterator[agents_pb2_grpc.AgentServiceStub]:
    async with open_channel(f"127.0.0.1:{server.port}", tenant.agent_token) as channel:
        yield agents_pb2_grpc.AgentServiceStub(channel)


async def _code(call: object) -> grpc.StatusCode:
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await call  # type: ignore[misc]
    return info.value.code()


@pytest.mark.server(lease_poll_seconds=3600.0)
async def test_a_task_inserted_while_parked_is_leased_through_the_notification(
    server: Running, agent: agents_pb2_grpc.AgentServiceStub, pool: asyncpg.Pool, tenant: Tenant
) -> None:
    parked = asyncio.Event()

    async def mark(runtime: str) -> None:
        parked.set()

    server.tasks.hooks.parked = mark
    lease = asyncio.ensure_future(agent.LeaseTask(pb.LeaseTaskRequest(wait_seconds=30), timeout=45))
    await parked.wait()
    task = await make_task(pool, tenant)
    # With an hour-long fallback poll, only the notification can deliver it
    # before the 30 s window would end empty.
    answer = await asyncio.wait_for(lease, 20)
    assert answer.task.id == str(task.id)
    assert answer.task.kind == pb.TASK_KIND_TEST and answer.task.attempt == 1
    job = await jobs.get_job(pool, task.job_id, tenant.workspace_id)
    assert job is not None and job.state is JobState.RUNNING


@pytest.mark.looptime(noop_cycles=5000)
async def test_lease_answers_empty_at_the_30_second_cap(
    server: Running, agent: agents_pb2_grpc.AgentServiceStub
) -> None:
    loop = asyncio.get_running_loop()
    for asked in (30, 600):
        started = loop.time()
        answer = await agent.LeaseTask(pb.LeaseTaskRequest(wait_seconds=asked), timeout=75)
        assert not answer.HasField("task")
        # The cap, not sooner (the fake clock may run on to the next timer
        # while the answer crosses the real socket).
        assert 29.99 < loop.time() - started < 45


async def test_stale_tokens_are_refused_and_a_repeated_completion_is_recorded_once(
    server: Running, agent: agents_pb2_grpc.AgentServiceStub, pool: asyncpg.Pool, tenant: Tenant
) -> None:
    task = await make_task(pool, tenant)
    leased = (await agent.LeaseTask(pb.LeaseTaskRequest(wait_seconds=5))).task
    stale = str(uuid.uuid4())
    ids = {"task_id": leased.id, "lease_token": stale}
    assert await _code(agent.Heartbeat(pb.HeartbeatRequest(**ids))) == Code.FAILED_PRECONDITION
    assert await _code(agent.CompleteTask(pb.CompleteTaskRequest(**ids))) == (
        Code.FAILED_PRECONDITION
    )
    assert (
        await _code(agent.FailTask(pb.FailTaskRequest(**ids, error_message="x")))
        == Code.FAILED_PRECONDITION
    )

    live = {"task_id": leased.id, "lease_token": leased.lease_token}
    beat = await agent.Heartbeat(pb.HeartbeatRequest(**live))
    assert not beat.cancel_requested
    done = pb.CompleteTaskRequest(**live, test=pb.TestResult(ok=True, message="fine"))
    await agent.CompleteTask(done)
    await agent.CompleteTask(done)  # the same completion again: OK, no effect

    row = await tasks.get_task(pool, task.id)
    assert row is not None and row.result == {"kind": "test", "ok": True, "message": "fine"}
    job = await jobs.get_job(pool, task.job_id, tenant.workspace_id)
    assert job is not None and job.state is JobState.SUCCEEDED
    assert job.result == {"kind": "test", "ok": True, "message": "fine"}
    events = await jobs.list_job_events(pool, task.job_id, after=0, limit=100)
    assert sum("succeeded" in e.message for e in events) == 1
    assert await _code(agent.Heartbeat(pb.HeartbeatRequest(**live))) == Code.FAILED_PRECONDITION
    unknown = {"task_id": str(uuid.uuid4()), "lease_token": leased.lease_token}
    assert await _code(agent.Heartbeat(pb.HeartbeatRequest(**unknown))) == Code.NOT_FOUND


async def test_another_agents_task_is_not_found(
    server: Running, agent: agents_pb2_grpc.AgentServiceStub, pool: asyncpg.Pool, tenant: Tenant
) -> None:
    other = await make_tenant(pool)
    task = await make_task(pool, other)
    ids = {"task_id": str(task.id), "lease_token": str(uuid.uuid4())}
    assert await _code(agent.Heartbeat(pb.HeartbeatRequest(**ids))) == Code.NOT_FOUND
    answer = await agent.LeaseTask(pb.LeaseTaskRequest(wait_seconds=0))
    assert not answer.HasField("task")


async def test_a_lease_token_is_honoured_only_from_the_runtime_holding_the_lease(
    server: Running, agent: agents_pb2_grpc.AgentServiceStub, pool: asyncpg.Pool, tenant: Tenant
) -> None:
    """Agent B holding agent A's live lease token can neither beat, complete,
    fail nor fetch the spec of A's task: NOT_FOUND, and nothing changes."""
    extract = await make_task(pool, tenant, kind=TaskKind.EXTRACT)
    await make_task(pool, tenant)
    held = [(await agent.LeaseTask(pb.LeaseTaskRequest(wait_seconds=5))).task for _ in range(2)]
    other = await make_tenant(pool)
    async with open_channel(f"127.0.0.1:{server.port}", other.agent_token) as channel:
        thief = agents_pb2_grpc.AgentServiceStub(channel)
        for leased in held:
            ids = {"task_id": leased.id, "lease_token": leased.lease_token}
            progress = pb.HeartbeatRequest(**ids, progress=pb.TaskProgress(rows_read=666))
            calls = [
                thief.Heartbeat(progress),
                thief.CompleteTask(
                    pb.CompleteTaskRequest(**ids, test=pb.TestResult(ok=True, message="forged"))
                ),
                thief.FailTask(pb.FailTaskRequest(**ids, error_message="forged")),
                thief.GetExtractSpec(pb.GetExtractSpecRequest(**ids)),
                thief.GetLoadSpec(pb.GetLoadSpecRequest(**ids)),
            ]
            for call in calls:
                assert await _code(call) == Code.NOT_FOUND
    for leased in held:
        row = await tasks.get_task(pool, uuid.UUID(leased.id))
        assert row is not None and row.state is TaskState.LEASED
        assert row.result is None and not row.error_message and not row.progress
        job = await jobs.get_job(pool, row.job_id, tenant.workspace_id)
        assert job is not None and job.state is JobState.RUNNING
    assert held[0].id == str(extract.id)


@pytest.mark.server(task_retry_backoff_seconds=0.01)
async def test_a_task_failing_every_attempt_fails_its_job_with_the_error(
    server: Running, agent: agents_pb2_grpc.AgentServiceStub, pool: asyncpg.Pool, tenant: Tenant
) -> None:
    task = await make_task(pool, tenant, max_attempts=3)
    outcomes = []
    for attempt in (1, 2, 3):
        leased = (await agent.LeaseTask(pb.LeaseTaskRequest(wait_seconds=10), timeout=30)).task
        assert leased.attempt == attempt
        answer = await agent.FailTask(
            pb.FailTaskRequest(
                task_id=leased.id,
                lease_token=leased.lease_token,
                error_message=f"disk full (try {attempt})",
                retryable=True,
            )
        )
        outcomes.append(answer.will_retry)
    assert outcomes == [True, True, False]
    job = await jobs.get_job(pool, task.job_id, tenant.workspace_id)
    assert job is not None and job.state is JobState.FAILED
    assert job.error_message == "runtime test: disk full (try 3)"


async def test_a_non_retryable_failure_fails_at_once(
    server: Running, agent: agents_pb2_grpc.AgentServiceStub, pool: asyncpg.Pool, tenant: Tenant
) -> None:
    task = await make_task(pool, tenant, max_attempts=5)
    leased = (await agent.LeaseTask(pb.LeaseTaskRequest(wait_seconds=5))).task
    answer = await agent.FailTask(
        pb.FailTaskRequest(
            task_id=leased.id, lease_token=leased.lease_token, error_message="bad config"
        )
    )
    assert not answer.will_retry
    job = await jobs.get_job(pool, task.job_id, tenant.workspace_id)
    assert job is not None and job.error_message == "runtime test: bad config"


async def test_a_cloud_task_of_an_unknown_kind_fails_clearly_and_once(
    server: Running, pool: asyncpg.Pool, tenant: Tenant
) -> None:
    from setu_client import SetuClient

    # An extract runs at the edge only: the cloud's part of a run is `migrate`.
    task = await make_task(pool, tenant, cloud=True, kind=TaskKind.EXTRACT)
    async with SetuClient(f"127.0.0.1:{server.port}", tenant.api_key) as client:
        outcome = await asyncio.wait_for(client.wait_for_job(str(task.job_id)), 30)
    assert outcome.error_message.startswith(
        "runtime extract: cloud worker cannot run tasks of kind 'extract'"
    )
    row = await tasks.get_task(pool, task.id)
    assert row is not None and row.attempt == 1, "not retried"


async def test_a_deactivated_agent_is_refused_everywhere_and_its_tasks_fail_their_jobs(
    server: Running, agent: agents_pb2_grpc.AgentServiceStub, pool: asyncpg.Pool, tenant: Tenant
) -> None:
    held = await make_task(pool, tenant)
    leased = (await agent.LeaseTask(pb.LeaseTaskRequest(wait_seconds=5))).task
    assert leased.id == str(held.id)
    queued = await make_task(pool, tenant)
    async with open_channel(f"127.0.0.1:{server.port}", ADMIN_TOKEN) as channel:
        admin = admin_pb2_grpc.AdminServiceStub(channel)
        await admin.DeactivateAgent(admin_pb2.DeactivateAgentRequest(agent_id=str(tenant.agent_id)))

    for task in (held, queued):
        job = await jobs.get_job(pool, task.job_id, tenant.workspace_id)
        assert job is not None and job.state is JobState.FAILED
        assert f"agent 'test agent' ({tenant.agent_id}) was deactivated" in job.error_message

    ids = {"task_id": leased.id, "lease_token": leased.lease_token}
    calls = [
        agent.CheckIn(pb.CheckInRequest()),
        agent.LeaseTask(pb.LeaseTaskRequest(wait_seconds=0)),
        agent.Heartbeat(pb.HeartbeatRequest(**ids)),
        agent.GetExtractSpec(pb.GetExtractSpecRequest(**ids)),
        agent.GetLoadSpec(pb.GetLoadSpecRequest(**ids)),
        agent.CompleteTask(pb.CompleteTaskRequest(**ids)),
        agent.FailTask(pb.FailTaskRequest(**ids, error_message="x")),
        agent.ReleaseTask(pb.ReleaseTaskRequest(**ids, reason=pb.RELEASE_REASON_DRAIN)),
        agent.SignOff(pb.SignOffRequest()),
    ]
    assert len(calls) == len(pb.DESCRIPTOR.services_by_name["AgentService"].methods)
    for call in calls:
        assert await _code(call) == Code.UNAUTHENTICATED


async def test_eight_lessees_over_two_servers_lease_each_of_2000_tasks_once(
    server: Running, database_url: str, pool: asyncpg.Pool, tenant: Tenant, tmp_path: Path
) -> None:
    total = 2000
    job_ids = [uuid.uuid4() for _ in range(total)]
    await pool.executemany(
        "INSERT INTO job (id, workspace_id, kind, state, created_at, updated_at) "
        "VALUES ($1, $2, 'test', 'pending', now(), now())",
        [(j, tenant.workspace_id) for j in job_ids],
    )
    for job_id in job_ids:
        await tasks.insert_task(
            pool,
            id=uuid.uuid4(),
            job_id=job_id,
            workspace_id=tenant.workspace_id,
            kind=TaskKind.TEST,
            agent_id=tenant.agent_id,
            max_attempts=1,
            payload={},
            now=None,
        )
    completed: list[str] = []
    by_server: Counter[int] = Counter()
    drained = asyncio.Event()

    async def lessee(port: int) -> None:
        async with open_channel(f"127.0.0.1:{port}", tenant.agent_token) as channel:
            stub = agents_pb2_grpc.AgentServiceStub(channel)
            while not drained.is_set():
                answer = await stub.LeaseTask(pb.LeaseTaskRequest(wait_seconds=1), timeout=20)
                if not answer.HasField("task"):
                    continue
                await stub.CompleteTask(
                    pb.CompleteTaskRequest(
                        task_id=answer.task.id,
                        lease_token=answer.task.lease_token,
                        test=pb.TestResult(ok=True),
                    )
                )
                completed.append(answer.task.id)
                by_server[port] += 1
                if len(completed) == total:
                    drained.set()

    with server_process({"SETU_DATABASE_URL": database_url}, tmp_path / "b.log") as (_, port_b):
        await wait_healthy(port_b)
        await asyncio.wait_for(
            asyncio.gather(*(lessee(p) for p in [server.port] * 4 + [port_b] * 4)), 240
        )
    assert len(completed) == len(set(completed)) == total
    states = await pool.fetch("SELECT state, attempt, count(*) FROM task GROUP BY 1, 2")
    assert [(r["state"], r["attempt"], r["count"]) for r in states] == [("succeeded", 1, total)]
    leases = await pool.fetchval(
        "SELECT count(*) FROM job_event WHERE message LIKE 'Task test leased by %'"
    )
    assert leases == total, "one lease event per task: nobody leased a task twice"
    succeeded = await pool.fetchval("SELECT count(*) FROM job WHERE state = 'succeeded'")
    assert succeeded == total, "each completion ended its job"
    assert by_server[server.port] > 0 and by_server[port_b] > 0, "both servers leased"


async def test_heartbeats_keep_a_lease_alive_past_its_first_expiry(
    database_url: str, pool: asyncpg.Pool, tenant: Tenant
) -> None:
    clock = FakeClock(datetime(2030, 1, 1, tzinfo=UTC))
    # The reaper runs only when the test says, on the server's fake clock.
    async with in_process(database_url, clock, reaper_interval_seconds=3600.0) as server:
        task = await make_task(pool, tenant, now=clock.now())
        ttl = timedelta(seconds=server.settings.lease_ttl_seconds)
        async with open_channel(f"127.0.0.1:{server.port}", tenant.agent_token) as channel:
            agent = agents_pb2_grpc.AgentServiceStub(channel)
            leased = (await agent.LeaseTask(pb.LeaseTaskRequest(wait_seconds=5), timeout=20)).task
            live = {"task_id": leased.id, "lease_token": leased.lease_token}
            first_expiry = clock.now() + ttl
            # Three beats, each two thirds of a lease after the last: without
            # the extension the second would find the lease expired.
            for _ in range(3):
                clock.advance(ttl.total_seconds() * 2 / 3)
                await agent.Heartbeat(pb.HeartbeatRequest(**live))
                row = await tasks.get_task(pool, task.id)
                assert row is not None and row.lease_expires_at == clock.now() + ttl
            assert clock.now() > first_expiry
            assert (await server.services.reaper.run_once()).reaped == 0
            done = pb.CompleteTaskRequest(**live, test=pb.TestResult(ok=True))
            await agent.CompleteTask(done)
    row = await tasks.get_task(pool, task.id)
    assert row is not None and (row.state, row.attempt) == (TaskState.SUCCEEDED, 1)


async def test_a_result_of_another_kind_of_task_is_refused_and_changes_nothing(
    agent: agents_pb2_grpc.AgentServiceStub, pool: asyncpg.Pool, tenant: Tenant
) -> None:
    extract = await make_task(pool, tenant, kind=TaskKind.EXTRACT)
    test = await make_task(pool, tenant)
    for task, wrong in ((extract, "test"), (test, "extract")):
        leased = (await agent.LeaseTask(pb.LeaseTaskRequest(wait_seconds=5))).task
        assert leased.id == str(task.id)
        request = pb.CompleteTaskRequest(task_id=leased.id, lease_token=leased.lease_token)
        getattr(request, wrong).SetInParent()
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await agent.CompleteTask(request)
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert f"must be a {task.kind.value} result, not {wrong}" in (info.value.details() or "")
        still = await tasks.get_task(pool, task.id)
        assert still is not None and still.state is TaskState.LEASED
        if task.kind is TaskKind.EXTRACT:  # no result at all ends nothing either
            bare = pb.CompleteTaskRequest(task_id=leased.id, lease_token=leased.lease_token)
            with pytest.raises(grpc.aio.AioRpcError) as info:
                await agent.CompleteTask(bare)
            assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert "must be a extract result, not none" in (info.value.details() or "")
        job = await jobs.get_job(pool, task.job_id, tenant.workspace_id)
        assert job is not None and job.state is JobState.RUNNING


async def test_a_malformed_result_is_refused_and_changes_nothing(
    agent: agents_pb2_grpc.AgentServiceStub, pool: asyncpg.Pool, tenant: Tenant
) -> None:
    # A field this server does not know (as a newer or buggy agent sends
    # it), a missing artifact, a negative count: each answers
    # INVALID_ARGUMENT, naming the field, and the lease stays as it was.
    unknown = pb.LoadResult(rows_loaded=5)
    unknown.MergeFromString(b"\x48\x07")  # field 9, varint 7
    cases = [
        (TaskKind.LOAD, {"load": unknown}, "load result.#9"),
        (
            TaskKind.EXTRACT,
            {"extract": pb.ExtractResult(rows_extracted=5)},
            "artifact.blob_prefix is missing",
        ),
        (TaskKind.LOAD, {"load": pb.LoadResult(rows_loaded=-5)}, "rows_loaded is negative"),
    ]
    for kind, result, complaint in cases:
        task = await make_task(pool, tenant, kind=kind)
        leased = (await agent.LeaseTask(pb.LeaseTaskRequest(wait_seconds=5))).task
        assert leased.id == str(task.id)
        request = pb.CompleteTaskRequest(
            task_id=leased.id, lease_token=leased.lease_token, **result
        )
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await agent.CompleteTask(request)
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert complaint in (info.value.details() or "")
        still = await tasks.get_task(pool, task.id)
        assert still is not None and still.state is TaskState.LEASED and still.result is None
        job = await jobs.get_job(pool, task.job_id, tenant.workspace_id)
        assert job is not None and job.state is JobState.RUNNING
