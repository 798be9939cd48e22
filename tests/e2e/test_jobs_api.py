"""WatchJob, CancelJob, StartJob, ListJobs, ListJobEvents, GetJobOutputs."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime, timedelta

import asyncpg
import grpc
import pytest

from setu_client import SetuClient
from setu_client._proto.setu.v1 import common_pb2, jobs_pb2, jobs_pb2_grpc
from setu_client.channel import open_channel
from setu_client.errors import FailedPrecondition, InvalidArgument, JobNotFound
from setu_server.models import JobKind, JobState
from setu_server.server import Running
from setu_server.store import jobs
from tests.factories import Tenant, make_job, make_task, make_tenant

S = common_pb2


async def test_watch_streams_every_change_and_ends_after_the_terminal_one(
    server: Running, client: SetuClient, pool: asyncpg.Pool, tenant: Tenant
) -> None:
    job = await make_job(pool, tenant.workspace_id)
    seen: list[tuple[int, int]] = []
    first = asyncio.Event()

    async def watch() -> None:
        async for snapshot in client.watch_job(str(job.id)):
            seen.append((snapshot.version, snapshot.state))
            first.set()

    watching = asyncio.create_task(watch())
    await first.wait()
    await server.lifecycle.transition(job.id, JobState.RUNNING, "running")
    await server.lifecycle.transition(job.id, JobState.SUCCEEDED, "done")
    await asyncio.wait_for(watching, 30)
    assert seen[0] == (1, S.JOB_STATE_PENDING)
    assert seen[-1] == (3, S.JOB_STATE_SUCCEEDED)
    assert [v for v, _ in seen] == sorted(set(v for v, _ in seen)), "no repeats, in order"


async def test_watch_resumes_from_a_version_without_repeating_or_skipping_the_end(
    server: Running, client: SetuClient, pool: asyncpg.Pool, tenant: Tenant
) -> None:
    job = await make_job(pool, tenant.workspace_id)
    await server.lifecycle.transition(job.id, JobState.RUNNING, "running")
    await server.lifecycle.transition(job.id, JobState.SUCCEEDED, "done")
    resumed = [s async for s in client.watch_job(str(job.id), from_version=2)]
    assert [(s.version, s.state) for s in resumed] == [(3, S.JOB_STATE_SUCCEEDED)]
    assert [s async for s in client.watch_job(str(job.id), from_version=3)] == []


async def test_a_watcher_that_lags_skips_to_the_latest_snapshot(
    client: SetuClient, tenant: Tenant, pool: asyncpg.Pool
) -> None:
    job = await make_job(pool, tenant.workspace_id)
    first = asyncio.Event()
    seen: list[tuple[int, int]] = []

    async def watch() -> None:
        async for snapshot in client.watch_job(str(job.id)):
            seen.append((snapshot.version, snapshot.state))
            first.set()

    watching = asyncio.create_task(watch())
    await first.wait()
    # Two changes land together (one commit, as from another server): the
    # watcher gets the newest and never the one in between.
    async with pool.acquire() as conn, conn.transaction():
        await jobs.transition_job(conn, job.id, JobState.RUNNING, now=None, message="r")
        await jobs.transition_job(conn, job.id, JobState.CANCELLED, now=None, message="c")
    await asyncio.wait_for(watching, 30)
    assert seen == [(1, S.JOB_STATE_PENDING), (3, S.JOB_STATE_CANCELLED)]


async def test_cancel_of_a_job_with_nothing_executing_is_immediate_and_idempotent(
    client: SetuClient, pool: asyncpg.Pool, tenant: Tenant
) -> None:
    for state in (JobState.READY, JobState.PENDING, JobState.RUNNING):
        job = await make_job(pool, tenant.workspace_id, state=state)
        await make_task(pool, tenant, job=job, max_attempts=1)
        cancelled = await client.cancel_job(str(job.id), "no longer needed")
        assert cancelled.state == S.JOB_STATE_CANCELLED
        assert cancelled.error_message == "cancelled: no longer needed"
        again = await client.cancel_job(str(job.id))
        assert (again.state, again.version) == (cancelled.state, cancelled.version)
        left = await pool.fetchval(
            "SELECT count(*) FROM task WHERE job_id = $1 AND state = 'pending'", job.id
        )
        assert left == 0, "pending tasks are abandoned with their job"


async def test_cancel_of_an_executing_job_asks_its_runtime_to_stop(
    client: SetuClient, pool: asyncpg.Pool, tenant: Tenant
) -> None:
    job = await make_job(pool, tenant.workspace_id, state=JobState.RUNNING)
    task = await make_task(pool, tenant, job=job, max_attempts=1)
    await pool.execute("UPDATE task SET state = 'leased' WHERE id = $1", task.id)
    requested = await client.cancel_job(str(job.id))
    assert requested.state == S.JOB_STATE_RUNNING and requested.cancel_requested
    assert requested.version == job.version + 1
    again = await client.cancel_job(str(job.id))
    assert again.version == requested.version, "asking twice changes nothing"
    events = [e.message async for e in client.job_events(str(job.id))]
    assert events == ["Cancel requested; waiting for the runtime to stop"]


async def test_start_moves_a_ready_job_on_and_only_once(
    client: SetuClient, pool: asyncpg.Pool, tenant: Tenant
) -> None:
    job = await make_job(pool, tenant.workspace_id, state=JobState.READY)
    started = await client.start_job(str(job.id))
    assert started.state == S.JOB_STATE_PENDING
    with pytest.raises(FailedPrecondition, match="is pending: it cannot become pending"):
        await client.start_job(str(job.id))
    with pytest.raises(JobNotFound):
        await client.start_job(str(uuid.uuid4()))


async def test_list_jobs_filters_and_pages_newest_first(
    client: SetuClient, pool: asyncpg.Pool, tenant: Tenant
) -> None:
    base = datetime(2026, 3, 1, tzinfo=UTC)
    made = []
    for i in range(7):
        state = JobState.SUCCEEDED if i % 2 else JobState.PENDING
        made.append(
            await jobs.insert_job(
                pool,
                id=uuid.uuid4(),
                workspace_id=tenant.workspace_id,
                kind=JobKind.RUN if i < 5 else JobKind.TEST,
                state=state,
                now=base + timedelta(minutes=i),
            )
        )
    other = await make_tenant(pool)
    await make_job(pool, other.workspace_id)

    listed = [j.id async for j in client.list_jobs(page_size=2)]
    assert listed == [str(j.id) for j in reversed(made)], "all 7 over 4 pages, newest first"

    pending = [j.id async for j in client.list_jobs(states=[S.JOB_STATE_PENDING], page_size=3)]
    assert pending == [str(j.id) for j in reversed(made) if j.state is JobState.PENDING]

    runs = [j.id async for j in client.list_jobs(kinds=[S.JOB_KIND_RUN])]
    assert len(runs) == 5

    with pytest.raises(InvalidArgument, match="page_token"):
        await client._call(client._stub.ListJobs, jobs_pb2.ListJobsRequest(page_token="garbage!"))
    first = await client._call(client._stub.ListJobs, jobs_pb2.ListJobsRequest(page_size=2))
    with pytest.raises(InvalidArgument, match="different filters"):
        await client._call(
            client._stub.ListJobs,
            jobs_pb2.ListJobsRequest(
                page_size=2, page_token=first.next_page_token, states=[S.JOB_STATE_FAILED]
            ),
        )


async def test_events_page_in_order_and_outputs_report_counts(
    server: Running, client: SetuClient, pool: asyncpg.Pool, tenant: Tenant
) -> None:
    job = await make_job(pool, tenant.workspace_id, state=JobState.RUNNING)
    for i in range(5):
        await jobs.insert_job_event(pool, job.id, f"step {i}", now=None, stream="users")
    events = [e async for e in client.job_events(str(job.id))]
    assert [e.message for e in events] == [f"step {i}" for i in range(5)]
    later = [
        e.message async for e in client.job_events(str(job.id), after_sequence=events[2].sequence)
    ]
    assert later == ["step 3", "step 4"]

    await pool.execute(
        "INSERT INTO job_output (job_id, stream, rows_extracted, rows_loaded, updated_at) "
        "VALUES ($1, 'users', 10, 9, now()), ($1, 'orders', 5, 5, now())",
        job.id,
    )
    await pool.execute(
        "UPDATE job SET rows_extracted = 15, rows_loaded = 14, rows_total = 15 WHERE id = $1",
        job.id,
    )
    outputs = await client.job_outputs(str(job.id))
    assert [(s.stream, s.rows_extracted, s.rows_loaded) for s in outputs.streams] == [
        ("orders", 5, 5),
        ("users", 10, 9),
    ]
    assert (outputs.totals.rows_extracted, outputs.totals.rows_total) == (15, 15)

    stranger = await make_tenant(pool)
    async with SetuClient(f"127.0.0.1:{server.port}", stranger.api_key) as theirs:
        with pytest.raises(JobNotFound):
            await theirs.job_outputs(str(job.id))
        with pytest.raises(JobNotFound):
            [e async for e in theirs.job_events(str(job.id))]
        with pytest.raises(JobNotFound):
            await theirs.cancel_job(str(job.id))


async def test_filters_reject_unspecified_enum_values(server: Running, tenant: Tenant) -> None:
    async with open_channel(f"127.0.0.1:{server.port}", tenant.api_key) as channel:
        stub = jobs_pb2_grpc.JobOrchestrationServiceStub(channel)
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await stub.ListJobs(jobs_pb2.ListJobsRequest(states=[S.JOB_STATE_UNSPECIFIED]))
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
