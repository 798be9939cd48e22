"""WaitJob's contract (docs/jobs-and-tasks.md) on a real server, real PostgreSQL and the SDK."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import asyncpg
import grpc
import pytest

from setu_client import JobNotFound, JobNotStarted, SetuClient
from setu_client._proto.setu.v1 import common_pb2, jobs_pb2, jobs_pb2_grpc
from setu_client.channel import open_channel
from setu_server.models import Job, JobState
from setu_server.server import Running
from setu_server.store import jobs
from tests.factories import Tenant, make_job, make_tenant
from tests.servers import in_process, server_process, wait_healthy

PENDING, SUCCEEDED = common_pb2.JOB_STATE_PENDING, common_pb2.JOB_STATE_SUCCEEDED


@dataclass
class Env:
    server: Running
    client: SetuClient
    tenant: Tenant
    pool: asyncpg.Pool
    database_url: str

    async def job(self, state: JobState = JobState.PENDING) -> Job:
        return await make_job(self.pool, self.tenant.workspace_id, state=state)

    async def finish_elsewhere(self, job: Job, to: JobState = JobState.SUCCEEDED) -> None:
        """Finish a job as another server would: through the store, so this
        server learns of it only from PostgreSQL's notification."""
        if job.state is JobState.PENDING:
            await jobs.transition_job(self.pool, job.id, JobState.RUNNING, now=None, message="r")
        await jobs.transition_job(self.pool, job.id, to, now=None, message="done")

    async def wait_raw(self, job_id: str, timeout: float = 75) -> jobs_pb2.WaitJobResponse:
        async with open_channel(f"127.0.0.1:{self.server.port}", self.tenant.api_key) as ch:
            stub = jobs_pb2_grpc.JobOrchestrationServiceStub(ch)
            answer: jobs_pb2.WaitJobResponse = await stub.WaitJob(
                jobs_pb2.WaitJobRequest(job_id=job_id), timeout=timeout
            )
            return answer


@pytest.fixture
async def env(
    database_url: str, pool: asyncpg.Pool, request: pytest.FixtureRequest
) -> AsyncIterator[Env]:
    marker = request.node.get_closest_marker("server")
    overrides = marker.kwargs if marker else {}
    tenant = await make_tenant(pool)
    async with in_process(database_url, **overrides) as server:
        async with SetuClient(f"127.0.0.1:{server.port}", tenant.api_key) as client:
            yield Env(server, client, tenant, pool, database_url)


async def without_notifications(env: Env) -> None:
    """Stop this server's LISTEN, so a notification cannot rescue a wait
    that subscribed too late: only the order of subscribe and read can."""
    await env.server.listener.close()


# An hour-long cap and re-check: the only way to an answer before the
# deadline below is the one the order of subscribe and read gives.
@pytest.mark.server(watch_recheck_seconds=3600.0, wait_cap_seconds=3600.0)
async def test_a_job_ending_between_subscribe_and_read_is_not_missed(env: Env) -> None:
    job = await env.job()
    await without_notifications(env)

    async def finish_now(job_id: uuid.UUID) -> None:
        await env.finish_elsewhere(job)

    # The job ends after the subscribe. Subscribed first, the read that
    # follows sees it; read first (check-then-subscribe), the read saw it
    # pending and the wait never learns otherwise.
    env.server.jobs.hooks.after_subscribe = finish_now
    answer = await env.wait_raw(str(job.id), timeout=5)
    assert answer.state == SUCCEEDED and answer.terminal


@pytest.mark.server(watch_recheck_seconds=3600.0, wait_cap_seconds=3600.0)
async def test_a_job_ending_between_read_and_wait_wakes_the_waiter(env: Env) -> None:
    job = await env.job()
    await without_notifications(env)
    read_states: list[JobState] = []

    async def finish_after_read(job_id: uuid.UUID) -> None:
        current = await jobs.get_job(env.pool, job_id, env.tenant.workspace_id)
        assert current is not None
        read_states.append(current.state)
        await env.server.lifecycle.transition(job.id, JobState.RUNNING, "running")
        await env.server.lifecycle.transition(job.id, JobState.SUCCEEDED, "done")

    # The job ends after the read, published to this server's hub at once.
    # Subscribed before the read, the watch holds the end; subscribed after
    # it (check-then-subscribe), the publish found nobody and the wait parks.
    env.server.jobs.hooks.after_read = finish_after_read
    answer = await env.wait_raw(str(job.id), timeout=5)
    assert read_states == [JobState.PENDING], "the read saw the job still pending"
    assert answer.state == SUCCEEDED and answer.terminal


async def test_a_terminal_job_answers_at_once_from_the_database_after_a_restart(
    database_url: str, pool: asyncpg.Pool
) -> None:
    tenant = await make_tenant(pool)
    job = await make_job(pool, tenant.workspace_id, state=JobState.RUNNING)
    async with in_process(database_url) as first:
        await first.lifecycle.transition(job.id, JobState.FAILED, "x", error_message="it broke")
    # A fresh process has nothing in memory; with an hour-long cap, only an
    # answer from the database returns before the guard below.
    async with in_process(database_url, wait_cap_seconds=3600.0) as second:
        async with SetuClient(f"127.0.0.1:{second.port}", tenant.api_key) as client:
            answer = await asyncio.wait_for(client.wait_for_job(str(job.id)), 30)
    assert answer.state == common_pb2.JOB_STATE_FAILED
    assert answer.error_message == "it broke"
    assert answer.version == 2


async def test_ready_is_failed_precondition_and_unknown_or_foreign_is_not_found(
    env: Env,
) -> None:
    ready = await env.job(JobState.READY)
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await env.wait_raw(str(ready.id))
    assert info.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    with pytest.raises(JobNotStarted):
        await env.client.wait_for_job(str(ready.id))

    stranger = await make_tenant(env.pool)
    foreign = await make_job(env.pool, stranger.workspace_id)
    for job_id in (str(uuid.uuid4()), str(foreign.id)):
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await env.wait_raw(job_id)
        assert info.value.code() == grpc.StatusCode.NOT_FOUND
        with pytest.raises(JobNotFound):
            await env.client.wait_for_job(job_id)


@pytest.mark.looptime(noop_cycles=5000)
async def test_the_cap_answers_ok_and_the_sdk_waits_on_until_minute_five(env: Env) -> None:
    loop = asyncio.get_running_loop()
    job = await env.job()
    started = loop.time()
    answer = await env.wait_raw(str(job.id))
    assert answer.state == PENDING and not answer.terminal
    # The cap, not sooner; the fake clock may run on to the listener's next
    # ping (10 s) while the answer crosses the real socket.
    assert 59.99 < loop.time() - started < 75

    calls = 0

    async def count(job_id: uuid.UUID) -> None:
        nonlocal calls
        calls += 1

    env.server.jobs.hooks.after_subscribe = count

    async def finish_at_minute_five() -> None:
        await asyncio.sleep(300)
        await env.finish_elsewhere(job)

    started = loop.time()
    finisher = asyncio.create_task(finish_at_minute_five())
    answer = await env.client.wait_for_job(str(job.id))
    await finisher
    assert answer.state == SUCCEEDED
    assert loop.time() - started > 299.99
    assert calls >= 4, "the SDK re-issued WaitJob after each capped answer"


async def test_a_short_client_deadline_gets_ok_before_it(env: Env) -> None:
    job = await env.job()
    answer = await env.wait_raw(str(job.id), timeout=10)
    assert answer.state == PENDING and not answer.terminal


async def test_shutdown_answers_parked_waits_at_once_with_their_latest_value(
    database_url: str, pool: asyncpg.Pool
) -> None:
    tenant = await make_tenant(pool)
    job = await make_job(pool, tenant.workspace_id)
    parked = asyncio.Event()

    async def mark(job_id: uuid.UUID) -> None:
        parked.set()

    async with in_process(database_url, wait_cap_seconds=3600.0) as server:
        server.jobs.hooks.after_read = mark
        async with open_channel(f"127.0.0.1:{server.port}", tenant.api_key) as channel:
            stub = jobs_pb2_grpc.JobOrchestrationServiceStub(channel)
            call = stub.WaitJob(jobs_pb2.WaitJobRequest(job_id=str(job.id)))
            await parked.wait()
            await server.lifecycle.transition(job.id, JobState.RUNNING, "running")
            stopping = asyncio.create_task(server.stop(grace=30))
            answer = await asyncio.wait_for(call, 10)
            await stopping
    assert answer.state == common_pb2.JOB_STATE_RUNNING and answer.version == 2


@pytest.mark.server(watch_recheck_seconds=3600.0, wait_cap_seconds=3600.0)
async def test_a_job_finished_through_server_a_wakes_a_waiter_on_server_b(
    env: Env, tmp_path: Path
) -> None:
    job = await env.job()
    parked = asyncio.Event()

    async def mark(job_id: uuid.UUID) -> None:
        parked.set()

    env.server.jobs.hooks.after_read = mark  # server B: this process
    with server_process({"SETU_DATABASE_URL": env.database_url}, tmp_path / "a.log") as (_, port):
        await wait_healthy(port)
        waiting = asyncio.create_task(env.client.wait_for_job(str(job.id)))
        await parked.wait()
        async with SetuClient(f"127.0.0.1:{port}", env.tenant.api_key) as server_a:
            await server_a.cancel_job(str(job.id), "from server A")
        answer = await asyncio.wait_for(waiting, 30)
    assert answer.state == common_pb2.JOB_STATE_CANCELLED
    assert answer.error_message == "cancelled: from server A"


# An hour-long cap and re-check leave the reconnect's re-read as the only way back.
@pytest.mark.server(watch_recheck_seconds=3600.0, wait_cap_seconds=3600.0)
async def test_killing_the_listen_backend_loses_no_wake_up(env: Env, setu_pg_url: str) -> None:
    listener = env.server.listener
    waited = [await env.job() for _ in range(20)]
    parked = 0
    all_parked = asyncio.Event()

    async def mark(job_id: uuid.UUID) -> None:
        nonlocal parked
        parked += 1
        if parked == len(waited):
            all_parked.set()

    env.server.jobs.hooks.after_read = mark
    waiting = [asyncio.create_task(env.client.wait_for_job(str(j.id))) for j in waited]
    await all_parked.wait()

    sessions = listener.sessions
    database = await env.pool.fetchval("SELECT current_database()")
    maintenance = await asyncpg.connect(setu_pg_url)
    async with env.pool.acquire() as conn:
        # Keep the listener out while half the jobs finish, so their
        # notifications are certainly lost, then let it back in.
        await maintenance.execute(f"ALTER DATABASE {database} ALLOW_CONNECTIONS false")
        killed = await conn.fetchval(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE application_name = 'setu-listener' AND datname = current_database()"
        )
        assert killed == 1
        for job in waited[:10]:
            await jobs.transition_job(conn, job.id, JobState.RUNNING, now=None, message="r")
            await jobs.transition_job(conn, job.id, JobState.SUCCEEDED, now=None, message="d")
        await maintenance.execute(f"ALTER DATABASE {database} ALLOW_CONNECTIONS true")
    await maintenance.close()
    await asyncio.wait_for(listener.wait_for_session(sessions + 1), 30)
    for job in waited[10:]:
        await env.finish_elsewhere(job)
    answers = await asyncio.wait_for(asyncio.gather(*waiting), 30)
    assert [a.state for a in answers] == [SUCCEEDED] * len(waited)
